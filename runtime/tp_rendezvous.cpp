#include "runtime/tp_rendezvous.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "runtime/error.h"

namespace strata {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'T', 'P'};
constexpr std::size_t kHelloBytes = 16, kReplyBytes = 4 + kTpIdBytes;
const char* const kKey = "backend.tp_master";

void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

std::string where(const TpEndpoint& e) {
  return e.host + ":" + std::to_string(e.port);
}
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

struct Conn {
  explicit Conn(asio::io_context& io) : sock(io) {}
  tcp::socket sock;
  std::array<std::uint8_t, kHelloBytes> hello{};
  std::array<std::uint8_t, kReplyBytes> reply{};
};

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
  asio::io_context io;
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(at.host, std::to_string(at.port), ec);
  if (ec || results.empty())
    throw ConfigError(kKey, "rank 0 cannot resolve " + where(at) + ": " + ec.message());
  const tcp::endpoint ep = *results.begin();
  tcp::acceptor acc(io);
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw ConfigError(kKey, "rank 0 cannot listen on " + where(at) + ": " + ec.message());
  if (on_listening) on_listening(acc.local_endpoint().port());
  if (size == 1) return;

  std::set<int> joined, pending;
  std::string problem;
  std::function<void()> accept_next = [&] {
    auto c = std::make_shared<Conn>(io);
    acc.async_accept(c->sock, [&, c](boost::system::error_code e) {
      if (e) {
        if (e != asio::error::operation_aborted) accept_next();
        return;
      }
      accept_next();
      asio::async_read(
          c->sock, asio::buffer(c->hello), [&, c](boost::system::error_code e2, std::size_t) {
            if (e2) {
              problem = "a connection closed before naming its rank";
              return;
            }
            if (std::memcmp(c->hello.data(), kMagic, sizeof kMagic) != 0) {
              problem = "a connection that is not a strata rank";
              return;
            }
            const int rank = static_cast<int>(get_u32(c->hello.data() + 8));
            const int sz = static_cast<int>(get_u32(c->hello.data() + 12));
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
            put_u32(c->reply.data(), status);
            if (!status) std::memcpy(c->reply.data() + 4, id.data(), kTpIdBytes);
            asio::async_write(c->sock, asio::buffer(c->reply),
                              [&, c, rank, status](boost::system::error_code e3, std::size_t) {
                                if (status) return;
                                pending.erase(rank);
                                if (e3) {
                                  problem = "rank " + std::to_string(rank) +
                                            " left before receiving the id: " + e3.message();
                                  return;
                                }
                                joined.insert(rank);
                                if (static_cast<int>(joined.size()) == size - 1) io.stop();
                              });
          });
    });
  };
  accept_next();
  io.run_for(timeout);
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
  const auto deadline = Clock::now() + timeout;
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    asio::io_context io;
    boost::system::error_code ec;
    tcp::resolver resolver(io);
    const auto results = resolver.resolve(master.host, std::to_string(master.port), ec);
    if (ec || results.empty()) {
      last = "cannot resolve: " + ec.message();
    } else {
      tcp::socket sock(io);
      std::array<std::uint8_t, kHelloBytes> hello{};
      std::array<std::uint8_t, kReplyBytes> reply{};
      std::memcpy(hello.data(), kMagic, sizeof kMagic);
      put_u32(hello.data() + 8, static_cast<std::uint32_t>(rank));
      put_u32(hello.data() + 12, static_cast<std::uint32_t>(size));
      boost::system::error_code err;
      bool done = false;
      asio::async_connect(sock, results, [&](boost::system::error_code e, const tcp::endpoint&) {
        if (e) {
          err = e;
          return;
        }
        asio::async_write(sock, asio::buffer(hello),
                          [&](boost::system::error_code e2, std::size_t) {
                            if (e2) {
                              err = e2;
                              return;
                            }
                            asio::async_read(sock, asio::buffer(reply),
                                             [&](boost::system::error_code e3, std::size_t) {
                                               err = e3;
                                               done = !e3;
                                             });
                          });
      });
      io.run_until(deadline);
      if (done) {
        const auto status = get_u32(reply.data());
        if (status)
          throw ConfigError(kKey, "rank 0 at " + where(master) + " refused rank " +
                                      std::to_string(rank) + " of " + std::to_string(size) + ": " +
                                      status_text(status));
        TpUniqueId id;
        std::memcpy(id.data(), reply.data() + 4, kTpIdBytes);
        return id;
      }
      if (!err) {
        last = "connected, but rank 0 sent no id";
        break;  // the deadline passed inside run_until
      }
      last = err.message();
    }
    const auto left = deadline - Clock::now();
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(100)));
  }
  throw ConfigError(kKey, "rank " + std::to_string(rank) + " of " + std::to_string(size) +
                              " could not join rank 0 at " + where(master) + " within " +
                              secs(timeout) + " (last error: " + last + ")");
}

}  // namespace strata
