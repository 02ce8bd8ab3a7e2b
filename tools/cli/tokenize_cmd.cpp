// strata tokenize: text -> ids, ids -> text, corpus parity checks and an encode benchmark.
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/text/detokenizer.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/unicode.h"
#include "tools/cli/command.h"

namespace strata::cli {
namespace {
namespace json = boost::json;
namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_tokenizer(const Args& a) {
  std::string tj, tc;
  if (auto m = a.get("model")) {
    tj = *m + "/tokenizer.json";
    tc = *m + "/tokenizer_config.json";
  } else if (auto t = a.get("tokenizer")) {
    tj = *t;
    tc = (fs::path(*t).parent_path() / "tokenizer_config.json").string();
  } else {
    throw ConfigError("--tokenizer", "required: a tokenizer.json (or --model DIR)");
  }
  tc = a.get_or("tokenizer-config", tc);
  if (!fs::exists(tc)) tc.clear();
  return Tokenizer::load(tj, tc);
}

std::vector<std::int32_t> parse_ids(const std::string& s) {
  std::vector<std::int32_t> ids;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    try {
      std::size_t pos = 0;
      const long long v = std::stoll(cur, &pos);
      if (pos != cur.size() || v < std::numeric_limits<std::int32_t>::min() ||
          v > std::numeric_limits<std::int32_t>::max())
        throw std::invalid_argument(cur);
      ids.push_back(static_cast<std::int32_t>(v));
    } catch (const std::exception&) {
      throw ConfigError("--ids", "'" + cur + "' is not a token id");
    }
    cur.clear();
  };
  for (char c : s) {
    if (c == ',' || c == ' ' || c == '\n' || c == '[' || c == ']')
      flush();
    else
      cur.push_back(c);
  }
  flush();
  return ids;
}

std::string join_ids(const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out.push_back(' ');
    out += std::to_string(ids[i]);
  }
  return out;
}

std::vector<std::string> read_jsonl(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError("--jsonl", path + ": cannot open");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    boost::system::error_code ec;
    const auto v = json::parse(line, ec);
    if (ec || !v.is_string())
      throw ConfigError("--jsonl",
                        path + ":" + std::to_string(lines.size() + 1) + ": not a JSON string");
    lines.emplace_back(v.as_string());
  }
  return lines;
}

std::string quoted(const std::string& s) {
  return json::serialize(json::string(s));
}

// Corpus mode: ids of every line; with --expect, compare and check round trips.
int run_jsonl(const Tokenizer& tok, const Args& a) {
  const auto lines = read_jsonl(*a.get("jsonl"));
  std::vector<std::vector<std::int32_t>> ids;
  ids.reserve(lines.size());
  for (const auto& l : lines) ids.push_back(tok.encode(l));
  if (auto out = a.get("out")) {
    std::ofstream f(*out, std::ios::binary);
    for (const auto& v : ids) f << join_ids(v) << '\n';
    if (!f) throw ConfigError("--out", *out + ": cannot write");
  }
  if (!a.get("expect")) {
    if (!a.get("out"))
      for (const auto& v : ids) std::printf("%s\n", join_ids(v).c_str());
    return 0;
  }
  std::ifstream ef(*a.get("expect"), std::ios::binary);
  if (!ef) throw ConfigError("--expect", *a.get("expect") + ": cannot open");
  std::size_t n_tokens = 0, n_bytes = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string want_line;
    if (!std::getline(ef, want_line)) {
      std::printf("FAIL: expected ids end at line %zu of %zu\n", i + 1, lines.size());
      return 1;
    }
    const auto want = parse_ids(want_line);
    if (want != ids[i]) {
      std::size_t k = 0;
      while (k < want.size() && k < ids[i].size() && want[k] == ids[i][k]) ++k;
      std::printf(
          "FAIL: ids differ at line %zu, token %zu\n  text:     %s\n  expected: %s\n  got:      "
          "%s\n",
          i + 1, k, quoted(lines[i]).c_str(), want_line.c_str(), join_ids(ids[i]).c_str());
      return 1;
    }
    const auto back = tok.decode(ids[i]);
    if (back != lines[i]) {
      std::printf("FAIL: decode(encode(x)) != x at line %zu\n  text: %s\n  back: %s\n", i + 1,
                  quoted(lines[i]).c_str(), quoted(back).c_str());
      return 1;
    }
    IncrementalDetokenizer det(tok);
    std::string streamed;
    for (auto id : ids[i]) streamed += det.push(id);
    streamed += det.finish();
    if (streamed != back) {
      std::printf("FAIL: streaming detokenization differs from decode at line %zu\n", i + 1);
      return 1;
    }
    n_tokens += ids[i].size();
    n_bytes += lines[i].size();
  }
  std::printf(
      "OK: %zu lines, %zu bytes, %zu tokens: ids equal the reference, decode(encode(x)) == x, "
      "streaming == decode\n",
      lines.size(), n_bytes, n_tokens);
  return 0;
}

