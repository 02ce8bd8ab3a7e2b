// runtime/text/jinja/: what the parity test against Python cannot show — constructs outside the
// subset fail at parse time with their line, and hostile templates hit the render limits
// instead of exhausting memory or the stack.
#include "runtime/text/jinja/jinja.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace {

using strata::jinja::RenderError;
using strata::jinja::RenderOptions;
using strata::jinja::Template;
using strata::jinja::TemplateError;

std::string render(const std::string& src, const std::string& vars_json = "{}",
                   const RenderOptions& o = {}) {
  return Template::parse(src).render(boost::json::parse(vars_json).as_object(), o);
}

// The TemplateError's message for `src` ("" if it parses).
std::string parse_error(const std::string& src) {
  try {
    Template::parse(src);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "";
}

TEST(Jinja, RendersAChatTemplate) {
  EXPECT_EQ(render("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}"
                   "{% if add_generation_prompt %}<assistant>{% endif %}",
                   R"({"messages": [{"role": "user", "content": " hi "}],
                       "add_generation_prompt": true})"),
            "<user>hi<assistant>");
}

TEST(Jinja, UnsupportedConstructsFailAtParseTimeWithTheirLine) {
  EXPECT_EQ(parse_error("a\n{{ x | wordwrap(3) }}"), "line 2: unsupported filter 'wordwrap'");
  EXPECT_EQ(parse_error("\n\n{% if x is fizzbuzz %}{% endif %}"),
            "line 3: unsupported test 'fizzbuzz'");
  EXPECT_EQ(parse_error("{% include 'other.jinja' %}"), "line 1: unsupported tag '{% include %}'");
  EXPECT_EQ(parse_error("{% extends 'base' %}"), "line 1: unsupported tag '{% extends %}'");
  EXPECT_EQ(parse_error("\n{% filter upper %}x{% endfilter %}"),
            "line 2: unsupported tag '{% filter %}'");
  EXPECT_EQ(parse_error("{% call foo %}{% endcall %}"), "line 1: '{% call %}' needs a call");
  EXPECT_EQ(parse_error("{{ messages.append(1) }}"), "line 1: unsupported method '.append()'");
  EXPECT_EQ(parse_error("x\ny\n{{ cycler(1, 2) }}"), "line 3: unknown function 'cycler()'");
  EXPECT_EQ(parse_error("{% for x in y recursive %}{% endfor %}"),
            "line 1: recursive for loops are not supported");
  EXPECT_EQ(parse_error("{{ f(*args) }}"), "line 1: *args and **kwargs in calls are not supported");
  EXPECT_EQ(parse_error("{% break %}"), "line 1: 'break' outside a for loop");
}

TEST(Jinja, SyntaxErrorsNameTheirLine) {
  EXPECT_EQ(parse_error("{% if x %}\nno end"),
            "line 2: unexpected end of template: expected '{% elif %}'");
  EXPECT_EQ(parse_error("{{ 'abc }}"), "line 1: unterminated string literal");
  EXPECT_EQ(parse_error("\n{{ x ) }}"), "line 2: unexpected ')'");
  EXPECT_EQ(parse_error("{{ x"), "line 1: unexpected end of template: missing '}}'");
  EXPECT_EQ(parse_error("{# never closed"), "line 1: missing end of comment tag");
  EXPECT_EQ(parse_error("{% for x %}{% endfor %}"),
            "line 1: expected 'in' in a for loop, got '%}'");
  EXPECT_EQ(parse_error("{% endfor %}"), "line 1: unsupported tag '{% endfor %}'");
  EXPECT_EQ(parse_error("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"),
            "line 1: expression nested too deeply");  // not a stack overflow
}

TEST(Jinja, SixtyFourBitIntegersFailInsteadOfOverflowing) {
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ 3 ** 39 }} {{ 1 ** 1000000000000 }} {{ 1e999 }}"),
            "4611686018427387904 4052555153018976267 1 inf");
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}"), RenderError);
  EXPECT_THROW(render("{{ 2 ** 64 }}"), RenderError);
  EXPECT_THROW(render("{{ -(-9223372036854775807 - 1) }}"), RenderError);
  EXPECT_THROW(render("{{ 4611686018427387904 * 4 }}"), RenderError);
  EXPECT_EQ(parse_error("{{ 99999999999999999999 }}"),
            "line 1: integer literal out of range: 99999999999999999999");
  EXPECT_EQ(parse_error("{{ x.99999999999999999999 }}"),
            "line 1: integer literal out of range: 99999999999999999999");
  EXPECT_EQ(render("{{ 1e300|int }} {{ '1e300'|int }} {{ "
                   "[[1]]|map(attribute='99999999999999999999')|list }}"),
            "0 0 [Undefined]");
}

