#include "api/origin_policy.h"

#include <boost/asio/ip/address.hpp>
#include <cctype>

namespace strata::api {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "Name:port", "[v6]:port" -> the lowercased name without port, brackets or trailing dot.
std::string host_name(std::string_view h) {
  h = trim(h);
  if (!h.empty() && h.front() == '[') {
    const auto close = h.find(']');
    h = close == std::string_view::npos ? h.substr(1) : h.substr(1, close - 1);
  } else if (const auto colon = h.rfind(':');
             colon != std::string_view::npos && h.find(':') == colon) {
    h = h.substr(0, colon);
  }
  if (!h.empty() && h.back() == '.') h.remove_suffix(1);
  return lower(h);
}

std::optional<boost::asio::ip::address> ip_of(const std::string& name) {
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(name, ec);
  if (ec) return std::nullopt;
  return a;
}

bool loopback_name(const std::string& name) {
  if (name == "localhost") return true;
  if (name.size() > 10 && name.ends_with(".localhost")) return true;
  const auto ip = ip_of(name);
  return ip && ip->is_loopback();
}

}  // namespace

OriginPolicy::OriginPolicy(const ServerSection& s) {
  if (const auto ip = ip_of(s.host); ip && !ip->is_unspecified()) bound_ = ip->to_string();
  for (const auto& h : s.allowed_hosts) {
    if (h == "*") any_host_ = true;
    hosts_.push_back(host_name(h));
  }
  for (const auto& o : s.cors_origins) {
    if (o == "*") any_origin_ = true;
    origins_.push_back(lower(trim(o)));
  }
}

bool OriginPolicy::host_ok(std::string_view host_header) const {
  const std::string name = host_name(host_header);
  if (name.empty()) return false;
  if (any_host_ || loopback_name(name)) return true;
  if (const auto ip = ip_of(name)) {
    if (bound_.empty()) return true;  // bound to every address: any of ours may be named
    if (ip->to_string() == bound_) return true;
  }
  for (const auto& h : hosts_)
    if (h == name) return true;
  return false;
}

bool OriginPolicy::cors_listed(std::string_view origin) const {
  const std::string o = lower(trim(origin));
  if (o == "null" || o.empty()) return false;  // sandboxed frames, file: pages: never "*"
  if (any_origin_) return true;
  for (const auto& x : origins_)
    if (x == o) return true;
  return false;
}

bool OriginPolicy::origin_ok(std::optional<std::string_view> origin, std::string_view host_header,
                             bool private_route) const {
  if (!origin) return true;
  const std::string o = lower(trim(*origin));
  const std::string host = lower(trim(host_header));
  if (!host.empty() && (o == "http://" + host || o == "https://" + host)) return true;
  return !private_route && cors_listed(o);
}

bool is_json_content_type(std::string_view content_type) {
  const auto semi = content_type.find(';');
  return lower(trim(content_type.substr(0, semi))) == "application/json";
}

}  // namespace strata::api
