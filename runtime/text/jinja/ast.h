// The parsed form of a template (parser.cpp builds it, interp.cpp walks it). Every node
// keeps its source line for error messages.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/text/jinja/value.h"

namespace strata::jinja::detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kConst,    // value
    kName,     // name
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d] (b, c, d may be null)
    kCall,     // a(args, kw)
    kFilter,   // a | name(args, kw)
    kTest,     // a is [not] name(args)
    kNeg,      // -a
    kPos,      // +a
    kNot,      // not a
    kAnd,      // a and b
    kOr,       // a or b
    kBinary,   // a op b: + - * / // % **
    kConcat,   // a ~ b ~ ...
    kCompare,  // a op b op c ... (ops)
    kCond,     // b if a else c
    kList,     // [a, ...]
    kTuple,    // (a, ...)
    kDict,     // {k: v, ...}
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name / attribute / filter / test / operator
  bool negate = false;
  std::vector<ExprPtr> args;  // operands, elements, call arguments
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,  // {% call(params) m(args) %}body{% endcall %}: m gets `caller` rendering body
    kBreak,
    kContinue,
    kBlock
  };
  Kind kind;
  int line = 0;
  std::string text;                  // kText
  std::vector<std::string> targets;  // kFor loop vars; kSet names; kMacro name + params;
                                     // kCallBlock: the caller's params
  std::string attr;                  // kSet: ns.attr target (targets[0] is the namespace)
  ExprPtr expr;                      // output / for iterable / set value
  ExprPtr filter;                    // kFor: `if` condition
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition, body) ... ; else: null
  Body body;                                       // kFor / kSetBlock / kMacro / kBlock
  Body else_body;                                  // kFor
  std::vector<ExprPtr> defaults;                   // kMacro: default per parameter (null: none)
};

struct Program {
  Body body;
};

// Lexes and parses; throws TemplateError.
std::unique_ptr<Program> parse_program(std::string_view source);

// The builtins the parser accepts (builtins.cpp).
bool is_filter(std::string_view name);
bool is_test(std::string_view name);
bool is_global_function(std::string_view name);
bool is_method(std::string_view name);

}  // namespace strata::jinja::detail
