// Subcommand registry and a small flag parser for the `strata` binary.
// Each tools/cli/<name>.cpp registers one subcommand with STRATA_COMMAND.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::cli {

// Parsed `--key value`, `--key=value` and `--flag` arguments plus positionals.
class Args {
 public:
  // `flags` are the boolean options (take no value); every other --key takes one.
  Args(int argc, char** argv, std::vector<std::string> flags);
  std::optional<std::string> get(const std::string& key) const;
  std::string get_or(const std::string& key, const std::string& def) const;
  long long get_int(const std::string& key, long long def) const;  // throws ConfigError
  double get_double(const std::string& key, double def) const;
  bool flag(const std::string& key) const;
  std::vector<std::string> all(const std::string& key) const;  // repeated options
  const std::vector<std::string>& positional() const { return positional_; }
  // Throws ConfigError naming the first option not in `known` (flags included).
  void expect_only(const std::vector<std::string>& known) const;

 private:
  std::multimap<std::string, std::string> opts_;
  std::vector<std::string> positional_;
};

using CommandFn = int (*)(int argc, char** argv);
struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};
bool register_command(const Command& c);
const std::map<std::string, Command>& commands();

}  // namespace strata::cli

#define STRATA_COMMAND(name, summary, fn) \
  static const bool strata_cmd_registered_##fn = ::strata::cli::register_command({name, summary, fn})
