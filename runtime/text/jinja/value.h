// The values a Jinja template computes with, modelled on the Python objects Jinja2 sees when
// Hugging Face renders a chat template: undefined, None, bool, int, float, str, list (tuple),
// dict (insertion-ordered, string keys), namespace() and callables. Lists and dicts are shared
// and immutable (HF renders in an ImmutableSandboxedEnvironment); only a namespace's
// attributes change. Strings are UTF-8; lengths, indices and slices count code points.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::jinja {

struct Value;
namespace detail {
class Interp;
}

struct Object {  // a dict or a namespace: insertion-ordered, string keys
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct Args {  // a call's arguments
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

using Function = std::function<Value(detail::Interp&, Args&)>;

struct Value {
  enum class Kind : std::uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  bool tuple = false;  // a list that prints as a tuple
  std::int64_t i = 0;
  double f = 0;
  std::string s;  // the string; for undefined, the name that was looked up
  std::shared_ptr<const std::vector<Value>> list;
  std::shared_ptr<Object> obj;  // dict (never changed after creation) or namespace
  std::shared_ptr<const Function> fn;

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(std::int64_t v);
  static Value real(double v);
  static Value str(std::string v);
  static Value make_list(std::vector<Value> v, bool tuple = false);
  static Value dict(Object o);
  static Value callable(Function f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  bool is_integral() const { return kind == Kind::kInt || kind == Kind::kBool; }
  std::int64_t as_int() const { return kind == Kind::kBool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(as_int()); }
  const std::vector<Value>& items() const { return *list; }
};

// Python-visible behaviour. Each throws RenderError (jinja.h) where Python raises.
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);                   // ==, with 1 == 1.0 == True
int compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0; TypeError as Python
std::string to_str(const Value& v);                           // str(v): what {{ v }} prints
std::string repr(const Value& v);                             // repr(v)
const char* type_name(const Value& v);                        // Python's type name, for messages

// json.dumps(v, ensure_ascii=False, indent=indent (<0: None), separators, sort_keys) as HF's
// tojson; item_sep / key_sep null: Python's defaults ("," with an indent, else ", "; ": ").
std::string to_json(const Value& v, int indent, bool sort_keys, const char* item_sep = nullptr,
                    const char* key_sep = nullptr);

Value from_json(const boost::json::value& v);

// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string format_float(double d);

// Code point helpers (UTF-8).
std::vector<std::size_t> code_point_offsets(std::string_view s);  // start of each, plus size
std::size_t code_point_count(std::string_view s);
bool py_isspace(char32_t cp);  // Python str.isspace()
std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars);

}  // namespace strata::jinja
