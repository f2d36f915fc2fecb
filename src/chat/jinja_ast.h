// The parsed form of a Jinja template: expressions and statements, each with the position it
// came from so that render errors can point into the template.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "chat/jinja_lexer.h"
#include "chat/jinja_value.h"

namespace mnemo::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr { Value value; };
struct VariableExpr { std::string name; };
struct ListExpr { std::vector<ExprPtr> items; };  // list and tuple literals
struct DictExpr { std::vector<std::pair<ExprPtr, ExprPtr>> entries; };
struct AttributeExpr { ExprPtr object; std::string attribute; };  // a.b
struct ItemExpr { ExprPtr object; ExprPtr index; };                // a[b]
struct SliceExpr { ExprPtr object; ExprPtr start; ExprPtr stop; ExprPtr step; };  // a[b:c:d], parts may be null

enum class UnaryOp { kNot, kNegate, kPlus };
struct UnaryExpr { UnaryOp op; ExprPtr operand; };

enum class BinaryOp {
  kAdd, kSubtract, kMultiply, kDivide, kFloorDivide, kModulo, kPower, kConcat,  // arithmetic, ~
  kAnd, kOr,                                                                   // short-circuit
  kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual, kIn, kNotIn,  // comparisons
};
struct BinaryExpr { BinaryOp op; ExprPtr lhs; ExprPtr rhs; };
// Python's chained comparison: a < b < c means a < b and b < c.
struct CompareExpr { ExprPtr first; std::vector<std::pair<BinaryOp, ExprPtr>> rest; };
// `then_value if condition else else_value`; without else, an undefined value.
struct ConditionalExpr { ExprPtr condition; ExprPtr then_value; ExprPtr else_value; };
struct FilterExpr { ExprPtr subject; std::string filter; CallArgs args; };          // a | f(args)
struct TestExpr { ExprPtr subject; std::string test; bool negated; CallArgs args; };  // a is [not] t(args)
struct CallExpr { ExprPtr callee; CallArgs args; };                                 // f(args), a.m(args)

using ExprNode = std::variant<LiteralExpr, VariableExpr, ListExpr, DictExpr, AttributeExpr, ItemExpr, SliceExpr,
                              UnaryExpr, BinaryExpr, CompareExpr, ConditionalExpr, FilterExpr, TestExpr, CallExpr>;

struct Expr {
  ExprNode node;
  SourcePos pos;
  uint32_t height = 1;  // of this expression's tree; the parser bounds it (kMaxExprHeight)
};

// The height of the tallest direct child of a node (0 for leaves).
uint32_t tallest_child(const ExprNode& node);

struct Node;
using Body = std::vector<Node>;

struct TextNode { std::string text; };
struct OutputNode { ExprPtr value; };  // {{ value }}
struct IfBranch { ExprPtr condition; Body body; };
struct IfNode { std::vector<IfBranch> branches; Body else_body; };  // if / elif... / else
// {% for a, b in iterable if filter %} body {% else %} else_body {% endfor %}
struct ForNode {
  std::vector<std::string> targets;
  ExprPtr iterable;
  ExprPtr filter;  // may be null
  Body body;
  Body else_body;  // rendered when nothing was iterated
  bool uses_loop_variable = false;  // whether the body reads `loop` (else it is not built)
};
// {% set name = value %}, {% set name.attribute = value %} (namespaces), or the block form
// {% set name %}body{% endset %}, which captures the rendered body as a string.
struct SetNode {
  std::string name;
  std::string attribute;  // empty unless assigning a namespace attribute
  ExprPtr value;          // null for the block form
  Body body;
};
struct MacroParam { std::string name; ExprPtr default_value; };  // default may be null
struct MacroNode { std::string name; std::vector<MacroParam> params; Body body; };
struct LoopControlNode { bool is_break; };  // {% break %} / {% continue %}

struct Node {
  std::variant<TextNode, OutputNode, IfNode, ForNode, SetNode, MacroNode, LoopControlNode> node;
  SourcePos pos;
};

}  // namespace mnemo::jinja
