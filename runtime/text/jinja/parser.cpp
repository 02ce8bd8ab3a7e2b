// Jinja2's grammar (jinja2/parser.py), restricted to what chat templates use. Precedence,
// lowest first: `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary - +, then primary with postfix `.attr`, `[...]`, `(...)`, and filters `|f` / tests `is t`
// binding tighter than everything but postfix.
#include <charconv>
#include <cstdlib>
#include <set>
#include <unordered_set>

#include "runtime/text/jinja/ast.h"
#include "runtime/text/jinja/jinja.h"
#include "runtime/text/jinja/lexer.h"

namespace strata::jinja::detail {

namespace {

using T = Token::Type;

Value integer_literal(const std::string& digits, int line) {
  std::int64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size())
    throw TemplateError(line, "integer literal out of range: " + digits.substr(0, 40));
  return Value::integer(v);
}

ExprPtr make(Expr::Kind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::unique_ptr<Program> run() {
    auto p = std::make_unique<Program>();
    std::string end;
    p->body = body({}, &end);
    for (const auto& [name, line] : called_)
      if (!macros_.count(name) && !is_global_function(name) && name != "caller")
        throw TemplateError(line, "unknown function '" + name + "()'");
    return p;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().type == T::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const { throw TemplateError(cur().line, what); }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::kEof:
        return "end of template";
      case T::kBlockEnd:
        return "'%}'";
      case T::kVarEnd:
        return "'}}'";
      case T::kString:
        return "string literal";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != T::kName) fail("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != T::kBlockEnd) fail("expected '%}', got " + describe(cur()));
    ++i_;
  }

  // Statements until one of `ends` ({% name %}); *end gets which (the tag is consumed up to
  // its name).
  Body body(const std::set<std::string>& ends, std::string* end) {
    Body out;
    for (;;) {
      const Token& t = cur();
      if (t.type == T::kEof) {
        if (!ends.empty())
          fail("unexpected end of template: expected '{% " + *ends.begin() + " %}'");
        return out;
      }
      if (t.type == T::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = t.text;
        out.push_back(std::move(n));
        ++i_;
      } else if (t.type == T::kVarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        n->expr = tuple_expr();
        if (cur().type != T::kVarEnd) fail("expected '}}', got " + describe(cur()));
        ++i_;
        out.push_back(std::move(n));
      } else if (t.type == T::kBlockBegin) {
        ++i_;
        if (cur().type != T::kName) fail("expected a tag name, got " + describe(cur()));
        const std::string tag = cur().text;
        if (ends.count(tag)) {
          ++i_;
          *end = tag;
          return out;
        }
        out.push_back(statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  std::unique_ptr<Node> statement() {
    Nest guard(*this);
    const int line = cur().line;
    const std::string tag = next().text;
    auto n = std::make_unique<Node>();
    n->line = line;
    std::string end;
    if (tag == "if") {
      n->kind = Node::Kind::kIf;
      ExprPtr cond = expr();
      expect_block_end();
      for (;;) {
        Body b = body({"elif", "else", "endif"}, &end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "endif") break;
        if (end == "elif") {
          cond = expr();
        } else {
          cond = nullptr;
          expect_block_end();
          n->branches.emplace_back(nullptr, body({"endif"}, &end));
          break;
        }
        expect_block_end();
      }
    } else if (tag == "for") {
      n->kind = Node::Kind::kFor;
      do {
        n->targets.push_back(expect_name());
      } while (skip_op(","));
      if (!skip_name("in")) fail("expected 'in' in a for loop, got " + describe(cur()));
      n->expr = tuple_expr(/*with_condexpr=*/false);
      if (skip_name("if")) n->filter = expr();
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      ++loops_;
      n->body = body({"else", "endfor"}, &end);
      --loops_;
      if (end == "else") {
        expect_block_end();
        n->else_body = body({"endfor"}, &end);
      }
    } else if (tag == "set") {
      n->targets.push_back(expect_name());
      if (skip_op(".")) {
        n->attr = expect_name();
      } else {
        while (skip_op(",")) n->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        n->kind = Node::Kind::kSet;
        n->expr = tuple_expr();
      } else {
        if (!n->attr.empty() || n->targets.size() != 1) fail("expected '='");
        if (is_op("|")) fail("filtered set blocks are not supported");
        n->kind = Node::Kind::kSetBlock;
        expect_block_end();
        n->body = body({"endset"}, &end);
      }
    } else if (tag == "macro") {
      n->kind = Node::Kind::kMacro;
      n->targets.push_back(expect_name());
      macros_.insert(n->targets[0]);
      expect_op("(");
      while (!is_op(")")) {
        if (n->targets.size() > 1) expect_op(",");
        n->targets.push_back(expect_name());
        n->defaults.push_back(skip_op("=") ? expr() : nullptr);
      }
      ++i_;
      expect_block_end();
      const int saved = loops_;
      loops_ = 0;
      n->body = body({"endmacro"}, &end);
      loops_ = saved;
      if (cur().type == T::kName && cur().text == n->targets[0]) ++i_;
    } else if (tag == "call") {
      n->kind = Node::Kind::kCallBlock;
      if (skip_op("(")) {
        while (!skip_op(")")) {
          if (!n->targets.empty()) expect_op(",");
          n->targets.push_back(expect_name());
          if (is_op("=")) fail("default values of caller parameters are not supported");
        }
      }
      n->expr = expr();
      if (n->expr->kind != Expr::Kind::kCall)
        throw TemplateError(line, "'{% call %}' needs a call");
      expect_block_end();
      const int saved = loops_;
      loops_ = 0;
      n->body = body({"endcall"}, &end);
      loops_ = saved;
    } else if (tag == "break" || tag == "continue") {
      if (loops_ == 0) throw TemplateError(line, "'" + tag + "' outside a for loop");
      n->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end();
      return n;
    } else if (tag == "generation") {  // HF's AssistantTracker: renders its body
      n->kind = Node::Kind::kBlock;
      expect_block_end();
      n->body = body({"endgeneration"}, &end);
    } else {
      throw TemplateError(line, "unsupported tag '{% " + tag + " %}'");
    }
    expect_block_end();
    return n;
  }

  // ---- expressions ----
  struct Nest {  // bounds the recursion (deeply nested input must not overflow the stack)
    explicit Nest(Parser& p) : p(p) {
      if (++p.depth_ > 200) p.fail("expression nested too deeply");
    }
    ~Nest() { --p.depth_; }
    Parser& p;
  };
  ExprPtr tuple_expr(bool with_condexpr = true) {
    const int line = cur().line;
    ExprPtr first = with_condexpr ? expr() : or_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::kTuple, line);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == T::kBlockEnd || cur().type == T::kVarEnd) break;
      t->args.push_back(with_condexpr ? expr() : or_expr());
    }
    return t;
  }

  ExprPtr expr() {
    Nest guard(*this);
    ExprPtr e = or_expr();
    while (is_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::kCond, line);
      ExprPtr test = or_expr();
      ExprPtr other = skip_name("else") ? expr() : nullptr;
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }
  ExprPtr binary_chain(Expr::Kind k, const char* word, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    while (is_name(word)) {
      auto n = make(k, next().line);
      n->args.push_back(std::move(e));
      n->args.push_back((this->*sub)());
      e = std::move(n);
    }
    return e;
  }
  ExprPtr or_expr() { return binary_chain(Expr::Kind::kOr, "or", &Parser::and_expr); }
  ExprPtr and_expr() { return binary_chain(Expr::Kind::kAnd, "and", &Parser::not_expr); }
  ExprPtr not_expr() {
    if (is_name("not")) {
      Nest guard(*this);
      auto n = make(Expr::Kind::kNot, next().line);
      n->args.push_back(not_expr());
      return n;
    }
    return compare();
  }
  ExprPtr compare() {
    const int line = cur().line;
    ExprPtr e = math1();
    auto c = make(Expr::Kind::kCompare, line);
    for (;;) {
      std::string op;
      if (cur().type == T::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      c->ops.push_back(op);
      c->args.push_back(math1());
    }
    if (c->ops.empty()) return e;
    c->args.insert(c->args.begin(), std::move(e));
    return c;
  }
  ExprPtr binary_ops(std::initializer_list<const char*> ops, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    for (;;) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (is_op(op)) hit = op;
      if (!hit) return e;
      auto n = make(Expr::Kind::kBinary, next().line);
      n->name = hit;
      n->args.push_back(std::move(e));
      n->args.push_back((this->*sub)());
      e = std::move(n);
    }
  }
  ExprPtr math1() { return binary_ops({"+", "-"}, &Parser::concat); }
  ExprPtr concat() {
    const int line = cur().line;
    ExprPtr e = math2();
    if (!is_op("~")) return e;
    auto n = make(Expr::Kind::kConcat, line);
    n->args.push_back(std::move(e));
    while (skip_op("~")) n->args.push_back(math2());
    return n;
  }
  ExprPtr math2() { return binary_ops({"*", "/", "//", "%"}, &Parser::pow); }
  ExprPtr pow() { return binary_ops({"**"}, &Parser::unary_filtered); }
  ExprPtr unary_filtered() { return unary(true); }
  ExprPtr unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      Nest guard(*this);
      auto n = make(is_op("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, cur().line);
      ++i_;
      n->args.push_back(unary(false));
      e = std::move(n);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }

  ExprPtr primary() {
    const Token& t = cur();
    const int line = t.line;
    if (t.type == T::kName) {
      ++i_;
      if (t.text == "true" || t.text == "True") return constant(Value::boolean(true), line);
      if (t.text == "false" || t.text == "False") return constant(Value::boolean(false), line);
      if (t.text == "none" || t.text == "None") return constant(Value::none(), line);
      auto n = make(Expr::Kind::kName, line);
      n->name = t.text;
      return n;
    }
    if (t.type == T::kString) {
      std::string s;
      while (cur().type == T::kString) s += next().text;  // adjacent literals concatenate
      return constant(Value::str(std::move(s)), line);
    }
    if (t.type == T::kInt) {
      ++i_;
      return constant(integer_literal(t.text, line), line);
    }
    if (t.type == T::kFloat) {
      ++i_;
      const double d = std::strtod(t.text.c_str(), nullptr);  // overflow: inf, as Python
      return constant(Value::real(d), line);
    }
    if (skip_op("(")) {
      if (skip_op(")")) return make(Expr::Kind::kTuple, line);
      ExprPtr e = expr();
      if (is_op(",")) {
        auto tup = make(Expr::Kind::kTuple, line);
        tup->args.push_back(std::move(e));
        while (skip_op(",") && !is_op(")")) tup->args.push_back(expr());
        e = std::move(tup);
      }
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto l = make(Expr::Kind::kList, line);
      while (!is_op("]")) {
        if (!l->args.empty()) expect_op(",");
        if (is_op("]")) break;
        l->args.push_back(expr());
      }
      ++i_;
      return l;
    }
    if (skip_op("{")) {
      auto d = make(Expr::Kind::kDict, line);
      while (!is_op("}")) {
        if (!d->args.empty()) expect_op(",");
        if (is_op("}")) break;
        d->args.push_back(expr());
        expect_op(":");
        d->args.push_back(expr());
      }
      ++i_;
      return d;
    }
    fail("unexpected " + describe(t));
  }
  ExprPtr constant(Value v, int line) {
    auto n = make(Expr::Kind::kConst, line);
    n->value = std::move(v);
    return n;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (skip_op(".")) {
        if (cur().type == T::kInt) {
          auto n = make(Expr::Kind::kItem, line);
          n->args.push_back(std::move(e));
          n->args.push_back(constant(integer_literal(next().text, line), line));
          e = std::move(n);
        } else {
          auto n = make(Expr::Kind::kAttr, line);
          n->name = expect_name();
          n->args.push_back(std::move(e));
          e = std::move(n);
        }
      } else if (skip_op("[")) {
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprPtr subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int colons = 0;
    for (;;) {
      if (is_op("]")) break;
      if (skip_op(":")) {
        if (++colons > 2) fail("too many ':' in a slice");
        continue;
      }
      if (parts[colons]) fail("expected ':' or ']', got " + describe(cur()));
      parts[colons] = expr();
      if (colons == 0 && is_op(",")) fail("subscripts with several values are not supported");
    }
    ++i_;
    auto n = make(colons ? Expr::Kind::kSlice : Expr::Kind::kItem, line);
    n->args.push_back(std::move(target));
    if (!colons) {
      if (!parts[0]) throw TemplateError(line, "empty subscript");
      n->args.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) n->args.push_back(std::move(p));
    }
    return n;
  }
  void call_args(Expr& n) {
    expect_op("(");
    const std::size_t own = n.args.size();  // args[0]: the callee or the filtered value
    while (!is_op(")")) {
      if (n.args.size() + n.kwargs.size() > own) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == T::kName && peek().type == T::kOp && peek().text == "=") {
        std::string key = next().text;
        ++i_;
        n.kwargs.emplace_back(std::move(key), expr());
      } else {
        if (!n.kwargs.empty()) fail("positional argument after keyword argument");
        n.args.push_back(expr());
      }
    }
    ++i_;
  }
  ExprPtr call(ExprPtr callee) {
    const int line = cur().line;
    if (callee->kind == Expr::Kind::kName) {
      called_.emplace_back(callee->name, line);
    } else if (callee->kind == Expr::Kind::kAttr) {
      if (!is_method(callee->name))
        throw TemplateError(line, "unsupported method '." + callee->name + "()'");
    } else {
      throw TemplateError(line, "only functions, macros and methods can be called");
    }
    auto n = make(Expr::Kind::kCall, line);
    n->args.push_back(std::move(callee));  // args[0] is the callee
    call_args(*n);
    return n;
  }
  ExprPtr filters(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (skip_op("|")) {
        auto n = make(Expr::Kind::kFilter, line);
        n->name = expect_name();
        if (!is_filter(n->name)) throw TemplateError(line, "unsupported filter '" + n->name + "'");
        n->args.push_back(std::move(e));
        if (is_op("(")) call_args(*n);
        e = std::move(n);
      } else if (skip_name("is")) {
        auto n = make(Expr::Kind::kTest, line);
        n->negate = skip_name("not");
        n->name = expect_name();
        if (!is_test(n->name)) throw TemplateError(line, "unsupported test '" + n->name + "'");
        n->args.push_back(std::move(e));
        const Token& t = cur();
        if (is_op("(")) {
          call_args(*n);
        } else if ((t.type == T::kName || t.type == T::kString || t.type == T::kInt ||
                    t.type == T::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("tests cannot be chained with 'is'");
          n->args.push_back(postfix(primary()));
        }
        e = std::move(n);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, int>> called_;
};

}  // namespace

std::unique_ptr<Program> parse_program(std::string_view source) {
  return Parser(lex(source)).run();
}

}  // namespace strata::jinja::detail
