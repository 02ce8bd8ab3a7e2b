// Macros and {% call %} blocks: a macro is a callable that renders its body in a frame whose
// parent is the frame it was defined in; a call block passes the macro a `caller` that
// renders the block's body in the caller's frame.
#include "runtime/text/jinja/interp.h"

namespace strata::jinja::detail {

namespace {

[[noreturn]] void type_error(const std::string& what) {
  throw RenderError(what);
}

}  // namespace

Value Interp::make_macro(const Node& n, const std::shared_ptr<Scope>& s) {
  const Node* node = &n;
  std::weak_ptr<Scope> defined_in = s;  // the frame holds the macro: no cycle
  return Value::callable([node, defined_in](Interp& in, Args& a) -> Value {
    const std::size_t nparams = node->targets.size() - 1;
    if (a.pos.size() > nparams)
      type_error("macro '" + node->targets[0] + "' takes not more than " + std::to_string(nparams) +
                 " argument(s)");
    auto frame = std::make_shared<Scope>();
    frame->parent = defined_in.lock();
    for (std::size_t k = 0; k < nparams; ++k) {
      const std::string& p = node->targets[k + 1];
      const Value* kw = nullptr;
      for (const auto& [key, v] : a.kw)
        if (key == p) kw = &v;
      if (k < a.pos.size()) {
        if (kw) type_error("macro '" + node->targets[0] + "' got multiple values for '" + p + "'");
        frame->set(p, a.pos[k]);
      } else if (kw) {
        frame->set(p, *kw);
      } else if (node->defaults[k]) {
        frame->set(p, in.eval(*node->defaults[k], frame));
      } else {
        frame->set(p, Value::undefined(p));
      }
    }
    for (const auto& [key, v] : a.kw) {
      if (key == "caller") {  // from {% call %}
        frame->set(key, v);
        continue;
      }
      bool known = false;
      for (std::size_t k = 1; k < node->targets.size(); ++k)
        known = known || node->targets[k] == key;
      if (!known)
        type_error("macro '" + node->targets[0] + "' takes no keyword argument '" + key + "'");
    }
    if (++in.depth_ > in.options.max_depth)
      type_error("macro calls nested deeper than " + std::to_string(in.options.max_depth));
    std::string out;
    in.exec(node->body, frame, out);
    --in.depth_;
    return Value::str(std::move(out));
  });
}

Value Interp::call_block(const Node& n, const std::shared_ptr<Scope>& s) {
  const Expr& c = *n.expr;  // a kCall: args[0] the callee
  Value fn = eval(*c.args[0], s);
  Args a;
  for (std::size_t k = 1; k < c.args.size(); ++k) a.pos.push_back(eval(*c.args[k], s));
  for (const auto& [key, x] : c.kwargs) a.kw.emplace_back(key, eval(*x, s));
  const Node* node = &n;
  std::weak_ptr<Scope> scope = s;
  a.kw.emplace_back("caller", Value::callable([node, scope](Interp& in, Args& ca) -> Value {
                      auto frame = std::make_shared<Scope>();
                      frame->parent = scope.lock();
                      for (std::size_t k = 0; k < node->targets.size(); ++k)
                        frame->set(node->targets[k], k < ca.pos.size()
                                                         ? ca.pos[k]
                                                         : Value::undefined(node->targets[k]));
                      std::string out;
                      in.exec(node->body, frame, out);
                      return Value::str(std::move(out));
                    }));
  return call(fn, a);
}

}  // namespace strata::jinja::detail
