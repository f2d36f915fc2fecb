#include "chat/jinja_eval.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "chat/jinja_depth.h"
#include "chat/jinja_operators.h"

namespace mnemo::jinja {

namespace {

// Variables and macros visible at one level: the template, a loop, a macro call.
class Scope {
 public:
  explicit Scope(const Scope* parent) : parent_(parent) {}

  const Value* find(std::string_view name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent_) {
      const auto found = scope->variables_.find(name);
      if (found != scope->variables_.end()) return &found->second;
    }
    return nullptr;
  }

  const MacroNode* find_macro(std::string_view name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent_) {
      const auto found = scope->macros_.find(name);
      if (found != scope->macros_.end()) return found->second;
    }
    return nullptr;
  }

  void set(const std::string& name, Value value) { variables_.insert_or_assign(name, std::move(value)); }
  void define_macro(const MacroNode& macro) { macros_.insert_or_assign(macro.name, &macro); }

 private:
  const Scope* parent_;
  std::map<std::string, Value, std::less<>> variables_;
  std::map<std::string, const MacroNode*, std::less<>> macros_;
};

enum class Flow { kNormal, kBreak, kContinue };

template <class T>
Result<T> located(Result<T> result, SourcePos pos) {
  if (!result.ok()) return error_at(pos, result.error().message());
  return result;
}

Status located(Status status, SourcePos pos) {
  if (!status.ok()) return error_at(pos, status.error().message());
  return status;
}

// A short description of simple expressions for "undefined" errors: messages[0].role.
std::string describe(const Expr& expr) {
  if (const auto* variable = std::get_if<VariableExpr>(&expr.node)) return variable->name;
  if (const auto* literal = std::get_if<LiteralExpr>(&expr.node)) return repr(literal->value);
  if (const auto* attribute = std::get_if<AttributeExpr>(&expr.node)) {
    return describe(*attribute->object) + "." + attribute->attribute;
  }
  if (const auto* item = std::get_if<ItemExpr>(&expr.node)) {
    const auto* index = std::get_if<LiteralExpr>(&item->index->node);
    return describe(*item->object) + "[" + (index != nullptr ? repr(index->value) : "...") + "]";
  }
  return "value";
}

Value make_loop_object(const List& items, size_t index) {
  const auto count = static_cast<int64_t>(items.size());
  const auto i = static_cast<int64_t>(index);
  Dict loop = {
      {"index0", Value::from_int(i)},
      {"index", Value::from_int(i + 1)},
      {"revindex0", Value::from_int(count - i - 1)},
      {"revindex", Value::from_int(count - i)},
      {"first", Value::from_bool(index == 0)},
      {"last", Value::from_bool(index + 1 == items.size())},
      {"length", Value::from_int(count)},
      {"depth", Value::from_int(1)},
      {"depth0", Value::from_int(0)},
  };
  if (index > 0) loop.emplace_back("previtem", items[index - 1]);
  if (index + 1 < items.size()) loop.emplace_back("nextitem", items[index + 1]);
  return Value::from_distinct_keys(std::move(loop));
}

class Evaluator {
 public:
  explicit Evaluator(const Limits& limits) : limits_(limits), budget_(limits) {}

  Result<std::string> run(const Body& body, const Dict& globals) {
    Scope root(nullptr);
    for (const auto& [name, value] : globals) root.set(name, value);
    root_ = &root;
    std::string output;
    out_ = &output;
    MNEMO_RETURN_IF_ERROR(exec_body(body, root));
    return output;
  }

 private:
  Status enter(SourcePos pos) {
    if (depth_ > limits_.max_call_depth) {
      return error_at(pos, fmt::format("template recursion deeper than {} levels", limits_.max_call_depth));
    }
    return located(budget_.step(), pos);
  }

  Status write(std::string_view text, SourcePos pos) {
    if (out_->size() + text.size() > limits_.max_output_bytes) {
      return error_at(pos, fmt::format("template output over the limit of {} bytes", limits_.max_output_bytes));
    }
    MNEMO_RETURN_IF_ERROR(located(budget_.step(text.size() / 16), pos));
    out_->append(text);
    return ok_status();
  }

  // Renders `body` into a string instead of the output (macros, block set).
  Result<std::string> capture(const Body& body, Scope& scope) {
    std::string buffer;
    std::string* const outer = out_;
    out_ = &buffer;
    const Result<Flow> flow = exec_body(body, scope);
    out_ = outer;
    if (!flow.ok()) return flow.error();
    return buffer;
  }