TEST(Jinja, MacrosAreCollectedBeforeCallsAreChecked) {
  EXPECT_EQ(render("{{ later() if false }}{% macro later() %}x{% endmacro %}{{ later() }}"), "x");
}

TEST(Jinja, RaiseExceptionKeepsTheMessage) {
  try {
    render("{{ raise_exception('Conversation roles must alternate') }}");
    FAIL();
  } catch (const RenderError& e) {
    EXPECT_TRUE(e.raised());
    EXPECT_STREQ(e.what(), "Conversation roles must alternate");
  }
}

TEST(Jinja, RenderErrorsNameTheLine) {
  try {
    render("ok\n{{ missing.attr }}");
    FAIL();
  } catch (const RenderError& e) {
    EXPECT_FALSE(e.raised());
    EXPECT_STREQ(e.what(), "line 2: 'missing' is undefined");
  }
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  RenderOptions o;
  o.max_steps = 10000;
  EXPECT_THROW(render("{% for i in range(100000) %}{{ i }}{% endfor %}", "{}", o), RenderError);
  o = {};
  o.max_output = 1000;
  EXPECT_THROW(render("{{ 'x' * 100000000000 }}", "{}", o), RenderError);
  EXPECT_THROW(render("{% for i in range(10) %}{{ 'y' * 200 }}{% endfor %}", "{}", o), RenderError);
  EXPECT_THROW(render("{{ range(1000000000)|length }}"), RenderError);
  // a macro calling itself forever ends at max_depth, not in a stack overflow
  EXPECT_THROW(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), RenderError);
}

TEST(Jinja, TemplateIsReusableAndIndependentOfRenders) {
  const Template t = Template::parse(
      "{% set ns = namespace(n=0) %}{% for m in xs %}"
      "{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render(boost::json::parse(R"({"xs": [1, 2, 3]})").as_object()), "6");
  EXPECT_EQ(t.render(boost::json::parse(R"({"xs": [10]})").as_object()), "10");
}

TEST(Jinja, StrftimeNowUsesTheGivenClock) {
  RenderOptions o;
  o.now = 0;
  const std::string year = render("{{ strftime_now('%Y') }}", "{}", o);
  EXPECT_TRUE(year == "1970" || year == "1969") << year;  // local time
}

// Request templates are client input: mangled real templates must parse or throw
// TemplateError, and render or throw RenderError, never crash or hang (run under ASan too).
TEST(Jinja, MangledTemplatesFailCleanly) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/runtime/text/chat_templates";
  const auto vars = boost::json::parse(R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
      "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "tools": null})")
                        .as_object();
  RenderOptions o;
  o.max_steps = 200000;
  o.max_output = 1 << 20;
  std::mt19937 rng(17);
  const std::string alphabet = "{}%#-+()[]|.,:'\"~=!<>*/ \n\\abcdefghijklmnopqrstuvwxyz0123456789";
  int parsed = 0, rendered = 0, total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream f(entry.path());
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string base = ss.str();
    for (int k = 0; k < 300; ++k) {
      std::string t = base;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !t.empty(); ++e) {
        const std::size_t at = rng() % t.size();
        switch (rng() % 4) {
          case 0:
            t[at] = alphabet[rng() % alphabet.size()];
            break;
          case 1:
            t.erase(at, 1 + rng() % 8);
            break;
          case 2:
            t.insert(at, t.substr(rng() % t.size(), 1 + rng() % 16));
            break;
          default:
            t.resize(at);
        }
      }
      ++total;
      try {
        const Template tp = Template::parse(t);
        ++parsed;
        tp.render(vars, o);
        ++rendered;
      } catch (const TemplateError&) {
      } catch (const RenderError&) {
      }
    }
  }
  std::cout << total << " mangled templates: " << parsed << " parsed, " << rendered
            << " rendered\n";
  EXPECT_GT(total, 1000);
}

}  // namespace
