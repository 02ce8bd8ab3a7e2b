// The server against what an attacker or a careless client does (issue 16): guessable
// secrets, sockets that never read or never finish, cross-origin pages, transport latency.
// Every bound below is a liveness bound or a comparison between two runs of the same
// machine, never an absolute timing: they hold on a loaded 2-core machine under sanitizers.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "api/secret.h"
#include "tests/api/server_fixture.h"

namespace strata::api {
namespace {

using namespace strata::api::test;

// ---- 1. secrets and ids ---------------------------------------------------------------------

// std::mt19937_64's output tempering, inverted: 312 consecutive outputs give its whole state.
std::uint64_t untemper(std::uint64_t y) {
  y ^= y >> 43;
  y ^= (y << 37) & 0xfff7eee000000000ull;
  std::uint64_t x = y;
  for (int i = 0; i < 4; ++i) x = y ^ ((x << 17) & 0x71d67fffeda60000ull);
  y = x;
  for (int i = 0; i < 3; ++i) x = y ^ ((x >> 29) & 0x5555555555555555ull);
  return x;
}

TEST(Secret, RandomHexIsFreshHexAndComparisonIsExact) {
  const auto a = random_hex(16), b = random_hex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_TRUE(secret_equal(a, a));
  EXPECT_FALSE(secret_equal(a, b));
  EXPECT_FALSE(secret_equal(a, a.substr(0, 31)));
  EXPECT_FALSE(secret_equal("", a));
}

TEST(Secret, UntemperInvertsTheGenerator) {  // the attack below is sound
  std::mt19937_64 g(12345);
  std::stringstream st;
  for (int i = 0; i < 312; ++i) st << untemper(g()) << ' ';
  st << 312;
  std::mt19937_64 clone;
  st >> clone;
  EXPECT_EQ(clone(), g());
}

class GeneratedTokenTest : public ServerTest {
 protected:
  ServerOptions options() const override {
    auto o = ServerTest::options();
    o.server.admin_token.clear();  // generated at start
    return o;
  }
};

// The issue's attack: ids printed raw generator output, so 312 of them give the generator's
// state, every later id and (run backwards) the admin token drawn from the same generator.
TEST_F(GeneratedTokenTest, ResponseIdsDoNotRevealTheGeneratorOrTheToken) {
  ready();
  const std::string token = server_->admin_token();
  EXPECT_EQ(token.size(), 32u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
  auto s = connect();
  auto next_id = [&] {
    auto r = request(s, http::verb::post, "/v1/completions", R"({"prompt":"x","max_tokens":1})");
    EXPECT_EQ(r.result_int(), 200) << r.body();
    const std::string id(json::parse(r.body()).at("id").as_string());
    EXPECT_EQ(id.rfind("cmpl-", 0), 0u) << id;
    EXPECT_EQ(id.find(token), std::string::npos);
    return std::stoull(id.substr(5, 16), nullptr, 16);
  };
  std::stringstream st;
  for (int i = 0; i < 312; ++i) st << untemper(next_id()) << ' ';
  st << 312;
  std::mt19937_64 clone;
  st >> clone;
  const std::uint64_t predicted = clone(), actual = next_id();
  EXPECT_NE(predicted, actual) << "the next response id was predicted from the previous 312";
  EXPECT_EQ(request(s, http::verb::get, "/admin/api/stats", "", token).result_int(), 200);
  EXPECT_EQ(request(s, http::verb::get, "/admin/api/stats?token=" + token).result_int(), 200);
  EXPECT_EQ(request(s, http::verb::get, "/admin/api/stats?token=" + token.substr(1)).result_int(),
            401);
}

}  // namespace
}  // namespace strata::api
