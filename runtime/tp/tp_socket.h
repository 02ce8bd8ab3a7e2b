// The TCP plumbing shared by the id rendezvous (runtime/tp/tp_rendezvous.h) and the rank links
// (runtime/tp/tp_link.h): rank 0 listens and reads a fixed-size hello from every connection;
// a joining rank connects, retrying until rank 0 listens, writes its hello and reads a
// fixed-size answer. The protocols (what the hellos and answers mean) stay with their users.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tp/tp_rendezvous.h"

namespace strata::tpnet {

using Clock = std::chrono::steady_clock;
using Socket = boost::asio::ip::tcp::socket;

void put_u32(std::uint8_t* p, std::uint32_t v);  // little-endian
std::uint32_t get_u32(const std::uint8_t* p);
std::string where(const TpEndpoint& e);  // "host:port"

// Rank 0's listening socket on `at`. `what` completes the ConfigError("backend.tp_master")
// message "rank 0 cannot listen <what>on host:port: ...".
class Listener {
 public:
  // Called with each connection whose first bytes are `magic` followed by the rest of the
  // hello (hello_bytes in all, magic included). Runs on the listener's thread (inside run()).
  using OnHello = std::function<void(std::shared_ptr<Socket> sock, const std::uint8_t* hello)>;

  Listener(const TpEndpoint& at, const std::string& what);
  std::uint16_t port() const;  // the bound port (tests listen on port 0)
  boost::asio::io_context& io() { return io_; }
  // Accepts connections and reads their hellos until stop() or `timeout`. A connection that
  // closes before its hello or starts with other bytes sets problem() and is dropped.
  void run(const std::string& magic, std::size_t hello_bytes, OnHello on_hello,
           std::chrono::milliseconds timeout);
  void stop() { io_.stop(); }
  // The last thing that went wrong with a connection (for the timeout message); empty if none.
  std::string& problem() { return problem_; }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acc_;
  std::string problem_;
};

// A joining rank: connects to `at`, writes `hello`, reads `answer_bytes` bytes into `answer`
// (none: 0), retrying every 50 ms until `deadline`. Returns the connected socket's file
// descriptor (blocking mode, the caller owns it), or -1 with `last` saying what failed last.
int dial(const TpEndpoint& at, const std::vector<std::uint8_t>& hello, std::size_t answer_bytes,
         std::vector<std::uint8_t>& answer, Clock::time_point deadline, std::string& last);

}  // namespace strata::tpnet
