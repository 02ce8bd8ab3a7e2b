#include "runtime/tp/tp_rendezvous.h"

#include <unistd.h>

#include <boost/asio/write.hpp>
#include <cstring>
#include <memory>
#include <set>

#include "runtime/error.h"
#include "runtime/tp/tp_socket.h"

namespace strata {
namespace {

namespace asio = boost::asio;
using tpnet::Clock;
using tpnet::get_u32;
using tpnet::put_u32;
using tpnet::where;

const std::string kMagic = "STRATATP";
constexpr std::size_t kHelloBytes = 16, kReplyBytes = 4 + kTpIdBytes;
const char* const kKey = "backend.tp_master";

std::string secs(std::chrono::milliseconds t) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(t.count()) / 1000.0);
  return b;
}

const char* status_text(std::uint32_t s) {
  switch (s) {
    case 1:
      return "the group size differs from rank 0's --tp-size";
    case 2:
      return "the rank is outside [1, tp_size)";
    case 3:
      return "another process already joined with this rank";
  }
  return "unknown status";
}

}  // namespace

TpEndpoint parse_tp_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  auto bad = [&] { return ConfigError("--tp-master", "expects host:port, got '" + text + "'"); };
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) throw bad();
  TpEndpoint e;
  e.host = text.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']')
    e.host = e.host.substr(1, e.host.size() - 2);
  unsigned long port = 0;
  for (char ch : text.substr(colon + 1)) {
    if (ch < '0' || ch > '9') throw bad();
    port = port * 10 + static_cast<unsigned long>(ch - '0');
    if (port > 65535) throw bad();
  }
  e.port = static_cast<std::uint16_t>(port);
  return e;
}

void tp_rendezvous_serve(const TpEndpoint& at, int size, const TpUniqueId& id,
                         std::chrono::milliseconds timeout,
                         const std::function<void(std::uint16_t)>& on_listening) {
  if (size < 1) throw ConfigError("--tp-size", "must be >= 1");
  tpnet::Listener lis(at, "");
  if (on_listening) on_listening(lis.port());
  if (size == 1) return;

  std::set<int> joined, pending;
  std::string& problem = lis.problem();
  auto on_hello = [&](std::shared_ptr<tpnet::Socket> sock, const std::uint8_t* hello) {
    const int rank = static_cast<int>(get_u32(hello + 8));
    const int sz = static_cast<int>(get_u32(hello + 12));
    std::uint32_t status = 0;
    if (sz != size)
      status = 1;
    else if (rank < 1 || rank >= size)
      status = 2;
    else if (joined.count(rank) || pending.count(rank))
      status = 3;
    if (status)
      problem = "refused rank " + std::to_string(rank) + " (tp_size " + std::to_string(sz) +
                "): " + status_text(status);
    else
      pending.insert(rank);
    auto reply = std::make_shared<std::array<std::uint8_t, kReplyBytes>>();
    reply->fill(0);
    put_u32(reply->data(), status);
    if (!status) std::memcpy(reply->data() + 4, id.data(), kTpIdBytes);
    asio::async_write(*sock, asio::buffer(*reply),
                      [&, sock, reply, rank, status](boost::system::error_code e3, std::size_t) {
                        if (status) return;
                        pending.erase(rank);
                        if (e3) {
                          problem = "rank " + std::to_string(rank) +
                                    " left before receiving the id: " + e3.message();
                          return;
                        }
                        joined.insert(rank);
                        if (static_cast<int>(joined.size()) == size - 1) lis.stop();
                      });
  };
  lis.run(kMagic, kHelloBytes, on_hello, timeout);
  if (static_cast<int>(joined.size()) == size - 1) return;
  std::string missing;
  for (int r = 1; r < size; ++r)
    if (!joined.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  throw ConfigError(kKey, "rank 0 waited " + secs(timeout) + " on " + where(at) + " for rank(s) " +
                              missing + " of " + std::to_string(size) + " to join" +
                              (problem.empty() ? "" : " (last problem: " + problem + ")"));
}

TpUniqueId tp_rendezvous_join(const TpEndpoint& master, int rank, int size,
                              std::chrono::milliseconds timeout) {
  if (size < 2 || rank < 1 || rank >= size)
    throw ConfigError("--tp-rank", "rank " + std::to_string(rank) + " cannot join a group of " +
                                       std::to_string(size) +
                                       " (joining ranks are 1 .. tp_size-1)");
  std::vector<std::uint8_t> hello(kHelloBytes), reply;
  std::memcpy(hello.data(), kMagic.data(), kMagic.size());
  put_u32(hello.data() + 8, static_cast<std::uint32_t>(rank));
  put_u32(hello.data() + 12, static_cast<std::uint32_t>(size));
  std::string last;
  const int fd = tpnet::dial(master, hello, kReplyBytes, reply, Clock::now() + timeout, last);
  if (fd >= 0) {
    ::close(fd);
    const auto status = get_u32(reply.data());
    if (status)
      throw ConfigError(kKey, "rank 0 at " + where(master) + " refused rank " +
                                  std::to_string(rank) + " of " + std::to_string(size) + ": " +
                                  status_text(status));
    TpUniqueId id;
    std::memcpy(id.data(), reply.data() + 4, kTpIdBytes);
    return id;
  }
  throw ConfigError(kKey, "rank " + std::to_string(rank) + " of " + std::to_string(size) +
                              " could not join rank 0 at " + where(master) + " within " +
                              secs(timeout) + " (last error: " + last + ")");
}

}  // namespace strata