  // ---- statements ----

  Result<Flow> exec_body(const Body& body, Scope& scope) {
    for (const Node& node : body) {
      MNEMO_ASSIGN_OR_RETURN(const Flow flow, exec(node, scope));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Result<Flow> exec(const Node& node, Scope& scope) {
    DepthScope depth(&depth_);
    MNEMO_RETURN_IF_ERROR(enter(node.pos));
    return std::visit([&](const auto& statement) { return exec_statement(statement, node.pos, scope); }, node.node);
  }

  Result<Flow> exec_statement(const TextNode& text, SourcePos pos, Scope&) {
    MNEMO_RETURN_IF_ERROR(write(text.text, pos));
    return Flow::kNormal;
  }

  Result<Flow> exec_statement(const OutputNode& output, SourcePos pos, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value value, eval(*output.value, scope));
    if (value.is_string()) {
      MNEMO_RETURN_IF_ERROR(write(value.string_value(), pos));
    } else {
      MNEMO_ASSIGN_OR_RETURN(const std::string text, located(str_within_budget(value, budget_), pos));
      MNEMO_RETURN_IF_ERROR(write(text, pos));
    }
    return Flow::kNormal;
  }

  Result<Flow> exec_statement(const IfNode& node, SourcePos, Scope& scope) {
    for (const IfBranch& branch : node.branches) {
      MNEMO_ASSIGN_OR_RETURN(const Value condition, eval(*branch.condition, scope));
      if (truthy(condition)) return exec_body(branch.body, scope);
    }
    return exec_body(node.else_body, scope);
  }

  Status bind_targets(const std::vector<std::string>& targets, const Value& item, SourcePos pos, Scope& scope) {
    if (targets.size() == 1) {
      scope.set(targets[0], item);
      return ok_status();
    }
    if (!item.is_list() || item.list_value().size() != targets.size()) {
      return error_at(pos, fmt::format("cannot unpack '{}' into {} loop variables", type_name(item), targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], item.list_value()[i]);
    return ok_status();
  }

  Result<Flow> exec_statement(const ForNode& node, SourcePos pos, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value iterable, eval(*node.iterable, scope));
    MNEMO_ASSIGN_OR_RETURN(List items, located(iterate(iterable, budget_), node.iterable->pos));
    Scope loop_scope(&scope);
    if (node.filter) {
      List kept;
      for (Value& item : items) {
        MNEMO_RETURN_IF_ERROR(bind_targets(node.targets, item, pos, loop_scope));
        MNEMO_ASSIGN_OR_RETURN(const Value keep, eval(*node.filter, loop_scope));
        if (truthy(keep)) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(node.else_body, scope);
    for (size_t i = 0; i < items.size(); ++i) {
      MNEMO_RETURN_IF_ERROR(located(budget_.step(kStepsPerIteration), pos));
      MNEMO_RETURN_IF_ERROR(bind_targets(node.targets, items[i], pos, loop_scope));
      if (node.uses_loop_variable) loop_scope.set("loop", make_loop_object(items, i));
      MNEMO_ASSIGN_OR_RETURN(const Flow flow, exec_body(node.body, loop_scope));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Result<Flow> exec_statement(const SetNode& node, SourcePos pos, Scope& scope) {
    Value value;
    if (node.value) {
      MNEMO_ASSIGN_OR_RETURN(value, eval(*node.value, scope));
    } else {
      MNEMO_ASSIGN_OR_RETURN(std::string text, capture(node.body, scope));
      MNEMO_RETURN_IF_ERROR(located(budget_.allocate(text.size()), pos));
      value = Value::from_string(std::move(text));
    }
    if (node.attribute.empty()) {
      scope.set(node.name, std::move(value));
      return Flow::kNormal;
    }
    const Value* target = scope.find(node.name);
    if (target == nullptr || !target->is_namespace()) {
      return error_at(pos, fmt::format("cannot set '{}.{}': '{}' is not a namespace", node.name, node.attribute, node.name));
    }
    if (value.holds_namespace()) return error_at(pos, "a namespace cannot hold another namespace");
    if (value.nesting() >= limits_.max_nesting) return error_at(pos, "value nests too deeply");
    Dict& attributes = target->namespace_attributes();
    MNEMO_RETURN_IF_ERROR(located(budget_.step(attributes.size()), pos));
    for (auto& [name, attribute] : attributes) {
      if (name == node.attribute) {
        attribute = std::move(value);
        return Flow::kNormal;
      }
    }
    attributes.emplace_back(node.attribute, std::move(value));
    return Flow::kNormal;
  }

  Result<Flow> exec_statement(const MacroNode& node, SourcePos, Scope& scope) {
    scope.define_macro(node);
    return Flow::kNormal;
  }

  Result<Flow> exec_statement(const LoopControlNode& node, SourcePos, Scope&) {
    return node.is_break ? Flow::kBreak : Flow::kContinue;
  }

  // ---- expressions ----

  Result<Value> eval(const Expr& expr, Scope& scope) {
    DepthScope depth(&depth_);
    MNEMO_RETURN_IF_ERROR(enter(expr.pos));
    MNEMO_ASSIGN_OR_RETURN(Value value, std::visit([&](const auto& node) { return eval_node(node, expr, scope); }, expr.node));
    if (value.nesting() > limits_.max_nesting) {
      return error_at(expr.pos, fmt::format("value nests more than {} levels deep", limits_.max_nesting));
    }
    return value;
  }

  Result<Value> eval_node(const LiteralExpr& node, const Expr&, Scope&) { return node.value; }

  Result<Value> eval_node(const VariableExpr& node, const Expr&, Scope& scope) {
    const Value* value = scope.find(node.name);
    return value != nullptr ? *value : Value();
  }

  Result<Value> eval_node(const ListExpr& node, const Expr& expr, Scope& scope) {
    MNEMO_RETURN_IF_ERROR(located(budget_.allocate_items(node.items.size()), expr.pos));
    List items;
    items.reserve(node.items.size());
    for (const ExprPtr& item : node.items) {
      MNEMO_ASSIGN_OR_RETURN(Value value, eval(*item, scope));
      items.push_back(std::move(value));
    }
    return Value::from_list(std::move(items));
  }

  Result<Value> eval_node(const DictExpr& node, const Expr&, Scope& scope) {
    Dict entries;
    for (const auto& [key_expr, value_expr] : node.entries) {
      MNEMO_ASSIGN_OR_RETURN(const Value key, eval(*key_expr, scope));
      // Keys are strings; an integer key is kept as its digits (d[512] finds it, and tojson
      // writes it as "512", as Python does).
      if (!key.is_string() && key.kind() != Kind::kInt) {
        return error_at(key_expr->pos, fmt::format("dict keys must be strings or integers, not '{}'", type_name(key)));
      }
      MNEMO_ASSIGN_OR_RETURN(Value value, eval(*value_expr, scope));
      entries.emplace_back(to_str(key), std::move(value));
    }
    return Value::from_dict(std::move(entries));
  }

  // The object of an attribute or item access; reading from undefined is the error Jinja gives.
  Result<Value> eval_container(const Expr& object, std::string_view member, const Expr& expr, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(Value value, eval(object, scope));
    if (value.is_undefined()) {
      return error_at(expr.pos, fmt::format("cannot read {} of '{}': it is undefined", member, describe(object)));
    }
    if (value.is_dict() || value.is_namespace()) {
      MNEMO_RETURN_IF_ERROR(located(budget_.step(value.dict_value().size() / 16), expr.pos));
    }
    return value;
  }

  Result<Value> eval_node(const AttributeExpr& node, const Expr& expr, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value object, eval_container(*node.object, "'" + node.attribute + "'", expr, scope));
    return get_attribute(object, node.attribute);
  }

  Result<Value> eval_node(const ItemExpr& node, const Expr& expr, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value object, eval_container(*node.object, "an item", expr, scope));
    MNEMO_ASSIGN_OR_RETURN(const Value index, eval(*node.index, scope));
    if (object.is_string()) MNEMO_RETURN_IF_ERROR(located(budget_.step(object.weight()), expr.pos));
    return get_item(object, index);
  }

  Result<Value> eval_optional(const ExprPtr& expr, Scope& scope) {
    if (!expr) return Value();
    return eval(*expr, scope);
  }

  Result<Value> eval_node(const SliceExpr& node, const Expr& expr, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value object, eval_container(*node.object, "a slice", expr, scope));
    MNEMO_ASSIGN_OR_RETURN(const Value start, eval_optional(node.start, scope));
    MNEMO_ASSIGN_OR_RETURN(const Value stop, eval_optional(node.stop, scope));
    MNEMO_ASSIGN_OR_RETURN(const Value step, eval_optional(node.step, scope));
    return located(slice(object, start, stop, step, budget_), expr.pos);
  }

  Result<Value> eval_node(const UnaryExpr& node, const Expr& expr, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value operand, eval(*node.operand, scope));
    if (node.op == UnaryOp::kNot) return Value::from_bool(!truthy(operand));
    if (!operand.is_number()) {
      return error_at(expr.pos, fmt::format("bad operand type for unary {}: '{}'", node.op == UnaryOp::kNegate ? '-' : '+',
                                            type_name(operand)));
    }
    if (node.op == UnaryOp::kPlus) return operand.is_integer() ? Value::from_int(operand.int_value()) : operand;
    if (!operand.is_integer()) return Value::from_float(-operand.number_value());
    if (operand.int_value() == std::numeric_limits<int64_t>::min()) return error_at(expr.pos, "integer overflow in unary -");
    return Value::from_int(-operand.int_value());
  }

  Result<Value> eval_node(const BinaryExpr& node, const Expr& expr, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(Value lhs, eval(*node.lhs, scope));
    // Python's and/or: the deciding operand itself, not a bool.
    if (node.op == BinaryOp::kAnd) return truthy(lhs) ? eval(*node.rhs, scope) : lhs;
    if (node.op == BinaryOp::kOr) return truthy(lhs) ? lhs : eval(*node.rhs, scope);
    MNEMO_ASSIGN_OR_RETURN(const Value rhs, eval(*node.rhs, scope));
    return apply_binary(node.op, lhs, rhs, expr.pos);
  }

  Result<Value> apply_binary(BinaryOp op, const Value& lhs, const Value& rhs, SourcePos pos) {
    // Comparisons and searches walk their operands: charge for the walk.
    if (op == BinaryOp::kIn || op == BinaryOp::kNotIn) {
      MNEMO_RETURN_IF_ERROR(located(budget_.step(rhs.weight()), pos));
    } else if (op != BinaryOp::kConcat) {
      MNEMO_RETURN_IF_ERROR(located(budget_.step(std::min(lhs.weight(), rhs.weight())), pos));
    } else {
      MNEMO_RETURN_IF_ERROR(located(budget_.allocate_items(std::max(lhs.weight(), rhs.weight())), pos));
    }
    return located(binary_operation(op, lhs, rhs, budget_), pos);
  }

  Result<Value> eval_node(const CompareExpr& node, const Expr&, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(Value lhs, eval(*node.first, scope));
    for (const auto& [op, operand] : node.rest) {
      MNEMO_ASSIGN_OR_RETURN(Value rhs, eval(*operand, scope));
      MNEMO_ASSIGN_OR_RETURN(const Value result, apply_binary(op, lhs, rhs, operand->pos));
      if (!truthy(result)) return Value::from_bool(false);
      lhs = std::move(rhs);
    }
    return Value::from_bool(true);
  }

  Result<Value> eval_node(const ConditionalExpr& node, const Expr&, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value condition, eval(*node.condition, scope));
    if (truthy(condition)) return eval(*node.then_value, scope);
    return eval_optional(node.else_value, scope);
  }

