#include "runtime/text/jinja/interp.h"

#include <cmath>

namespace strata::jinja {

namespace detail {

namespace {

[[noreturn]] void type_error(const std::string& what) {
  throw RenderError(what);
}

bool is_unsafe(const std::string& name) {
  return !name.empty() && name[0] == '_';
}

// Python's slice.indices(): start/stop/step clamped for a sequence of n elements.
void slice_indices(std::int64_t n, const Value& a, const Value& b, const Value& c,
                   std::int64_t& start, std::int64_t& stop, std::int64_t& step) {
  const auto get = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_integral()) type_error(std::string("slice ") + what + " must be an integer");
    return v.as_int();
  };
  step = get(c, "step").value_or(1);
  if (step == 0) type_error("slice step cannot be zero");
  const auto clamp = [&](std::optional<std::int64_t> x, std::int64_t def) {
    if (!x) return def;
    std::int64_t v = *x;
    if (v < 0) v += n;
    if (step > 0) return std::clamp<std::int64_t>(v, 0, n);
    return std::clamp<std::int64_t>(v, -1, n - 1);
  };
  start = clamp(get(a, "start"), step > 0 ? 0 : n - 1);
  stop = clamp(get(b, "stop"), step > 0 ? n : -1);
}

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars)
    if (k == name) {
      old = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

void Interp::step() {
  if (++steps_ > options.max_steps)
    throw RenderError("the template ran for more than " + std::to_string(options.max_steps) +
                      " steps");
}

void Interp::check_output_size(std::size_t n) const {
  if (n > options.max_output)
    throw RenderError("the rendering is larger than " + std::to_string(options.max_output) +
                      " bytes");
}

void Interp::render(const Program& p, std::shared_ptr<Scope> globals, std::string& out) {
  exec(p.body, globals, out);
}

Interp::Flow Interp::exec(const Body& body, const std::shared_ptr<Scope>& s, std::string& out) {
  for (const auto& np : body) {
    const Node& n = *np;
    line = n.line;
    step();
    switch (n.kind) {
      case Node::Kind::kText:
        out += n.text;
        break;
      case Node::Kind::kOutput:
        out += to_str(eval(*n.expr, s));
        break;
      case Node::Kind::kIf:
        for (const auto& [cond, b] : n.branches) {
          if (!cond || truthy(eval(*cond, s))) {
            const Flow f = exec(b, s, out);
            if (f != Flow::kNormal) return f;
            break;
          }
        }
        break;
      case Node::Kind::kFor: {
        const Flow f = exec_for(n, s, out);
        if (f != Flow::kNormal) return f;
        break;
      }
      case Node::Kind::kSet:
        exec_set(n, s);
        break;
      case Node::Kind::kSetBlock: {
        std::string text;
        exec(n.body, s, text);
        s->set(n.targets[0], Value::str(std::move(text)));
        break;
      }
      case Node::Kind::kMacro:
        s->set(n.targets[0], make_macro(n, s));
        break;
      case Node::Kind::kCallBlock:
        out += to_str(call_block(n, s));
        break;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kBlock: {
        const Flow f = exec(n.body, s, out);
        if (f != Flow::kNormal) return f;
        break;
      }
    }
    check_output_size(out.size());
  }
  return Flow::kNormal;
}

std::vector<Value> Interp::iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return *v.list;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.obj->items) keys.push_back(Value::str(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const auto offs = code_point_offsets(v.s);
      for (std::size_t k = 0; k + 1 < offs.size(); ++k)
        chars.push_back(Value::str(v.s.substr(offs[k], offs[k + 1] - offs[k])));
      return chars;
    }
    default:
      type_error(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

Interp::Flow Interp::exec_for(const Node& n, const std::shared_ptr<Scope>& s, std::string& out) {
  std::vector<Value> items = iterate(eval(*n.expr, s));
  const auto bind = [&](Scope& frame, const Value& item) {
    if (n.targets.size() == 1) {
      frame.set(n.targets[0], item);
      return;
    }
    const std::vector<Value> parts = iterate(item);
    if (parts.size() != n.targets.size())
      type_error("cannot unpack " + std::to_string(parts.size()) + " values into " +
                 std::to_string(n.targets.size()) + " loop variables");
    for (std::size_t k = 0; k < parts.size(); ++k) frame.set(n.targets[k], parts[k]);
  };
  if (n.filter) {  // `for x in xs if cond`: the loop sees only the items that pass
    std::vector<Value> kept;
    for (const auto& item : items) {
      auto frame = std::make_shared<Scope>();
      frame->parent = s;
      bind(*frame, item);
      if (truthy(eval(*n.filter, frame))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(n.else_body, s, out);
  const auto len = static_cast<std::int64_t>(items.size());
  for (std::int64_t k = 0; k < len; ++k) {
    step();
    auto frame = std::make_shared<Scope>();
    frame->parent = s;
    Object loop;
    loop.set("index", Value::integer(k + 1));
    loop.set("index0", Value::integer(k));
    loop.set("revindex", Value::integer(len - k));
    loop.set("revindex0", Value::integer(len - k - 1));
    loop.set("first", Value::boolean(k == 0));
    loop.set("last", Value::boolean(k == len - 1));
    loop.set("length", Value::integer(len));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    loop.set("previtem", k > 0 ? items[k - 1] : Value::undefined("loop.previtem"));
    loop.set("nextitem", k + 1 < len ? items[k + 1] : Value::undefined("loop.nextitem"));
    loop.set("cycle", Value::callable([k](Interp&, Args& a) -> Value {
               if (a.pos.empty()) type_error("no items for cycling given");
               return a.pos[static_cast<std::size_t>(k) % a.pos.size()];
             }));
    frame->set("loop", Value::dict(std::move(loop)));
    bind(*frame, items[k]);
    if (exec(n.body, frame, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interp::exec_set(const Node& n, const std::shared_ptr<Scope>& s) {
  Value v = eval(*n.expr, s);
  if (!n.attr.empty()) {
    const Value* ns = s->find(n.targets[0]);
    if (!ns || ns->kind != Value::Kind::kNamespace)
      type_error("cannot assign attribute '" + n.attr + "' on '" + n.targets[0] +
                 "': not a namespace");
    ns->obj->set(n.attr, std::move(v));
    return;
  }
  if (n.targets.size() == 1) {
    s->set(n.targets[0], std::move(v));
    return;
  }
  const std::vector<Value> parts = iterate(v);
  if (parts.size() != n.targets.size())
    type_error("cannot unpack " + std::to_string(parts.size()) + " values into " +
               std::to_string(n.targets.size()) + " names");
  for (std::size_t k = 0; k < parts.size(); ++k) s->set(n.targets[k], parts[k]);
}

Value Interp::lookup(const std::string& name, const std::shared_ptr<Scope>& s) {
  if (const Value* v = s->find(name)) return *v;
  Value g = global_function(name);
  if (!g.is_undefined()) return g;
  return Value::undefined(name);
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (is_unsafe(name)) return Value::undefined(name);
  if (obj.kind == Value::Kind::kNamespace) {
    const Value* v = obj.obj->find(name);
    return v ? *v : Value::undefined(name);
  }
  Value m = method(*this, obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    const Value* v = obj.obj->find(name);
    return v ? *v : Value::undefined(name);
  }
  return Value::undefined(name);
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict() || obj.kind == Value::Kind::kNamespace) {
    if (key.is_string()) {
      if (const Value* v = obj.obj->find(key.s)) return *v;
      if (obj.is_dict()) return getattr(obj, key.s);
    }
    return Value::undefined(key.is_string() ? key.s : repr(key));
  }
  if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    const bool str = obj.is_string();
    std::vector<std::size_t> offs;
    if (str) offs = code_point_offsets(obj.s);
    const auto n = static_cast<std::int64_t>(str ? offs.size() - 1 : obj.list->size());
    std::int64_t k = key.as_int();
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::undefined("index " + std::to_string(key.as_int()));
    if (!str) return (*obj.list)[static_cast<std::size_t>(k)];
    return Value::str(obj.s.substr(offs[k], offs[k + 1] - offs[k]));
  }
  if (key.is_string()) return getattr(obj, key.s);
  return Value::undefined(repr(key));
}

Value Interp::slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
  if (obj.is_undefined()) undefined_error(obj);
  if (!obj.is_list() && !obj.is_string()) return Value::undefined("slice");
  const bool str = obj.is_string();
  std::vector<std::size_t> offs;
  if (str) offs = code_point_offsets(obj.s);
  const auto n = static_cast<std::int64_t>(str ? offs.size() - 1 : obj.list->size());
  std::int64_t start, stop, stride;
  slice_indices(n, a, b, c, start, stop, stride);
  std::string s;
  std::vector<Value> l;
  for (std::int64_t k = start; stride > 0 ? k < stop : k > stop; k += stride) {
    if (str)
      s.append(obj.s, offs[k], offs[k + 1] - offs[k]);
    else
      l.push_back((*obj.list)[static_cast<std::size_t>(k)]);
  }
  return str ? Value::str(std::move(s)) : Value::make_list(std::move(l), obj.tuple);
}

bool Interp::contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        type_error(std::string("'in <string>' requires string as left operand, not ") +
                   type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& e : *container.list)
        if (equal(e, item)) return true;
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.obj->find(item.s) != nullptr;
    default:
      type_error(std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

Value Interp::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const auto unsupported = [&]() -> Value {
    type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
               type_name(b) + "'");
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_integral() && b.is_integral();
    const std::int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_double(), fy = b.as_double();
    // Python's ints do not overflow; 64-bit ones that would are an error here.
    std::int64_t r = 0;
    const auto checked = [&r](bool overflow) {  // after the builtin has written r
      if (overflow) type_error("integer overflow (beyond 64 bits)");
      return Value::integer(r);
    };
    if (op == "+") return ints ? checked(__builtin_add_overflow(x, y, &r)) : Value::real(fx + fy);
    if (op == "-") return ints ? checked(__builtin_sub_overflow(x, y, &r)) : Value::real(fx - fy);
    if (op == "*") return ints ? checked(__builtin_mul_overflow(x, y, &r)) : Value::real(fx * fy);
    if (op == "**") {
      if (ints && y >= 0) {
        r = 1;  // by squaring: O(log y)
        std::int64_t base = x;
        for (std::int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(r, base, &r))
            type_error("integer overflow (beyond 64 bits)");
          if (e > 1 && __builtin_mul_overflow(base, base, &base))
            type_error("integer overflow (beyond 64 bits)");
        }
        return Value::integer(r);
      }
      return Value::real(std::pow(fx, fy));
    }
    if ((ints && y == 0) || (!ints && fy == 0)) type_error("division by zero");
    if (ints && x == INT64_MIN && y == -1 && op != "/")
      type_error("integer overflow (beyond 64 bits)");
    if (op == "/") return Value::real(fx / fy);
    if (op == "//") {
      if (ints) return Value::integer(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
      return Value::real(std::floor(fx / fy));
    }
    if (op == "%") {
      if (ints) {
        std::int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value::integer(r);
      }
      double r = std::fmod(fx, fy);
      if (r != 0 && ((r < 0) != (fy < 0))) r += fy;
      return Value::real(r);
    }
    return unsupported();
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    check_output_size(a.s.size() + b.s.size());
    return Value::str(a.s + b.s);
  }
  if (op == "+" && a.is_list() && b.is_list() && a.tuple == b.tuple) {
    std::vector<Value> l = *a.list;
    l.insert(l.end(), b.list->begin(), b.list->end());
    return Value::make_list(std::move(l), a.tuple);
  }
  if (op == "*" && (a.is_string() || a.is_list()) && b.is_integral()) {
    const std::int64_t n = std::max<std::int64_t>(0, b.as_int());
    const std::size_t unit = a.is_string() ? a.s.size() : a.list->size() * sizeof(Value);
    if (unit && static_cast<std::uint64_t>(n) > options.max_output / unit)
      check_output_size(SIZE_MAX);
    if (a.is_string()) {
      std::string s;
      for (std::int64_t k = 0; k < n; ++k) s += a.s;
      return Value::str(std::move(s));
    }
    std::vector<Value> l;
    for (std::int64_t k = 0; k < n; ++k) l.insert(l.end(), a.list->begin(), a.list->end());
    return Value::make_list(std::move(l), a.tuple);
  }
  if (op == "*" && a.is_integral() && (b.is_string() || b.is_list())) return binary(op, b, a);
  return unsupported();
}

Value Interp::call(const Value& fn, Args& args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (fn.kind != Value::Kind::kCallable)
    type_error(std::string("'") + type_name(fn) + "' object is not callable");
  return (*fn.fn)(*this, args);
}

Value Interp::filter(const std::string& name, Value input, Args& args) {
  return call_filter(*this, name, std::move(input), args);
}

bool Interp::test(const std::string& name, const Value& v, Args& args) {
  return call_test(*this, name, v, args);
}

Value Interp::eval(const Expr& e, const std::shared_ptr<Scope>& s) {
  using K = Expr::Kind;
  line = e.line;
  const auto args_of = [&](std::size_t first) {
    Args a;
    for (std::size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], s));
    for (const auto& [key, x] : e.kwargs) a.kw.emplace_back(key, eval(*x, s));
    return a;
  };
  switch (e.kind) {
    case K::kConst:
      return e.value;
    case K::kName:
      return lookup(e.name, s);
    case K::kAttr:
      return getattr(eval(*e.args[0], s), e.name);
    case K::kItem:
      return getitem(eval(*e.args[0], s), eval(*e.args[1], s));
    case K::kSlice: {
      const auto part = [&](std::size_t k) {
        return e.args[k] ? eval(*e.args[k], s) : Value::none();
      };
      return slice(eval(*e.args[0], s), part(1), part(2), part(3));
    }
    case K::kCall: {
      Value fn = eval(*e.args[0], s);
      Args a = args_of(1);
      return call(fn, a);
    }
    case K::kFilter: {
      Value input = eval(*e.args[0], s);
      Args a = args_of(1);
      return filter(e.name, std::move(input), a);
    }
    case K::kTest: {
      Value v = eval(*e.args[0], s);
      Args a = args_of(1);
      return Value::boolean(test(e.name, v, a) != e.negate);
    }
    case K::kNeg:
    case K::kPos: {
      Value v = eval(*e.args[0], s);
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number())
        type_error(std::string("bad operand type for unary ") + (e.kind == K::kNeg ? "-" : "+") +
                   ": '" + type_name(v) + "'");
      if (e.kind == K::kPos) return v.kind == Value::Kind::kBool ? Value::integer(v.as_int()) : v;
      if (v.kind == Value::Kind::kFloat) return Value::real(-v.f);
      if (v.as_int() == INT64_MIN) type_error("integer overflow (beyond 64 bits)");
      return Value::integer(-v.as_int());
    }
    case K::kNot:
      return Value::boolean(!truthy(eval(*e.args[0], s)));
    case K::kAnd: {
      Value a = eval(*e.args[0], s);
      return truthy(a) ? eval(*e.args[1], s) : a;
    }
    case K::kOr: {
      Value a = eval(*e.args[0], s);
      return truthy(a) ? a : eval(*e.args[1], s);
    }
    case K::kBinary:
      return binary(e.name, eval(*e.args[0], s), eval(*e.args[1], s));
    case K::kConcat: {
      std::string out;
      for (const auto& x : e.args) out += to_str(eval(*x, s));
      check_output_size(out.size());
      return Value::str(std::move(out));
    }
    case K::kCompare: {
      Value left = eval(*e.args[0], s);
      for (std::size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1], s);
        const std::string& op = e.ops[k];
        bool ok;
        if (op == "==")
          ok = equal(left, right);
        else if (op == "!=")
          ok = !equal(left, right);
        else if (op == "in")
          ok = contains(right, left);
        else if (op == "notin")
          ok = !contains(right, left);
        else {
          if (left.is_undefined()) undefined_error(left);
          if (right.is_undefined()) undefined_error(right);
          const int c = compare(left, right, op.c_str());
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case K::kCond:
      if (truthy(eval(*e.args[0], s))) return eval(*e.args[1], s);
      return e.args[2] ? eval(*e.args[2], s) : Value::undefined();
    case K::kList:
    case K::kTuple: {
      std::vector<Value> l;
      for (const auto& x : e.args) l.push_back(eval(*x, s));
      return Value::make_list(std::move(l), e.kind == K::kTuple);
    }
    case K::kDict: {
      Object o;
      for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], s);
        if (!key.is_string()) type_error("dictionary keys must be strings here");
        o.set(key.s, eval(*e.args[k + 1], s));
      }
      return Value::dict(std::move(o));
    }
  }
  return Value::undefined();
}

}  // namespace detail

Template Template::parse(std::string_view source) {
  Template t;
  t.program_ = detail::parse_program(source);
  return t;
}

std::string Template::render(const boost::json::object& vars, const RenderOptions& options) const {
  auto globals = std::make_shared<detail::Scope>();
  for (const auto& kv : vars) globals->set(std::string(kv.key()), from_json(kv.value()));
  detail::Interp in(options);
  std::string out;
  try {
    in.render(*program_, globals, out);
  } catch (const RenderError& e) {
    if (e.raised()) throw;
    throw RenderError("line " + std::to_string(in.line) + ": " + e.what());
  }
  return out;
}

}  // namespace strata::jinja
