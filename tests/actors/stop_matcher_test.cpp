#include "actors/stop_matcher.h"

#include <gtest/gtest.h>

namespace strata::actors {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += m.push(p);
  return out;
}

TEST(StopMatcher, WithholdsAPossiblePrefixUntilRuledOut) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abc E"), "abc ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("x"), "ENx");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopAcrossDeltasIsNeverEmitted) {
  StopMatcher m({"</s>", "STOP"});
  EXPECT_EQ(feed(m, {"hello <", "/", "s> trailing"}), "hello ");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "</s>");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, EarliestMatchWins) {
  StopMatcher m({"bc", "ab"});
  EXPECT_EQ(m.push("xabc"), "x");
  EXPECT_EQ(m.matched(), "ab");
}

TEST(StopMatcher, FlushReleasesHeldTextAtTheEnd) {
  StopMatcher m({"world!"});
  EXPECT_EQ(m.push("hello wor"), "hello ");
  EXPECT_EQ(m.flush(), "wor");
}

TEST(StopMatcher, MultiByteStopKeepsUtf8Whole) {
  StopMatcher m({"é!"});
  EXPECT_EQ(m.push("caf"), "caf");
  EXPECT_EQ(m.push("é"), "");
  EXPECT_EQ(m.push("?"), "é?");
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("anything"), "anything");
}

}  // namespace
}  // namespace strata::actors