  // Builtins may print, compare or search any argument: a container is charged by its weight
  // up front, so that no builtin walks a huge value for free.
  Status charge_walk(const Value& value, SourcePos pos) {
    if (!value.is_list() && !value.is_dict() && !value.is_namespace()) return ok_status();
    return located(budget_.allocate_items(value.weight()), pos);
  }

  Result<Arguments> eval_args(const CallArgs& args, Scope& scope) {
    Arguments values;
    for (const ExprPtr& arg : args.positional) {
      MNEMO_ASSIGN_OR_RETURN(Value value, eval(*arg, scope));
      MNEMO_RETURN_IF_ERROR(charge_walk(value, arg->pos));
      values.positional.push_back(std::move(value));
    }
    for (const auto& [name, arg] : args.keyword) {
      MNEMO_ASSIGN_OR_RETURN(Value value, eval(*arg, scope));
      MNEMO_RETURN_IF_ERROR(charge_walk(value, arg->pos));
      values.keyword.emplace_back(name, std::move(value));
    }
    return values;
  }

  Result<Value> eval_node(const FilterExpr& node, const Expr& expr, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Value subject, eval(*node.subject, scope));
    MNEMO_ASSIGN_OR_RETURN(const Arguments args, eval_args(node.args, scope));
    // Filters that print or compare their subject (trim, tojson, unique, ...) walk all of it.
    if (filter_walks_subject(node.filter)) MNEMO_RETURN_IF_ERROR(charge_walk(subject, expr.pos));
    return located(apply_filter(node.filter, subject, args, budget_), expr.pos);
  }

  Result<Value> eval_node(const TestExpr& node, const Expr& expr, Scope& scope) {
    bool passed = false;
    const auto* variable = std::get_if<VariableExpr>(&node.subject->node);
    if (variable != nullptr && (node.test == "defined" || node.test == "undefined")) {
      // Macros and global functions are defined too (`raise_exception is defined`).
      const bool defined = scope.find(variable->name) != nullptr || scope.find_macro(variable->name) != nullptr ||
                           is_global_function(variable->name);
      passed = node.test == "defined" ? defined : !defined;
    } else {
      MNEMO_ASSIGN_OR_RETURN(const Value subject, eval(*node.subject, scope));
      MNEMO_ASSIGN_OR_RETURN(const Arguments args, eval_args(node.args, scope));
      MNEMO_ASSIGN_OR_RETURN(passed, located(apply_test(node.test, subject, args, budget_), expr.pos));
    }
    return Value::from_bool(node.negated ? !passed : passed);
  }

  Result<Value> eval_node(const CallExpr& node, const Expr& expr, Scope& scope) {
    if (const auto* method = std::get_if<AttributeExpr>(&node.callee->node)) {
      MNEMO_ASSIGN_OR_RETURN(const Value object, eval_container(*method->object, "method '" + method->attribute + "'", expr, scope));
      MNEMO_ASSIGN_OR_RETURN(const Arguments args, eval_args(node.args, scope));
      return located(call_method(object, method->attribute, args, budget_), expr.pos);
    }
    const auto* function = std::get_if<VariableExpr>(&node.callee->node);
    if (function == nullptr) return error_at(expr.pos, "this expression cannot be called");
    if (const MacroNode* macro = scope.find_macro(function->name)) return call_macro(*macro, node.args, expr.pos, scope);
    MNEMO_ASSIGN_OR_RETURN(const Arguments args, eval_args(node.args, scope));
    std::optional<Result<Value>> result = call_global(function->name, args, budget_);
    if (!result) return error_at(expr.pos, fmt::format("'{}' is not a function or macro", function->name));
    return located(std::move(*result), expr.pos);
  }

  Result<Value> call_macro(const MacroNode& macro, const CallArgs& call_args, SourcePos pos, Scope& scope) {
    MNEMO_ASSIGN_OR_RETURN(const Arguments args, eval_args(call_args, scope));
    if (args.positional.size() > macro.params.size()) {
      return error_at(pos, fmt::format("macro '{}' takes {} arguments, {} given", macro.name, macro.params.size(),
                                       args.positional.size()));
    }
    for (const auto& keyword : args.keyword) {
      const std::string& name = keyword.first;
      const bool known = std::any_of(macro.params.begin(), macro.params.end(), [&](const MacroParam& p) { return p.name == name; });
      if (!known) return error_at(pos, fmt::format("macro '{}' has no parameter '{}'", macro.name, name));
    }
    // Macros see the template's variables and their own parameters, not the caller's locals.
    Scope macro_scope(root_);
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const MacroParam& param = macro.params[i];
      Value value = args.get(i, param.name);
      if (value.is_undefined() && param.default_value) {
        MNEMO_ASSIGN_OR_RETURN(value, eval(*param.default_value, macro_scope));
      }
      macro_scope.set(param.name, std::move(value));
    }
    MNEMO_ASSIGN_OR_RETURN(std::string text, capture(macro.body, macro_scope));
    MNEMO_RETURN_IF_ERROR(located(budget_.allocate(text.size()), pos));
    return Value::from_string(std::move(text));
  }

  // An iteration costs several node evaluations' worth of time (binding, the loop object).
  static constexpr uint64_t kStepsPerIteration = 4;

  const Limits& limits_;
  Budget budget_;
  Scope* root_ = nullptr;
  std::string* out_ = nullptr;
  int depth_ = 0;
};

}  // namespace

Result<std::string> render_template(const Body& body, const Dict& globals, const Limits& limits) {
  return Evaluator(limits).run(body, globals);
}

}  // namespace mnemo::jinja
