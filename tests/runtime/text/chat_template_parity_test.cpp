// Byte-for-byte parity of Strata's Jinja interpreter with Python's jinja2 as Hugging Face
// renders chat templates. tests/runtime/text/chat_templates/render_reference.py renders every
// (template, conversation, add_generation_prompt) case and the feature templates with jinja2
// and prints the inputs with the reference output; this test renders the same inputs with
// runtime/text/jinja/ and compares. Needs python3 with jinja2 (python3-jinja2, tools/deps.sh test).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/text/chat_template.h"
#include "runtime/error.h"
#include "runtime/text/jinja/jinja.h"

#ifndef STRATA_PYTHON3
#define STRATA_PYTHON3 "python3"
#endif

namespace {

namespace json = boost::json;

const std::string kDir = std::string(STRATA_SOURCE_DIR) + "/tests/runtime/text/chat_templates";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string run_reference() {
  const std::string cmd = std::string(STRATA_PYTHON3) + " " + kDir + "/render_reference.py " + kDir;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[1 << 16];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  return rc == 0 ? out : "";
}

// Where two renderings first differ, with some context.
std::string first_difference(const std::string& want, const std::string& got) {
  std::size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const std::size_t from = i > 40 ? i - 40 : 0;
  return "at byte " + std::to_string(i) +
         "\n  jinja2: " + json::serialize(json::value(want.substr(from, 120))) +
         "\n  strata: " + json::serialize(json::value(got.substr(from, 120)));
}

// continue_final_message goes through ChatTemplate::render, the serving path: the messages as
// ChatMessages, the other variables as chat_template_kwargs.
std::string render_continued(const std::string& source, const json::object& vars, std::time_t now) {
  const auto t = strata::ChatTemplate::from_text(source, {}, "test");
  std::vector<strata::ChatMessage> messages;
  for (const auto& m : vars.at("messages").as_array())
    messages.push_back(
        {std::string(m.at("role").as_string()), std::string(m.at("content").as_string())});
  strata::ChatOptions o;
  o.add_generation_prompt = false;
  o.continue_final_message = true;
  o.kwargs = vars;
  o.kwargs.erase("messages");
  o.now = now;
  return t->render(messages, o);
}

TEST(ChatTemplateParity, RendersLikePythonJinja2) {
  const std::string ref = run_reference();
  ASSERT_FALSE(ref.empty()) << "the reference renderer failed: " << STRATA_PYTHON3
                            << " with jinja2 is needed (apt-get install python3-jinja2)";
  const json::object doc = json::parse(ref).as_object();
  strata::jinja::RenderOptions opt;
  opt.now = static_cast<std::time_t>(doc.at("now").as_int64());
  std::map<std::string, strata::jinja::Template> parsed;
  int equal = 0, failed_both = 0, templates = 0;
  std::map<std::string, int> per_template;
  for (const auto& cv : doc.at("cases").as_array()) {
    const json::object& c = cv.as_object();
    const std::string id(c.at("id").as_string());
    std::string source, key;
    if (const auto* f = c.if_contains("template_file")) {
      key = std::string(f->as_string());
      if (!parsed.count(key)) source = read_file(kDir + "/" + key);
    } else {
      source = std::string(c.at("template").as_string());
      key = "inline:" + source;
    }
    if (!parsed.count(key)) {
      try {
        parsed.emplace(key, strata::jinja::Template::parse(source));
        ++templates;
      } catch (const strata::jinja::TemplateError& e) {
        ADD_FAILURE() << id << ": does not parse: " << e.what();
        continue;
      }
    }
    const auto& t = parsed.at(key);
    std::string got, error;
    bool raised = false;
    try {
      if (c.if_contains("continue_final_message")) {
        got = render_continued(source.empty() ? read_file(kDir + "/" + key) : source,
                               c.at("vars").as_object(), *opt.now);
      } else {
        got = t.render(c.at("vars").as_object(), opt);
      }
    } catch (const strata::jinja::RenderError& e) {
      error = e.what();
      raised = e.raised();
    } catch (const strata::InvalidRequest& e) {  // ChatTemplate::render's form of the errors
      error = e.what();
      raised = e.param() == "messages" && error.find("the chat template (") == std::string::npos;
    }
    if (const auto* want = c.if_contains("out")) {
      if (!error.empty()) {
        ADD_FAILURE() << id << ": jinja2 renders, strata fails: " << error;
      } else if (got != want->as_string()) {
        ADD_FAILURE() << id << ": differs "
                      << first_difference(std::string(want->as_string()), got);
      } else {
        ++equal;
        if (c.if_contains("template_file")) ++per_template[key];
      }
      continue;
    }
    const bool want_raised = c.at("raised").as_bool();
    const std::string want_error(c.at("error").as_string());
    if (error.empty()) {
      ADD_FAILURE() << id << ": jinja2 fails (" << want_error << "), strata renders "
                    << json::serialize(json::value(got));
    } else if (want_raised != raised || (raised && want_error != error)) {
      ADD_FAILURE() << id << ": jinja2 fails with " << want_error << ", strata with " << error;
    } else {
      ++failed_both;
    }
  }
  std::cout << "jinja2 " << doc.at("jinja2").as_string() << ": " << equal
            << " renderings byte-equal, " << failed_both << " failing in both (same "
            << "raise_exception message), " << templates << " templates\n";
  for (const auto& [k, n] : per_template) std::cout << "  " << k << ": " << n << " equal\n";
  EXPECT_GT(equal, 400);
}

}  // namespace
