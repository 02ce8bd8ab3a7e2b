#include "runtime/tp/tp_socket.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <thread>

#include "runtime/error.h"

namespace strata::tpnet {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

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

Listener::Listener(const TpEndpoint& at, const std::string& what) : acc_(io_) {
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  const auto results = resolver.resolve(at.host, std::to_string(at.port), ec);
  if (ec || results.empty())
    throw ConfigError("backend.tp_master",
                      "rank 0 cannot resolve " + where(at) + ": " + ec.message());
  const tcp::endpoint ep = *results.begin();
  acc_.open(ep.protocol(), ec);
  if (!ec) acc_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc_.bind(ep, ec);
  if (!ec) acc_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw ConfigError("backend.tp_master",
                      "rank 0 cannot listen " + what + "on " + where(at) + ": " + ec.message());
}

std::uint16_t Listener::port() const {
  return acc_.local_endpoint().port();
}

void Listener::run(const std::string& magic, std::size_t hello_bytes, OnHello on_hello,
                   std::chrono::milliseconds timeout) {
  struct Conn {
    explicit Conn(asio::io_context& io) : sock(std::make_shared<Socket>(io)) {}
    std::shared_ptr<Socket> sock;
    std::vector<std::uint8_t> hello;
  };
  std::function<void()> accept_next = [&] {
    auto c = std::make_shared<Conn>(io_);
    acc_.async_accept(*c->sock, [&, c](boost::system::error_code e) {
      if (e) {
        if (e != asio::error::operation_aborted) accept_next();
        return;
      }
      accept_next();
      c->hello.resize(hello_bytes);
      asio::async_read(*c->sock, asio::buffer(c->hello),
                       [&, c](boost::system::error_code e2, std::size_t) {
                         if (e2) {
                           problem_ = "a connection closed before naming its rank";
                           return;
                         }
                         if (std::memcmp(c->hello.data(), magic.data(), magic.size()) != 0) {
                           problem_ = "a connection that is not a strata rank";
                           return;
                         }
                         on_hello(c->sock, c->hello.data());
                       });
    });
  };
  accept_next();
  io_.run_for(timeout);
}

int dial(const TpEndpoint& at, const std::vector<std::uint8_t>& hello, std::size_t answer_bytes,
         std::vector<std::uint8_t>& answer, Clock::time_point deadline, std::string& last) {
  last = "no attempt";
  answer.assign(answer_bytes, 0);
  while (Clock::now() < deadline) {
    asio::io_context io;
    boost::system::error_code ec;
    tcp::resolver resolver(io);
    const auto results = resolver.resolve(at.host, std::to_string(at.port), ec);
    if (ec || results.empty()) {
      last = "cannot resolve: " + ec.message();
    } else {
      Socket sock(io);
      boost::system::error_code err;
      bool done = false;
      auto finish = [&](boost::system::error_code e) {
        err = e;
        done = !e;
      };
      asio::async_connect(sock, results, [&](boost::system::error_code e, const tcp::endpoint&) {
        if (e) return finish(e);
        asio::async_write(
            sock, asio::buffer(hello), [&](boost::system::error_code e2, std::size_t) {
              if (e2 || answer_bytes == 0) return finish(e2);
              asio::async_read(sock, asio::buffer(answer),
                               [&](boost::system::error_code e3, std::size_t) { finish(e3); });
            });
      });
      io.run_until(deadline);
      if (done) {
        sock.native_non_blocking(false, ec);
        sock.non_blocking(false, ec);
        const int fd = sock.release(ec);
        if (ec) throw InternalError("tensor-parallel connection: " + ec.message());
        return fd;
      }
      // Connected but no answer before the deadline: rank 0 is there but did not answer.
      last = err ? err.message() : "connected, but rank 0 did not answer";
    }
    const auto left = std::max<Clock::duration>(deadline - Clock::now(), Clock::duration(0));
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(50)));
  }
  return -1;
}

}  // namespace strata::tpnet
