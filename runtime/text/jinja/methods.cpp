// The Python str and dict methods templates call ("x".startswith(...), d.items()) and the
// global functions (range, namespace, dict, and HF's raise_exception and strftime_now).
#include <ctime>
#include <map>

#include "runtime/text/jinja/interp.h"

namespace strata::jinja::detail {

namespace {

Value bound(Value self, Value (*m)(Interp&, const Value&, Args&)) {
  return Value::callable(
      [self = std::move(self), m](Interp& in, Args& a) { return m(in, self, a); });
}

using Method = Value (*)(Interp&, const Value&, Args&);

const std::map<std::string, Method, std::less<>>& string_methods() {
  static const std::map<std::string, Method, std::less<>> m = {
      {"startswith", [](Interp&, const Value& s,
                        Args& a) { return Value::boolean(affix(s.s, arg(a, 0, "prefix"), true)); }},
      {"endswith", [](Interp&, const Value& s,
                      Args& a) { return Value::boolean(affix(s.s, arg(a, 0, "suffix"), false)); }},
      {"strip",
       [](Interp&, const Value& s, Args& a) {
         const Value c = arg(a, 0, "chars");
         return Value::str(py_strip(s.s, true, true, c.is_string() ? &c.s : nullptr));
       }},
      {"lstrip",
       [](Interp&, const Value& s, Args& a) {
         const Value c = arg(a, 0, "chars");
         return Value::str(py_strip(s.s, true, false, c.is_string() ? &c.s : nullptr));
       }},
      {"rstrip",
       [](Interp&, const Value& s, Args& a) {
         const Value c = arg(a, 0, "chars");
         return Value::str(py_strip(s.s, false, true, c.is_string() ? &c.s : nullptr));
       }},
      {"split",
       [](Interp&, const Value& s, Args& a) {
         const Value n = arg(a, 1, "maxsplit", Value::integer(-1));
         return split(s.s, arg(a, 0, "sep"), n.is_integral() ? n.as_int() : -1);
       }},
      {"upper",
       [](Interp&, const Value& s, Args&) { return Value::str(ascii_map(s.s, to_upper)); }},
      {"lower",
       [](Interp&, const Value& s, Args&) { return Value::str(ascii_map(s.s, to_lower)); }},
      {"title", [](Interp&, const Value& s, Args&) { return Value::str(str_title(s.s)); }},
      {"capitalize", [](Interp&, const Value& s, Args&) { return Value::str(capitalize(s.s)); }},
      {"replace",
       [](Interp&, const Value& s, Args& a) {
         const Value o = arg(a, 0, "old"), n = arg(a, 1, "new"), c = arg(a, 2, "count");
         if (!o.is_string() || !n.is_string()) fail("replace: needs strings");
         return Value::str(replace(s.s, o.s, n.s, c.is_integral() ? c.as_int() : -1));
       }},
      {"join",
       [](Interp& in, const Value& s, Args& a) {
         for (const auto& x : in.iterate(arg(a, 0, "iterable")))
           if (!x.is_string()) fail("join: sequence item is not a string");
         return Value::str(join(in, arg(a, 0, "iterable"), s.s, Value::undefined()));
       }},
      {"find",
       [](Interp&, const Value& s, Args& a) {
         const Value sub = arg(a, 0, "sub");
         if (!sub.is_string()) fail("find: needs a string");
         const std::size_t p = s.s.find(sub.s);
         return Value::integer(p == std::string::npos
                                   ? -1
                                   : static_cast<std::int64_t>(code_point_count(s.s.substr(0, p))));
       }},
      {"count",
       [](Interp&, const Value& s, Args& a) {
         const Value sub = arg(a, 0, "sub");
         if (!sub.is_string()) fail("count: needs a string");
         if (sub.s.empty())
           return Value::integer(static_cast<std::int64_t>(code_point_count(s.s)) + 1);
         std::int64_t n = 0;
         for (std::size_t p = s.s.find(sub.s); p != std::string::npos;
              p = s.s.find(sub.s, p + sub.s.size()))
           ++n;
         return Value::integer(n);
       }},
  };
  return m;
}

const std::map<std::string, Method, std::less<>>& dict_methods() {
  static const std::map<std::string, Method, std::less<>> m = {
      {"items",
       [](Interp& in, const Value& d, Args& a) {
         Value copy = d;
         return in.filter("items", copy, a);
       }},
      {"keys", [](Interp& in, const Value& d, Args&) { return Value::make_list(in.iterate(d)); }},
      {"values",
       [](Interp&, const Value& d, Args&) {
         std::vector<Value> out;
         for (const auto& kv : d.obj->items) out.push_back(kv.second);
         return Value::make_list(std::move(out));
       }},
      {"get",
       [](Interp&, const Value& d, Args& a) {
         const Value k = arg(a, 0, "key");
         const Value* v = k.is_string() ? d.obj->find(k.s) : nullptr;
         return v ? *v : arg(a, 1, "default", Value::none());
       }},
  };
  return m;
}

Value range(Interp& in, Args& a) {
  std::int64_t start = 0, stop = 0, stride = 1;
  for (const auto& v : a.pos)
    if (!v.is_integral()) fail("range() takes integers");
  if (a.pos.size() == 1) {
    stop = a.pos[0].as_int();
  } else if (a.pos.size() == 2 || a.pos.size() == 3) {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) stride = a.pos[2].as_int();
  } else {
    fail("range() takes 1 to 3 arguments");
  }
  if (stride == 0) fail("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (std::int64_t k = start; stride > 0 ? k < stop : k > stop; k += stride) {
    if (out.size() >= 100000) fail("range() is limited to 100000 items");
    out.push_back(Value::integer(k));
  }
  (void)in;
  return Value::make_list(std::move(out));
}

}  // namespace

Value method(Interp& in, const Value& self, const std::string& name) {
  (void)in;
  if (self.is_string()) {
    auto it = string_methods().find(name);
    if (it != string_methods().end()) return bound(self, it->second);
  } else if (self.is_dict()) {
    auto it = dict_methods().find(name);
    if (it != dict_methods().end()) return bound(self, it->second);
  }
  return Value::undefined(name);
}

Value global_function(const std::string& name) {
  if (name == "range") return Value::callable(range);
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return Value::callable([ns](Interp&, Args& a) {
      Object o;
      for (const auto& p : a.pos) {  // namespace({...}) / dict({...}) take a mapping too
        if (!p.is_dict()) fail("namespace()/dict() take keyword arguments or one mapping");
        for (const auto& kv : p.obj->items) o.set(kv.first, kv.second);
      }
      for (const auto& [k, v] : a.kw) o.set(k, v);
      Value v = Value::dict(std::move(o));
      if (ns) v.kind = Value::Kind::kNamespace;
      return v;
    });
  }
  if (name == "raise_exception")
    return Value::callable([](Interp&, Args& a) -> Value {
      throw RenderError(a.pos.empty() ? "" : to_str(a.pos[0]), /*raised=*/true);
    });
  if (name == "strftime_now")
    return Value::callable([](Interp& in, Args& a) {
      const std::string fmt = str_arg(a, 0, "format", "strftime_now");
      const std::time_t now = in.options.now ? *in.options.now : std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const std::size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
      if (n == 0 && !fmt.empty()) fail("strftime_now: format too long or empty result");
      return Value::str(std::string(buf, n));
    });
  return Value::undefined(name);
}

}  // namespace strata::jinja::detail
