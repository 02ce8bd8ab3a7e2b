// The tree-walking evaluator (interp.cpp) and the builtins it dispatches to (builtins.cpp).
// One Interp renders one template once; it is not shared between threads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/text/jinja/ast.h"
#include "runtime/text/jinja/jinja.h"
#include "runtime/text/jinja/value.h"

namespace strata::jinja::detail {

// Variables of one frame. A for-loop iteration and a macro call get a new frame whose parent
// is the enclosing one: what they set is not seen outside (Jinja's scoping), what they read
// falls through to the parents and then to the globals.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};

class Interp {
 public:
  explicit Interp(const RenderOptions& o) : options(o) {}
  const RenderOptions& options;
  int line = 0;  // of the node or expression evaluated last, for error messages

  void render(const Program& p, std::shared_ptr<Scope> globals, std::string& out);
  Value eval(const Expr& e, const std::shared_ptr<Scope>& s);

  // Jinja's environment.getattr (a.b) and getitem (a[b]).
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& fn, Args& args);
  Value filter(const std::string& name, Value input, Args& args);
  bool test(const std::string& name, const Value& v, Args& args);
  // The elements a for loop or filter iterates over (dict: keys; str: characters).
  std::vector<Value> iterate(const Value& v);
  void check_output_size(std::size_t n) const;

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec(const Body& body, const std::shared_ptr<Scope>& s, std::string& out);
  Flow exec_for(const Node& n, const std::shared_ptr<Scope>& s, std::string& out);
  void exec_set(const Node& n, const std::shared_ptr<Scope>& s);
  Value make_macro(const Node& n, const std::shared_ptr<Scope>& s);
  Value call_block(const Node& n, const std::shared_ptr<Scope>& s);
  Value lookup(const std::string& name, const std::shared_ptr<Scope>& s);
  Value binary(const std::string& op, const Value& a, const Value& b);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  bool contains(const Value& container, const Value& item);
  void step();

  std::size_t steps_ = 0;
  std::size_t out_size_ = 0;
  int depth_ = 0;
};

// builtins.cpp
Value global_function(const std::string& name);  // undefined if not a builtin global
Value call_filter(Interp& in, const std::string& name, Value input, Args& args);
bool call_test(Interp& in, const std::string& name, const Value& v, Args& args);
Value method(Interp& in, const Value& self, const std::string& name);  // undefined if none
[[noreturn]] void undefined_error(const Value& v);

// Helpers shared by builtins.cpp and methods.cpp.
[[noreturn]] void fail(const std::string& message);  // a RenderError
// Argument `k` (or keyword `name`), or `def`.
Value arg(Args& a, std::size_t k, const char* name, Value def = Value::undefined());
std::string str_arg(Args& a, std::size_t k, const char* name, const char* what);
std::string ascii_map(std::string s, int (*f)(int));  // upper/lower: ASCII letters only
int to_upper(int c);
int to_lower(int c);
std::string capitalize(const std::string& s);    // str.capitalize()
std::string str_title(const std::string& s);     // str.title()
std::string filter_title(const std::string& s);  // Jinja's `title`
std::string replace(const std::string& s, const std::string& old, const std::string& nu,
                    std::int64_t count);  // count < 0: all
Value split(const std::string& s, const Value& sep, std::int64_t maxsplit);
bool affix(const std::string& s, const Value& x, bool prefix);  // startswith / endswith
std::string join(Interp& in, const Value& v, const std::string& sep, const Value& attribute);

}  // namespace strata::jinja::detail
