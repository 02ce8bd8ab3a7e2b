#include "runtime/tp/tp_link.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"
#include "runtime/tp/tp_socket.h"

namespace strata {
namespace {

using tpnet::Clock;
using tpnet::get_u32;
using tpnet::put_u32;
using tpnet::where;

const std::string kMagic = "STRATAPL";
constexpr std::size_t kHelloBytes = 20, kHeaderBytes = 12;
constexpr std::chrono::milliseconds kPollSlice(20);
constexpr int kSendTimeoutS = 300;  // a peer that stops reading for this long is dead
const char* const kKey = "backend.tp_master";

// Low latency (small messages every layer), keepalive (a vanished host is noticed), and a
// send timeout; the socket is blocking (recv is always preceded by poll).
std::shared_ptr<TpLink> make_link(int fd, const std::string& peer) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
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

bool TpLink::has_data() const {
  pollfd pfd{fd_, POLLIN, 0};
  return ::poll(&pfd, 1, 0) > 0;
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
  tpnet::Listener lis(at, "for the rank links ");
  if (on_listening) on_listening(lis.port());
  if (size < 2) return mesh;

  int missing = 2 * (size - 1);
  std::string& problem = lis.problem();
  auto on_hello = [&](std::shared_ptr<tpnet::Socket> sock, const std::uint8_t* hello) {
    const int r = static_cast<int>(get_u32(hello + 8));
    const int sz = static_cast<int>(get_u32(hello + 12));
    const auto ch = get_u32(hello + 16);
    if (sz != size || r < 1 || r >= size || ch > 1) {
      problem = "refused a link from rank " + std::to_string(r) + " of " + std::to_string(sz);
      return;
    }
    auto& slot = (ch == 0 ? mesh.control : mesh.data)[static_cast<std::size_t>(r)];
    if (slot) {
      problem = "rank " + std::to_string(r) + " connected twice";
      return;
    }
    boost::system::error_code ec;
    sock->native_non_blocking(false, ec);
    sock->non_blocking(false, ec);
    const int fd = sock->release(ec);
    if (ec) throw InternalError("tensor-parallel link: " + ec.message());
    slot = make_link(fd, "rank " + std::to_string(r));
    if (--missing == 0) lis.stop();
  };
  lis.run(kMagic, kHelloBytes, on_hello, timeout);
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
    std::vector<std::uint8_t> hello(kHelloBytes), none;
    std::memcpy(hello.data(), kMagic.data(), kMagic.size());
    put_u32(hello.data() + 8, static_cast<std::uint32_t>(rank));
    put_u32(hello.data() + 12, static_cast<std::uint32_t>(size));
    put_u32(hello.data() + 16, ch);
    std::string last;
    const int fd = tpnet::dial(at, hello, 0, none, deadline, last);
    auto link = fd >= 0 ? make_link(fd, "rank 0") : nullptr;
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
