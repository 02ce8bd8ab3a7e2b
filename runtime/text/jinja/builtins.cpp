// Jinja2's filters and tests (jinja2/filters.py, jinja2/tests.py), the Python str/dict
// methods templates call, and the globals HF adds (raise_exception, strftime_now) — the
// subset chat templates use. The parser refuses every other name (ast.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <map>

#include "runtime/text/jinja/interp.h"

namespace strata::jinja::detail {

namespace {

using Fn = Value (*)(Interp&, Value&, Args&);

}  // namespace

[[noreturn]] void fail(const std::string& m) {
  throw RenderError(m);
}

// Argument `k` (or keyword `name`), or `def`.
Value arg(Args& a, std::size_t k, const char* name, Value def) {
  for (const auto& [key, v] : a.kw)
    if (key == name) return v;
  return k < a.pos.size() ? a.pos[k] : def;
}

std::string str_arg(Args& a, std::size_t k, const char* name, const char* what) {
  Value v = arg(a, k, name);
  if (!v.is_string()) fail(std::string(what) + ": '" + name + "' must be a string");
  return v.s;
}

std::string ascii_map(std::string s, int (*f)(int)) {
  for (auto& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
  return s;
}
int to_upper(int c) {
  return c >= 'a' && c <= 'z' ? c - 32 : c;
}
int to_lower(int c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_map(s, to_lower);
  if (!out.empty()) out[0] = static_cast<char>(to_upper(out[0]));
  return out;
}

std::string str_title(const std::string& s) {  // Python str.title()
  std::string out = s;
  bool prev_cased = false;
  for (auto& c : out) {
    const bool alpha = is_alpha(c) || static_cast<unsigned char>(c) >= 0x80;
    if (is_alpha(c)) c = static_cast<char>(prev_cased ? to_lower(c) : to_upper(c));
    prev_cased = alpha;
  }
  return out;
}

std::string filter_title(const std::string& s) {  // Jinja's `title`: words split at [-\s({[]
  std::string out;
  bool start = true;
  for (const char c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == ' ' || c == '\n' ||
                     c == '\t' || c == '\r' || c == '\f' || c == '\v';
    out.push_back(static_cast<char>(sep ? c : start ? to_upper(c) : to_lower(c)));
    start = sep;
  }
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& nu,
                    std::int64_t count) {
  std::string out;
  std::size_t pos = 0;
  std::int64_t done = 0;
  if (old.empty()) {  // Python inserts `nu` between every character
    const auto offs = code_point_offsets(s);
    for (std::size_t k = 0; k + 1 < offs.size(); ++k) {
      if (count < 0 || done++ < count) out += nu;
      out.append(s, offs[k], offs[k + 1] - offs[k]);
    }
    if (count < 0 || done < count) out += nu;
    return out;
  }
  for (;;) {
    const std::size_t hit = s.find(old, pos);
    if (hit == std::string::npos || (count >= 0 && done >= count)) break;
    out.append(s, pos, hit - pos);
    out += nu;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos);
  return out;
}

Value split(const std::string& s, const Value& sep, std::int64_t maxsplit) {
  std::vector<Value> parts;
  if (sep.is_none() || sep.is_undefined()) {  // runs of white space, none empty
    const auto offs = code_point_offsets(s);
    std::size_t k = 0;
    std::string cur;
    bool in_word = false;
    for (; k + 1 < offs.size(); ++k) {
      const std::string ch = s.substr(offs[k], offs[k + 1] - offs[k]);
      const bool sp = py_strip(ch, true, true, nullptr).empty();
      if (sp && in_word && (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit)) {
        parts.push_back(Value::str(cur));
        cur.clear();
        in_word = false;
      } else if (!sp || in_word) {
        cur += ch;
        in_word = true;
      }
    }
    if (in_word) parts.push_back(Value::str(py_strip(cur, false, true, nullptr)));
    return Value::make_list(std::move(parts));
  }
  if (!sep.is_string()) fail("split: the separator must be a string");
  if (sep.s.empty()) fail("empty separator");
  std::size_t pos = 0;
  for (;;) {
    const std::size_t hit = s.find(sep.s, pos);
    if (hit == std::string::npos ||
        (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) >= maxsplit))
      break;
    parts.push_back(Value::str(s.substr(pos, hit - pos)));
    pos = hit + sep.s.size();
  }
  parts.push_back(Value::str(s.substr(pos)));
  return Value::make_list(std::move(parts));
}

bool affix(const std::string& s, const Value& x, bool prefix) {
  const auto one = [&](const Value& v) {
    if (!v.is_string()) fail(std::string(prefix ? "startswith" : "endswith") + ": needs a string");
    if (v.s.size() > s.size()) return false;
    return prefix ? s.compare(0, v.s.size(), v.s) == 0
                  : s.compare(s.size() - v.s.size(), v.s.size(), v.s) == 0;
  };
  if (x.is_list()) return std::any_of(x.list->begin(), x.list->end(), one);
  return one(x);
}

namespace {

std::int64_t length(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<std::int64_t>(code_point_count(v.s));
    case Value::Kind::kList:
      return static_cast<std::int64_t>(v.list->size());
    case Value::Kind::kDict:
      return static_cast<std::int64_t>(v.obj->items.size());
    default:
      fail(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

// Jinja's make_attrgetter: "a.b.0" looked up item by item.
Value attr_path(Interp& in, const Value& item, const std::string& path) {
  Value v = item;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? dot : dot - pos);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    std::int64_t index = 0;
    const bool numeric =
        digits && std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    v = in.getitem(v, numeric ? Value::integer(index) : Value::str(part));
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

}  // namespace

std::string join(Interp& in, const Value& v, const std::string& sep, const Value& attribute) {
  std::string out;
  bool first = true;
  for (const auto& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_undefined() ? item : attr_path(in, item, to_str(attribute)));
    in.check_output_size(out.size());
  }
  return out;
}

namespace {

Args rest(Args& a, std::size_t from) {
  Args r;
  for (std::size_t k = from; k < a.pos.size(); ++k) r.pos.push_back(a.pos[k]);
  return r;
}

Value select(Interp& in, Value& v, Args& a, bool attr, bool keep) {
  std::vector<Value> out;
  const std::string key = attr ? str_arg(a, 0, "attribute", "selectattr") : "";
  const std::size_t t = attr ? 1 : 0;
  const bool has_test = a.pos.size() > t;
  std::string test_name;
  if (has_test) {
    if (!a.pos[t].is_string()) fail("select: the test name must be a string");
    test_name = a.pos[t].s;
  }
  Args targs = rest(a, t + 1);
  for (const auto& item : in.iterate(v)) {
    const Value x = attr ? attr_path(in, item, key) : item;
    const bool ok = has_test ? in.test(test_name, x, targs) : truthy(x);
    if (ok == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

Value to_int(const Value& v, const Value& def) {
  if (v.is_integral()) return Value::integer(v.as_int());
  const auto fits = [](double d) { return std::isfinite(d) && std::fabs(d) < 9.2e18; };
  if (v.kind == Value::Kind::kFloat && fits(v.f))
    return Value::integer(static_cast<std::int64_t>(v.f));
  if (v.is_string()) {
    const std::string s = py_strip(v.s, true, true, nullptr);
    std::size_t used = 0;
    try {
      const long long x = std::stoll(s, &used);
      if (used == s.size()) return Value::integer(x);
    } catch (const std::exception&) {
    }
    try {
      const double d = std::stod(s, &used);
      if (used == s.size() && fits(d)) return Value::integer(static_cast<std::int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return def.is_undefined() ? Value::integer(0) : def;
}

std::map<std::string, Fn, std::less<>>& filters() {
  static std::map<std::string, Fn, std::less<>> f = {
      {"trim",
       [](Interp&, Value& v, Args& a) {
         Value chars = arg(a, 0, "chars");
         const std::string c = chars.is_string() ? chars.s : "";
         return Value::str(py_strip(to_str(v), true, true, chars.is_string() ? &c : nullptr));
       }},
      {"length", [](Interp&, Value& v, Args&) { return Value::integer(length(v)); }},
      {"count", [](Interp&, Value& v, Args&) { return Value::integer(length(v)); }},
      {"tojson",
       [](Interp&, Value& v, Args& a) {
         const Value indent = arg(a, 1, "indent");
         if (truthy(arg(a, 0, "ensure_ascii"))) fail("tojson: ensure_ascii is not supported");
         const Value seps = arg(a, 2, "separators");
         const bool custom = seps.is_list();
         if (custom && (seps.list->size() != 2 || !(*seps.list)[0].is_string() ||
                        !(*seps.list)[1].is_string()))
           fail("tojson: separators must be (item_separator, key_separator)");
         if (!custom && !seps.is_undefined() && !seps.is_none())
           fail("tojson: separators must be (item_separator, key_separator)");
         const int ind = indent.is_integral() ? static_cast<int>(indent.as_int()) : -1;
         return Value::str(to_json(v, ind, truthy(arg(a, 3, "sort_keys")),
                                   custom ? (*seps.list)[0].s.c_str() : nullptr,
                                   custom ? (*seps.list)[1].s.c_str() : nullptr));
       }},
      {"upper",
       [](Interp&, Value& v, Args&) { return Value::str(ascii_map(to_str(v), to_upper)); }},
      {"lower",
       [](Interp&, Value& v, Args&) { return Value::str(ascii_map(to_str(v), to_lower)); }},
      {"capitalize", [](Interp&, Value& v, Args&) { return Value::str(capitalize(to_str(v))); }},
      {"title", [](Interp&, Value& v, Args&) { return Value::str(filter_title(to_str(v))); }},
      {"default",
       [](Interp&, Value& v, Args& a) {
         const bool boolean = truthy(arg(a, 1, "boolean"));
         if (v.is_undefined() || (boolean && !truthy(v)))
           return arg(a, 0, "default_value", Value::str(""));
         return v;
       }},
      {"items",
       [](Interp&, Value& v, Args&) {
         std::vector<Value> out;
         if (v.is_undefined()) return Value::make_list({});
         if (!v.is_dict()) fail("items: can only get item pairs from a mapping");
         for (const auto& [k, x] : v.obj->items)
           out.push_back(Value::make_list({Value::str(k), x}, true));
         return Value::make_list(std::move(out));
       }},
      {"selectattr", [](Interp& in, Value& v, Args& a) { return select(in, v, a, true, true); }},
      {"rejectattr", [](Interp& in, Value& v, Args& a) { return select(in, v, a, true, false); }},
      {"select", [](Interp& in, Value& v, Args& a) { return select(in, v, a, false, true); }},
      {"reject", [](Interp& in, Value& v, Args& a) { return select(in, v, a, false, false); }},
      {"first",
       [](Interp& in, Value& v, Args&) {
         auto items = in.iterate(v);
         return items.empty() ? Value::undefined("first") : items.front();
       }},
      {"last",
       [](Interp& in, Value& v, Args&) {
         auto items = in.iterate(v);
         return items.empty() ? Value::undefined("last") : items.back();
       }},
      {"join",
       [](Interp& in, Value& v, Args& a) {
         const Value sep = arg(a, 0, "d", Value::str(""));
         return Value::str(join(in, v, to_str(sep), arg(a, 1, "attribute")));
       }},
      {"list", [](Interp& in, Value& v, Args&) { return Value::make_list(in.iterate(v)); }},
      {"string", [](Interp&, Value& v, Args&) { return Value::str(to_str(v)); }},
      {"replace",
       [](Interp&, Value& v, Args& a) {
         const Value count = arg(a, 2, "count");
         return Value::str(replace(to_str(v), to_str(arg(a, 0, "old")), to_str(arg(a, 1, "new")),
                                   count.is_integral() ? count.as_int() : -1));
       }},
      {"map",
       [](Interp& in, Value& v, Args& a) {
         std::vector<Value> out;
         const Value attribute = arg(a, 99, "attribute");
         const Value def = arg(a, 99, "default");
         if (!attribute.is_undefined()) {
           for (const auto& item : in.iterate(v)) {
             Value x = attr_path(in, item, to_str(attribute));
             out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
           }
           return Value::make_list(std::move(out));
         }
         if (a.pos.empty() || !a.pos[0].is_string()) fail("map: needs a filter name or attribute=");
         const std::string name = a.pos[0].s;
         if (!is_filter(name)) fail("map: unsupported filter '" + name + "'");
         Args fargs = rest(a, 1);
         for (const auto& item : in.iterate(v)) {
           Args copy = fargs;
           out.push_back(in.filter(name, item, copy));
         }
         return Value::make_list(std::move(out));
       }},
      {"int", [](Interp&, Value& v, Args& a) { return to_int(v, arg(a, 0, "default")); }},
      {"float",
       [](Interp&, Value& v, Args& a) {
         if (v.is_number()) return Value::real(v.as_double());
         if (v.is_string()) {
           try {
             std::size_t used = 0;
             const std::string s = py_strip(v.s, true, true, nullptr);
             const double d = std::stod(s, &used);
             if (used == s.size()) return Value::real(d);
           } catch (const std::exception&) {
           }
         }
         const Value def = arg(a, 0, "default");
         return def.is_undefined() ? Value::real(0) : def;
       }},
      {"abs",
       [](Interp&, Value& v, Args&) {
         if (!v.is_number())
           fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
         if (v.kind == Value::Kind::kFloat) return Value::real(std::fabs(v.f));
         if (v.as_int() == INT64_MIN) fail("integer overflow (beyond 64 bits)");
         return Value::integer(std::llabs(v.as_int()));
       }},
      {"round",
       [](Interp&, Value& v, Args& a) {
         if (!v.is_number()) fail("round: needs a number");
         const Value p = arg(a, 0, "precision", Value::integer(0));
         const std::string method = to_str(arg(a, 1, "method", Value::str("common")));
         const double m = std::pow(10.0, static_cast<double>(p.as_int()));
         const double x = v.as_double() * m;
         // Python's round(): halves to even
         const double r = method == "floor"  ? std::floor(x)
                          : method == "ceil" ? std::ceil(x)
                                             : std::nearbyint(x);
         return Value::real(r / m);
       }},
      {"sum",
       [](Interp& in, Value& v, Args& a) {
         const Value attribute = arg(a, 0, "attribute");
         Value total = arg(a, 1, "start", Value::integer(0));
         for (const auto& item : in.iterate(v)) {
           const Value x = attribute.is_undefined() ? item : attr_path(in, item, to_str(attribute));
           if (!x.is_number() || !total.is_number()) fail("sum: needs numbers");
           total = total.is_integral() && x.is_integral()
                       ? Value::integer(total.as_int() + x.as_int())
                       : Value::real(total.as_double() + x.as_double());
         }
         return total;
       }},
      {"reverse",
       [](Interp& in, Value& v, Args&) {
         if (v.is_string()) {
           const auto offs = code_point_offsets(v.s);
           std::string out;
           for (std::size_t k = offs.size() - 1; k > 0; --k)
             out.append(v.s, offs[k - 1], offs[k] - offs[k - 1]);
           return Value::str(std::move(out));
         }
         auto items = in.iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::make_list(std::move(items));
       }},
      {"safe", [](Interp&, Value& v, Args&) { return v; }},
      {"indent",
       [](Interp&, Value& v, Args& a) {
         const Value w = arg(a, 0, "width", Value::integer(4));
         const std::string pad =
             w.is_string()
                 ? w.s
                 : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, w.as_int())),
                               ' ');
         const bool first = truthy(arg(a, 1, "first")), blank = truthy(arg(a, 2, "blank"));
         const std::string s = to_str(v);
         std::string out;
         std::size_t pos = 0;
         for (bool head = true;; head = false) {
           const std::size_t nl = s.find('\n', pos);
           const std::string line = s.substr(pos, nl == std::string::npos ? nl : nl - pos);
           if ((!head || first) && (blank || !line.empty())) out += pad;
           out += line;
           if (nl == std::string::npos) break;
           out += '\n';
           pos = nl + 1;
         }
         return Value::str(std::move(out));
       }},
  };
  return f;
}

bool value_is(const Value& v, Value::Kind k) {
  return v.kind == k;
}

using TestFn = bool (*)(Interp&, const Value&, Args&);
std::map<std::string, TestFn, std::less<>>& tests() {
  static std::map<std::string, TestFn, std::less<>> t = {
      {"defined", [](Interp&, const Value& v, Args&) { return !v.is_undefined(); }},
      {"undefined", [](Interp&, const Value& v, Args&) { return v.is_undefined(); }},
      {"none", [](Interp&, const Value& v, Args&) { return v.is_none(); }},
      {"string", [](Interp&, const Value& v, Args&) { return v.is_string(); }},
      {"mapping", [](Interp&, const Value& v, Args&) { return v.is_dict(); }},
      {"iterable",
       [](Interp&, const Value& v, Args&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"sequence",
       [](Interp&, const Value& v, Args&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"number", [](Interp&, const Value& v, Args&) { return v.is_number(); }},
      {"integer", [](Interp&, const Value& v, Args&) { return value_is(v, Value::Kind::kInt); }},
      {"float", [](Interp&, const Value& v, Args&) { return value_is(v, Value::Kind::kFloat); }},
      {"boolean", [](Interp&, const Value& v, Args&) { return value_is(v, Value::Kind::kBool); }},
      {"true", [](Interp&, const Value& v, Args&) { return v.kind == Value::Kind::kBool && v.b; }},
      {"false",
       [](Interp&, const Value& v, Args&) { return v.kind == Value::Kind::kBool && !v.b; }},
      {"callable", [](Interp&, const Value& v, Args&) { return v.kind == Value::Kind::kCallable; }},
      {"odd",
       [](Interp&, const Value& v, Args&) { return v.is_integral() && v.as_int() % 2 != 0; }},
      {"even",
       [](Interp&, const Value& v, Args&) { return v.is_integral() && v.as_int() % 2 == 0; }},
      {"divisibleby",
       [](Interp&, const Value& v, Args& a) {
         const Value d = arg(a, 0, "num");
         if (!v.is_integral() || !d.is_integral() || d.as_int() == 0)
           fail("divisibleby: needs integers");
         return v.as_int() % d.as_int() == 0;
       }},
      {"eq", [](Interp&, const Value& v, Args& a) { return equal(v, arg(a, 0, "other")); }},
      {"ne", [](Interp&, const Value& v, Args& a) { return !equal(v, arg(a, 0, "other")); }},
      {"lt",
       [](Interp&, const Value& v, Args& a) { return compare(v, arg(a, 0, "other"), "<") < 0; }},
      {"le",
       [](Interp&, const Value& v, Args& a) { return compare(v, arg(a, 0, "other"), "<=") <= 0; }},
      {"gt",
       [](Interp&, const Value& v, Args& a) { return compare(v, arg(a, 0, "other"), ">") > 0; }},
      {"ge",
       [](Interp&, const Value& v, Args& a) { return compare(v, arg(a, 0, "other"), ">=") >= 0; }},
      {"in",
       [](Interp&, const Value& v, Args& a) {
         const Value c = arg(a, 0, "seq");
         if (c.is_string()) return v.is_string() && c.s.find(v.s) != std::string::npos;
         if (c.is_dict()) return v.is_string() && c.obj->find(v.s) != nullptr;
         if (c.is_list())
           return std::any_of(c.list->begin(), c.list->end(),
                              [&](const Value& x) { return equal(x, v); });
         return false;
       }},
      {"lower", [](Interp&, const Value& v,
                   Args&) { return v.is_string() && ascii_map(v.s, to_lower) == v.s; }},
      {"upper", [](Interp&, const Value& v,
                   Args&) { return v.is_string() && ascii_map(v.s, to_upper) == v.s; }},
  };
  return t;
}

const std::map<std::string, std::string, std::less<>> kTestAliases = {
    {"equalto", "eq"}, {"==", "eq"}, {"!=", "ne"}, {"lessthan", "lt"},    {"<", "lt"},
    {"<=", "le"},      {">", "gt"},  {">=", "ge"}, {"greaterthan", "gt"}, {"sameas", "eq"}};

std::string test_name(std::string_view n) {
  auto it = kTestAliases.find(n);
  return it == kTestAliases.end() ? std::string(n) : it->second;
}

const std::map<std::string, std::string, std::less<>> kFilterAliases = {{"d", "default"}};

}  // namespace

[[noreturn]] void undefined_error(const Value& v) {
  throw RenderError(v.s.empty() ? "a value is undefined" : "'" + v.s + "' is undefined");
}

bool is_filter(std::string_view name) {
  return filters().count(name) || kFilterAliases.count(name);
}
bool is_test(std::string_view name) {
  return tests().count(test_name(name)) > 0;
}
bool is_global_function(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}
bool is_method(std::string_view name) {
  static const char* const kMethods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip",
                                         "split",      "upper",    "lower", "title",  "capitalize",
                                         "replace",    "join",     "find",  "count",  "items",
                                         "keys",       "values",   "get",   "cycle"};
  return std::find(std::begin(kMethods), std::end(kMethods), name) != std::end(kMethods);
}

Value call_filter(Interp& in, const std::string& name, Value input, Args& args) {
  auto alias = kFilterAliases.find(name);
  const std::string& n = alias == kFilterAliases.end() ? name : alias->second;
  auto it = filters().find(n);
  if (it == filters().end()) fail("unsupported filter '" + name + "'");
  return it->second(in, input, args);
}

bool call_test(Interp& in, const std::string& name, const Value& v, Args& args) {
  auto it = tests().find(test_name(name));
  if (it == tests().end()) fail("unsupported test '" + name + "'");
  return it->second(in, v, args);
}

}  // namespace strata::jinja::detail
