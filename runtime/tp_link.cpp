#include "runtime/tp_link.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>

#include "runtime/error.h"

namespace strata {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'P', 'L'};
constexpr std::size_t kHelloBytes = 20, kHeaderBytes = 12;
constexpr std::chrono::milliseconds kPollSlice(20);
constexpr int kSendTimeoutS = 300;  // a peer that stops reading for this long is dead
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

// Low latency (small messages every layer), keepalive (a vanished host is noticed), and a
// send timeout; the socket is blocking (recv is always preceded by poll).
std::shared_ptr<TpLink> make_link(tcp::socket& sock, const std::string& peer) {
  boost::system::error_code ec;
  sock.set_option(tcp::no_delay(true), ec);
  sock.set_option(asio::socket_base::keep_alive(true), ec);
  sock.native_non_blocking(false, ec);
  sock.non_blocking(false, ec);
  const int fd = sock.release(ec);
  if (ec) throw InternalError("tensor-parallel link: " + ec.message());
  timeval tv{};
  tv.tv_sec = kSendTimeoutS;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return std::make_shared<TpLink>(fd, peer);
}

}  // namespace

TpLink::TpLink(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

TpLink::~TpLink() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TpLink::error() const {
  std::lock_guard lk(err_mu_);
  return error_;
}

void TpLink::send(TpMsg type, const void* data, std::size_t n) {
  std::uint8_t head[kHeaderBytes];
  put_u32(head, static_cast<std::uint32_t>(type));
  for (int i = 0; i < 8; ++i) head[4 + i] = static_cast<std::uint8_t>(std::uint64_t(n) >> (8 * i));
  std::lock_guard lk(send_mu_);
  auto put = [&](const std::uint8_t* p, std::size_t len) {
    while (len > 0) {
      const auto w = ::send(fd_, p, len, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const std::string why = (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                                    ? "send stalled for " + std::to_string(kSendTimeoutS) + " s"
                                    : std::string(std::strerror(errno));
        {
          std::lock_guard el(err_mu_);
          if (error_.empty()) error_ = why;
        }
        throw InternalError("tensor-parallel link to " + peer_ + ": " + why);
      }
      p += w;
      len -= static_cast<std::size_t>(w);
    }
  };
  put(head, kHeaderBytes);
  put(static_cast<const std::uint8_t*>(data), n);
}

TpLink::Recv TpLink::read_exact(std::uint8_t* p, std::size_t n, Clock::time_point deadline,
                                const std::function<bool()>& stop, bool started) {
  auto closed = [&](const std::string& why) {
    std::lock_guard el(err_mu_);
    if (error_.empty()) error_ = why;
    broken_ = true;
    return Recv::kClosed;
  };
  std::size_t got = 0;
  while (got < n) {
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 0);
    if (ready == 0) {
      // Nothing waiting: give up here only if asked to (a partial message breaks the stream).
      const bool partial = started || got > 0;
      if (stop && stop()) {
        if (partial) broken_ = true;
        return Recv::kStopped;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        if (partial) broken_ = true;
        return Recv::kTimeout;
      }
      const auto wait = std::min<Clock::duration>(deadline - now, kPollSlice);
      ::poll(&pfd, 1,
             static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) +
                 1);
      continue;
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      return closed(std::strerror(errno));
    }
    const auto r = ::recv(fd_, p + got, n - got, 0);
    if (r == 0) return closed("the connection was closed by " + peer_);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return closed(std::strerror(errno));
    }
    got += static_cast<std::size_t>(r);
  }
  return Recv::kOk;
}

TpLink::Recv TpLink::recv(TpMessage& out, Clock::time_point deadline,
                          const std::function<bool()>& stop) {
  if (broken_) {
    std::lock_guard el(err_mu_);
    if (error_.empty()) error_ = "the stream was interrupted inside a message";
    return Recv::kClosed;
  }
  std::uint8_t head[kHeaderBytes];
  auto st = read_exact(head, kHeaderBytes, deadline, stop, false);
  if (st != Recv::kOk) return st;
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(head[4 + i]) << (8 * i);
  if (n > (std::uint64_t{1} << 40)) {
    std::lock_guard el(err_mu_);
    error_ = "a message of " + std::to_string(n) + " bytes (not a strata rank?)";
    broken_ = true;
    return Recv::kClosed;
  }
  out.type = static_cast<TpMsg>(get_u32(head));
  out.body.resize(static_cast<std::size_t>(n));
  return read_exact(out.body.data(), out.body.size(), deadline, stop, true);
}

TpEndpoint tp_link_endpoint(const TpEndpoint& master) {
  if (master.port == 65535)
    throw ConfigError("--tp-master", "port 65535 leaves no port for the rank links (port + 1)");
  TpEndpoint e = master;
  if (e.port != 0) ++e.port;
  return e;
}