int run_bench(const Tokenizer& tok, const Args& a) {
  const std::string text = read_text_file(*a.get("bench"));
  const auto repeat = a.get_int("repeat", 5);
  if (text.empty() || repeat < 1)
    throw ConfigError("--bench", "needs a non-empty file and --repeat >= 1");
  // Encode line by line, as a server tokenizes prompts; one warm-up pass.
  std::vector<std::string_view> lines;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t j = text.find('\n', i);
    j = j == std::string::npos ? text.size() : j + 1;
    lines.push_back(std::string_view(text).substr(i, j - i));
    i = j;
  }
  std::size_t tokens = 0;
  for (auto l : lines) tokens += tok.encode(l).size();
  // Thread CPU time is what one core spends, whatever else the machine runs; wall time is
  // printed too.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  double best_cpu = 1e30, best_wall = 1e30;
  for (long long r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    std::size_t n = 0;
    for (auto l : lines) n += tok.encode(l).size();
    best_cpu = std::min(best_cpu, cpu_now() - c0);
    best_wall = std::min(
        best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (n != tokens) throw InternalError("encode is not deterministic");
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf(
      "encode: %.2f MB, %zu tokens (%.3f bytes/token), one thread, best of %lld: %.2f MB/s (%.2f M "
      "tokens/s) "
      "of thread CPU time; %.2f MB/s wall\n",
      mb, tokens, static_cast<double>(text.size()) / static_cast<double>(tokens), repeat,
      mb / best_cpu, static_cast<double>(tokens) / 1e6 / best_cpu, mb / best_wall);
  return 0;
}

int run(int argc, char** argv) {
  const std::vector<std::string> flags = {"help", "json", "no-special", "skip-special"};
  Args a(argc, argv, flags);
  if (a.flag("help")) {
    std::printf(
        "strata tokenize (--tokenizer tokenizer.json [--tokenizer-config F] | --model DIR)\n"
        "  --text T | --file F      encode; prints ids (--json: {\"ids\": [...]}); --no-special: "
        "special-token\n"
        "                           strings are plain text\n"
        "  --ids 1,2,3              decode; prints the text (--json: {\"text\": ...}); "
        "--skip-special\n"
        "  --jsonl F [--out F] [--expect F]\n"
        "                           one JSON string per line -> one line of ids each; with "
        "--expect: compare\n"
        "                           with reference ids, check decode(encode(x)) == x and streaming "
        "== decode\n"
        "  --bench F [--repeat N]   encode speed (MB/s, one thread) over the lines of F\n");
    return 0;
  }
  a.expect_only({"help", "json", "no-special", "skip-special", "tokenizer", "tokenizer-config",
                 "model", "text", "file", "ids", "jsonl", "out", "expect", "bench", "repeat"});
  const auto tok = load_tokenizer(a);
  if (a.get("jsonl")) return run_jsonl(*tok, a);
  if (a.get("bench")) return run_bench(*tok, a);
  if (auto ids_s = a.get("ids")) {
    const auto ids = parse_ids(*ids_s);
    const auto text = tok->decode(ids, a.flag("skip-special"));
    if (a.flag("json"))
      std::printf("%s\n", json::serialize(json::object{{"text", text}}).c_str());
    else
      std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::string text;
  if (auto t = a.get("text"))
    text = *t;
  else if (auto f = a.get("file"))
    text = read_text_file(*f);
  else
    throw ConfigError("--text", "give --text, --file, --ids, --jsonl or --bench");
  const auto ids = tok->encode(text, !a.flag("no-special"));
  if (a.flag("json")) {
    json::array arr(ids.begin(), ids.end());
    std::printf("%s\n", json::serialize(json::object{{"ids", arr}}).c_str());
  } else {
    std::printf("%s\n", join_ids(ids).c_str());
  }
  return 0;
}

}  // namespace
STRATA_COMMAND("tokenize", "encode text to token ids or decode ids to text", run);
}  // namespace strata::cli
