// Who may call the server from where: the Host check (DNS rebinding), the Origin rules
// (cross-site pages) and the JSON-only body rule (CORS-simple POSTs). Pure: strings in,
// verdicts out; the server turns a refusal into 421/403/415 (docs/api.md, "Callers").
//
//  - Host must name this server: a loopback name (localhost, *.localhost, 127.0.0.0/8,
//    ::1), the bound address (any IP literal when bound to 0.0.0.0 or ::) or an entry of
//    server.allowed_hosts ("*": any). A page on attacker.example rebinding its name to
//    127.0.0.1 sends Host: attacker.example and is refused.
//  - No Origin (curl, SDKs, other servers) is accepted. A browser's Origin is accepted when
//    it is the server's own (http(s)://<Host>) or listed in server.cors_origins ("*": any
//    origin but "null"); private routes (/admin, /metrics) accept only their own origin.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config.h"

namespace strata::api {

class OriginPolicy {
 public:
  explicit OriginPolicy(const ServerSection& s);

  bool host_ok(std::string_view host_header) const;
  // `origin`: the Origin header, nullopt when absent; `host_header` already checked.
  bool origin_ok(std::optional<std::string_view> origin, std::string_view host_header,
                 bool private_route) const;
  // Cross-origin reads allowed (Access-Control-Allow-Origin is sent) for this origin.
  bool cors_listed(std::string_view origin) const;

 private:
  std::string bound_;  // normalised bound address; empty when bound to all addresses
  std::vector<std::string> hosts_, origins_;
  bool any_host_ = false, any_origin_ = false;
};

// "application/json" with any parameters (charset=utf-8), case-insensitive.
bool is_json_content_type(std::string_view content_type);

}  // namespace strata::api
