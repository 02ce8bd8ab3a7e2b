// The TCP rendezvous of the NCCL unique id (runtime/tp/tp_rendezvous.h), ranks as threads.
#include "runtime/tp/tp_rendezvous.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <future>
#include <thread>

#include "runtime/error.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

TpUniqueId some_id(std::uint8_t seed) {
  TpUniqueId id;
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(seed + 7 * i);
  return id;
}

// Rank 0 in a thread on a free port; returns the port once it listens.
struct Master {
  std::promise<std::uint16_t> port;
  std::future<void> done;
  Master(int size, const TpUniqueId& id, std::chrono::milliseconds timeout,
         std::uint16_t at_port = 0) {
    auto p = port.get_future();
    done = std::async(std::launch::async, [=, this] {
      tp_rendezvous_serve({"127.0.0.1", at_port}, size, id, timeout,
                          [this](std::uint16_t bound) { port.set_value(bound); });
    });
    if (p.wait_for(10s) != std::future_status::ready) throw std::runtime_error("no listen");
    bound = p.get();
  }
  std::uint16_t bound = 0;
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TpRendezvous, ParsesEndpoints) {
  const auto e = parse_tp_endpoint("10.0.0.2:29500");
  EXPECT_EQ(e.host, "10.0.0.2");
  EXPECT_EQ(e.port, 29500);
  EXPECT_EQ(parse_tp_endpoint("[::1]:80").host, "::1");
  EXPECT_EQ(parse_tp_endpoint("node-a:1").host, "node-a");
  for (const char* bad : {"", "host", "host:", ":80", "h:99999", "h:8x"})
    EXPECT_THROW(parse_tp_endpoint(bad), ConfigError) << bad;
}

TEST(TpRendezvous, EveryRankGetsRankZerosId) {
  const auto id = some_id(3);
  Master m(4, id, 10s);
  std::vector<std::future<TpUniqueId>> ranks;
  for (int r = 1; r < 4; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      return tp_rendezvous_join({"127.0.0.1", m.bound}, r, 4, 10s);
    }));
  for (auto& f : ranks) EXPECT_EQ(f.get(), id);
  EXPECT_NO_THROW(m.done.get());
}

TEST(TpRendezvous, RanksStartedBeforeRankZeroRetry) {
  std::uint16_t port = 0;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  const auto id = some_id(9);
  auto r1 = std::async(std::launch::async, [&] {
    return tp_rendezvous_join({"127.0.0.1", port}, 1, 2, 10s);
  });
  std::this_thread::sleep_for(150ms);  // rank 1 is retrying "connection refused"
  Master m(2, id, 10s, port);
  EXPECT_EQ(r1.get(), id);
  EXPECT_NO_THROW(m.done.get());
}

TEST(TpRendezvous, MissingRankStopsRankZeroWithAMessage) {
  Master m(3, some_id(1), 1000ms);
  EXPECT_EQ(tp_rendezvous_join({"127.0.0.1", m.bound}, 1, 3, 5s), some_id(1));
  const auto msg = message_of([&] { m.done.get(); });
  EXPECT_NE(msg.find("rank(s) 2 of 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backend.tp_master"), std::string::npos) << msg;
}

TEST(TpRendezvous, NobodyListeningTimesOut) {
  std::uint16_t port = 0;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  const auto msg = message_of([&] { tp_rendezvous_join({"127.0.0.1", port}, 1, 2, 300ms); });
  EXPECT_NE(msg.find("could not join rank 0"), std::string::npos) << msg;
}

TEST(TpRendezvous, MismatchedSizeAndDuplicateRankAreRefused) {
  Master m(3, some_id(5), 20s);
  const TpEndpoint at{"127.0.0.1", m.bound};
  auto msg = message_of([&] { tp_rendezvous_join(at, 1, 4, 5s); });
  EXPECT_NE(msg.find("group size differs"), std::string::npos) << msg;
  EXPECT_EQ(tp_rendezvous_join(at, 1, 3, 5s), some_id(5));
  msg = message_of([&] { tp_rendezvous_join(at, 1, 3, 5s); });
  EXPECT_NE(msg.find("already joined"), std::string::npos) << msg;
  EXPECT_EQ(tp_rendezvous_join(at, 2, 3, 5s), some_id(5));
  EXPECT_NO_THROW(m.done.get());
  EXPECT_THROW(tp_rendezvous_join(at, 0, 3, 1s), ConfigError);  // rank 0 never joins
  EXPECT_THROW(tp_rendezvous_join(at, 3, 3, 1s), ConfigError);
}

}  // namespace
}  // namespace strata