TpMesh tp_mesh_accept(const TpEndpoint& at, int size, std::chrono::milliseconds timeout,
                      const std::function<void(std::uint16_t)>& on_listening) {
  TpMesh mesh;
  mesh.rank = 0;
  mesh.size = size;
  mesh.control.resize(static_cast<std::size_t>(size));
  mesh.data.resize(static_cast<std::size_t>(size));
  asio::io_context io;
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(at.host, std::to_string(at.port), ec);
  if (ec || results.empty())
    throw ConfigError(kKey, "rank 0 cannot resolve " + where(at) + ": " + ec.message());
  tcp::acceptor acc(io);
  const tcp::endpoint ep = *results.begin();
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw ConfigError(
        kKey, "rank 0 cannot listen for the rank links on " + where(at) + ": " + ec.message());
  if (on_listening) on_listening(acc.local_endpoint().port());
  if (size < 2) return mesh;

  struct Conn {
    explicit Conn(asio::io_context& io) : sock(io) {}
    tcp::socket sock;
    std::array<std::uint8_t, kHelloBytes> hello{};
  };
  int missing = 2 * (size - 1);
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
            if (e2 || std::memcmp(c->hello.data(), kMagic, sizeof kMagic) != 0) {
              problem = "a connection that is not a strata rank link";
              return;
            }
            const int r = static_cast<int>(get_u32(c->hello.data() + 8));
            const int sz = static_cast<int>(get_u32(c->hello.data() + 12));
            const auto ch = get_u32(c->hello.data() + 16);
            if (sz != size || r < 1 || r >= size || ch > 1) {
              problem =
                  "refused a link from rank " + std::to_string(r) + " of " + std::to_string(sz);
              return;
            }
            auto& slot = (ch == 0 ? mesh.control : mesh.data)[static_cast<std::size_t>(r)];
            if (slot) {
              problem = "rank " + std::to_string(r) + " connected twice";
              return;
            }
            slot = make_link(c->sock, "rank " + std::to_string(r));
            if (--missing == 0) io.stop();
          });
    });
  };
  accept_next();
  io.run_for(timeout);
  if (missing == 0) return mesh;
  std::string who;
  for (int r = 1; r < size; ++r)
    if (!mesh.control[static_cast<std::size_t>(r)] || !mesh.data[static_cast<std::size_t>(r)])
      who += (who.empty() ? "" : ", ") + std::to_string(r);
  throw ConfigError(kKey, "rank 0 waited " + std::to_string(timeout.count()) + " ms on " +
                              where(at) + " for the links of rank(s) " + who +
                              (problem.empty() ? "" : " (last problem: " + problem + ")"));
}

TpMesh tp_mesh_connect(const TpEndpoint& at, int rank, int size,
                       std::chrono::milliseconds timeout) {
  TpMesh mesh;
  mesh.rank = rank;
  mesh.size = size;
  const auto deadline = Clock::now() + timeout;
  for (std::uint32_t ch = 0; ch < 2; ++ch) {
    std::string last = "no attempt";
    std::shared_ptr<TpLink> link;
    while (!link && Clock::now() < deadline) {
      asio::io_context io;
      boost::system::error_code ec;
      tcp::resolver resolver(io);
      const auto results = resolver.resolve(at.host, std::to_string(at.port), ec);
      if (ec || results.empty()) {
        last = "cannot resolve: " + ec.message();
      } else {
        tcp::socket sock(io);
        std::array<std::uint8_t, kHelloBytes> hello{};
        std::memcpy(hello.data(), kMagic, sizeof kMagic);
        put_u32(hello.data() + 8, static_cast<std::uint32_t>(rank));
        put_u32(hello.data() + 12, static_cast<std::uint32_t>(size));
        put_u32(hello.data() + 16, ch);
        boost::system::error_code err;
        bool done = false;
        asio::async_connect(sock, results, [&](boost::system::error_code e, const tcp::endpoint&) {
          if (e) {
            err = e;
            return;
          }
          asio::async_write(sock, asio::buffer(hello),
                            [&](boost::system::error_code e2, std::size_t) {
                              err = e2;
                              done = !e2;
                            });
        });
        io.run_until(deadline);
        if (done) {
          link = make_link(sock, "rank 0");
          break;
        }
        last = err ? err.message() : "timed out";
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(
          std::max<Clock::duration>(deadline - Clock::now(), Clock::duration(0)),
          std::chrono::milliseconds(50)));
    }
    if (!link)
      throw ConfigError(kKey, "rank " + std::to_string(rank) +
                                  " could not open its links to rank 0 at " + where(at) +
                                  " within " + std::to_string(timeout.count()) +
                                  " ms (last error: " + last + ")");
    (ch == 0 ? mesh.control : mesh.data).push_back(std::move(link));
  }
  return mesh;
}

}  // namespace strata
