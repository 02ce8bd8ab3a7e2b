// /tokenize and the inference routes assemble prompts with one function (assemble_prompt,
// actors/prompt.h): over a real engine on the tiny model behind the real server, the ids
// /tokenize returns are exactly the prompt tokens the backend receives for a completion or
// chat request with the same input (the backend records every StepPlan).
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <thread>

#include "api/server.h"
#include "tests/actors/engine_fixture.h"

namespace strata::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;

class PromptParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_ = std::make_shared<test::StepProbe>();
    // The prompt is read back from the prefill steps: no prefix-cache hit may skip a part.
    Config cfg = test::tiny_config();
    cfg.cache.prefix_cache = false;
    engine_ = Engine::create(cfg, test::probe_factory(probe_));
    ServerOptions o;
    o.server.port = 0;
    o.model_name = "tiny";
    o.handle_signals = false;
    server_ = std::make_unique<Server>(o);
    server_->listen();
    server_->set_engine(engine_);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  json::value post(const std::string& target, const std::string& body) {
    net::io_context io;
    tcp::socket s(io);
    s.connect({net::ip::make_address("127.0.0.1"), server_->port()});
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer b;
    http::response<http::string_body> res;
    http::read(s, b, res);
    EXPECT_EQ(res.result_int(), 200) << target << " " << body << " -> " << res.body();
    return json::parse(res.body());
  }
  std::vector<std::int32_t> tokenize(const std::string& body) {
    std::vector<std::int32_t> ids;
    const json::value r = post("/tokenize", body);
    for (const auto& t : r.at("tokens").as_array())
      ids.push_back(static_cast<std::int32_t>(t.to_number<std::int64_t>()));
    return ids;
  }
  // The prompt tokens the backend prefilled for the next request served.
  std::vector<std::int32_t> prompt_of_next(const std::string& target, const std::string& body) {
    std::size_t before;
    {
      std::lock_guard<std::mutex> l(probe_->mu);
      before = probe_->plans.size();
    }
    const auto r = post(target, body);
    std::lock_guard<std::mutex> l(probe_->mu);
    std::vector<std::int32_t> prompt;
    std::optional<std::uint64_t> seq;
    for (std::size_t i = before; i < probe_->plans.size(); ++i) {
      for (const auto& s : probe_->plans[i].seqs) {
        if (!seq) seq = s.seq_id;
        if (s.seq_id == *seq && s.prefill)
          prompt.insert(prompt.end(), s.tokens.begin(), s.tokens.end());
      }
    }
    EXPECT_EQ(static_cast<std::size_t>(r.at("usage").at("prompt_tokens").to_number<std::int64_t>()),
              prompt.size());
    return prompt;
  }

  std::shared_ptr<test::StepProbe> probe_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

TEST_F(PromptParityTest, TextPromptGivesTheIdsTokenizeReports) {
  for (const char* text : {"Hello world", "  two  spaces and <|eot_id|> text", "x"}) {
    SCOPED_TRACE(text);
    const std::string prompt = json::serialize(json::value(text));
    const auto ids = tokenize(R"({"prompt":)" + prompt + "}");
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(prompt_of_next("/v1/completions",
                             R"({"prompt":)" + prompt + R"(,"max_tokens":1,"temperature":0})"),
              ids);
  }
}

TEST_F(PromptParityTest, ChatMessagesGiveTheIdsTokenizeReports) {
  const std::string messages = R"("messages":[{"role":"system","content":"Be brief."},)"
                               R"({"role":"user","content":"Hi there"}])";
  for (const std::string& options :
       {std::string(), std::string(R"(,"add_generation_prompt":false)"),
        std::string(R"(,"chat_template_kwargs":{"date_string":"1 Dec 2026"})")}) {
    SCOPED_TRACE(options);
    const auto ids = tokenize("{" + messages + options + "}");
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(prompt_of_next("/v1/chat/completions",
                             "{" + messages + options + R"(,"max_tokens":1,"temperature":0})"),
              ids);
  }
}

TEST_F(PromptParityTest, TokenizedIdsSentBackAsAPromptAreUsedVerbatim) {
  const auto ids = tokenize(R"({"prompt":"Hello world"})");
  json::array a;
  for (auto id : ids) a.push_back(id);
  EXPECT_EQ(prompt_of_next("/v1/completions", R"({"prompt":)" + json::serialize(a) +
                                                  R"(,"max_tokens":1,"temperature":0})"),
            ids);
}

}  // namespace
}  // namespace strata::api
