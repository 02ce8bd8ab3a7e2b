// `strata <subcommand> [options]`: serve, generate, tokenize, bench, make-model, eval.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "api/version.h"
#include "runtime/error.h"
#include "tools/cli/command.h"

namespace strata::cli {

namespace {
std::map<std::string, Command>& registry() {
  static std::map<std::string, Command> r;
  return r;
}
}  // namespace

bool register_command(const Command& c) {
  registry()[c.name] = c;
  return true;
}
const std::map<std::string, Command>& commands() {
  return registry();
}

Args::Args(int argc, char** argv, std::vector<std::string> flags) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h") {
      opts_.emplace("help", "true");
    } else if (a.rfind("--", 0) == 0 && a.size() > 2) {
      std::string key = a.substr(2), val;
      if (auto eq = key.find('='); eq != std::string::npos) {
        val = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (std::find(flags.begin(), flags.end(), key) != flags.end()) {
        val = "true";
      } else if (i + 1 < argc) {
        val = argv[++i];
      } else {
        throw ConfigError("--" + key, "needs a value");
      }
      opts_.emplace(key, val);
    } else {
      positional_.push_back(a);
    }
  }
}

std::optional<std::string> Args::get(const std::string& key) const {
  auto r = opts_.equal_range(key);
  if (r.first == r.second) return std::nullopt;
  return std::prev(r.second)->second;  // last one wins
}
std::string Args::get_or(const std::string& key, const std::string& def) const {
  auto v = get(key);
  return v ? *v : def;
}
long long Args::get_int(const std::string& key, long long def) const {
  auto v = get(key);
  if (!v) return def;
  try {
    std::size_t pos = 0;
    long long x = std::stoll(*v, &pos);
    if (pos != v->size()) throw std::invalid_argument("");
    return x;
  } catch (const std::exception&) {
    throw ConfigError("--" + key, "must be an integer, got '" + *v + "'");
  }
}
double Args::get_double(const std::string& key, double def) const {
  auto v = get(key);
  if (!v) return def;
  try {
    std::size_t pos = 0;
    double x = std::stod(*v, &pos);
    if (pos != v->size()) throw std::invalid_argument("");
    return x;
  } catch (const std::exception&) {
    throw ConfigError("--" + key, "must be a number, got '" + *v + "'");
  }
}
bool Args::flag(const std::string& key) const {
  auto v = get(key);
  return v && *v != "false" && *v != "0";
}
std::vector<std::string> Args::all(const std::string& key) const {
  std::vector<std::string> out;
  for (auto [a, b] = opts_.equal_range(key); a != b; ++a) out.push_back(a->second);
  return out;
}
void Args::expect_only(const std::vector<std::string>& known) const {
  for (const auto& [k, v] : opts_)
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ConfigError("--" + k, "unknown option");
  // No command takes positional arguments: a stray word (or a -x option) would be ignored.
  if (!positional_.empty())
    throw ConfigError("", "unexpected argument '" + positional_.front() +
                              "' (options are --name value; --help lists them)");
}

}  // namespace strata::cli

int main(int argc, char** argv) {
  using namespace strata::cli;
  // Asked for (--help): stdout, status 0; a mistake: stderr, status 2.
  auto usage = [](std::FILE* out) {
    std::fprintf(out, "usage: strata <command> [options]\n\ncommands:\n");
    for (const auto& [name, c] : commands())
      std::fprintf(out, "  %-12s %s\n", name.c_str(), c.summary);
    std::fprintf(out,
                 "\nstrata <command> --help for the options of one command; strata --version\n");
  };
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string first = argv[1];
  if (first == "--help" || first == "-h") {
    usage(stdout);
    return 0;
  }
  if (first == "--version" || first == "-V") {
    std::printf("strata %s\n", strata::kVersion);
    return 0;
  }
  auto it = commands().find(argv[1]);
  if (it == commands().end()) {
    std::fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  try {
    return it->second.run(argc - 2, argv + 2);
  } catch (const strata::ConfigError& e) {
    std::fprintf(stderr, "strata %s: configuration error: %s\n", argv[1], e.what());
    return 2;
  } catch (const strata::ModelError& e) {
    std::fprintf(stderr, "strata %s: model error: %s\n", argv[1], e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata %s: error: %s\n", argv[1], e.what());
    return 1;
  }
}
