#include "chat/jinja_ast.h"

#include <algorithm>

namespace mnemo::jinja {

namespace {

uint32_t height_of(const ExprPtr& expr) { return expr ? expr->height : 0; }
uint32_t height_of(const CallArgs& args) {
  uint32_t tallest = 0;
  for (const auto& arg : args.positional) tallest = std::max(tallest, height_of(arg));
  for (const auto& arg : args.keyword) tallest = std::max(tallest, height_of(arg.second));
  return tallest;
}

// The tallest child of each kind of expression.
struct ChildHeight {
  uint32_t operator()(const LiteralExpr&) const { return 0; }
  uint32_t operator()(const VariableExpr&) const { return 0; }
  uint32_t operator()(const ListExpr& e) const {
    uint32_t tallest = 0;
    for (const auto& item : e.items) tallest = std::max(tallest, height_of(item));
    return tallest;
  }
  uint32_t operator()(const DictExpr& e) const {
    uint32_t tallest = 0;
    for (const auto& [key, value] : e.entries) tallest = std::max({tallest, height_of(key), height_of(value)});
    return tallest;
  }
  uint32_t operator()(const AttributeExpr& e) const { return height_of(e.object); }
  uint32_t operator()(const ItemExpr& e) const { return std::max(height_of(e.object), height_of(e.index)); }
  uint32_t operator()(const SliceExpr& e) const {
    return std::max({height_of(e.object), height_of(e.start), height_of(e.stop), height_of(e.step)});
  }
  uint32_t operator()(const UnaryExpr& e) const { return height_of(e.operand); }
  uint32_t operator()(const BinaryExpr& e) const { return std::max(height_of(e.lhs), height_of(e.rhs)); }
  uint32_t operator()(const CompareExpr& e) const {
    uint32_t tallest = height_of(e.first);
    for (const auto& [op, operand] : e.rest) tallest = std::max(tallest, height_of(operand));
    return tallest;
  }
  uint32_t operator()(const ConditionalExpr& e) const {
    return std::max({height_of(e.condition), height_of(e.then_value), height_of(e.else_value)});
  }
  uint32_t operator()(const FilterExpr& e) const { return std::max(height_of(e.subject), height_of(e.args)); }
  uint32_t operator()(const TestExpr& e) const { return std::max(height_of(e.subject), height_of(e.args)); }
  uint32_t operator()(const CallExpr& e) const { return std::max(height_of(e.callee), height_of(e.args)); }
};

}  // namespace

uint32_t tallest_child(const ExprNode& node) { return std::visit(ChildHeight{}, node); }

}  // namespace mnemo::jinja
