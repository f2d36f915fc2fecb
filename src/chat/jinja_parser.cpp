#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>

#include "chat/jinja_depth.h"
#include "chat/jinja_builtins.h"

namespace mnemo::jinja {

namespace {

// Tags that close or continue a block: met where they do not belong, they are errors.
constexpr std::string_view kInnerTags[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration"};
// Jinja tags outside the subset: named so that the error says "not supported", not "unknown".
constexpr std::string_view kUnsupportedTags[] = {"call", "filter", "raw", "include", "import", "from",
                                                 "extends", "block", "with", "autoescape", "do"};

template <class Range>
bool contains(const Range& range, std::string_view word) {
  return std::find(std::begin(range), std::end(range), word) != std::end(range);
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEnd: return "end of template";
    case TokenKind::kText: return "text";
    case TokenKind::kString: return fmt::format("string '{}'", token.text);
    default: return fmt::format("'{}'", token.text);
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<Body> parse() {
    Body body;
    std::string end_tag;
    MNEMO_RETURN_IF_ERROR(parse_body(&body, {}, &end_tag, {}, ""));
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(index_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& token = peek();
    if (index_ + 1 < tokens_.size()) ++index_;
    return token;
  }
  bool at_punct(std::string_view punct, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kPunct && peek(ahead).text == punct;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool skip_punct(std::string_view punct) {
    if (!at_punct(punct)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  Error unexpected(std::string_view expected) const {
    return error_at(peek().pos, fmt::format("expected {}, found {}", expected, describe(peek())));
  }
  Status expect_punct(std::string_view punct) {
    if (!skip_punct(punct)) return unexpected(fmt::format("'{}'", punct));
    return ok_status();
  }
  Result<std::string> expect_name(std::string_view what) {
    if (peek().kind != TokenKind::kName) return unexpected(what);
    return next().text;
  }
  Status expect_statement_close(std::string_view tag) {
    if (peek().kind != TokenKind::kStatementClose) return unexpected(fmt::format("'%}}' to end '{}'", tag));
    next();
    return ok_status();
  }
  Error too_deep(SourcePos pos) const {
    return error_at(pos, fmt::format("template nests more than {} levels deep", kMaxParseDepth));
  }

  template <class Node>
  Result<ExprPtr> make(Node node, SourcePos pos) {
    auto expr = std::make_unique<Expr>();
    expr->node = std::move(node);
    expr->height = 1 + tallest_child(expr->node);
    expr->pos = pos;
    if (expr->height > kMaxExprHeight) {
      return error_at(pos, fmt::format("expression is more than {} operations deep", kMaxExprHeight));
    }
    return expr;
  }

  // ---- statements ----

  // Parses nodes into `body` until one of `end_tags` opens a statement; consumes "{% tag" and
  // stores the tag in `end_tag`. `opened_at`/`opened_by` name the enclosing block for errors.
  Status parse_body(Body* body, std::initializer_list<std::string_view> end_tags, std::string* end_tag,
                    SourcePos opened_at, std::string_view opened_by) {
    DepthScope depth(&depth_);
    if (depth_ > kMaxParseDepth) return too_deep(opened_at);
    while (true) {
      const Token& token = peek();
      if (token.kind == TokenKind::kEnd) {
        if (end_tags.size() == 0) return ok_status();
        return error_at(opened_at, fmt::format("unclosed '{}': expected '{}' before the end of the template",
                                               opened_by, *(end_tags.end() - 1)));
      }
      if (token.kind == TokenKind::kText) {
        body->push_back(Node{TextNode{token.text}, token.pos});
        next();
      } else if (token.kind == TokenKind::kOutputOpen) {
        next();
        MNEMO_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        if (peek().kind != TokenKind::kOutputClose) return unexpected("'}}'");
        next();
        body->push_back(Node{OutputNode{std::move(value)}, token.pos});
      } else if (token.kind == TokenKind::kStatementOpen) {
        const Token& tag = peek(1);
        if (tag.kind != TokenKind::kName) return error_at(tag.pos, fmt::format("expected a tag name, found {}", describe(tag)));
        if (contains(end_tags, tag.text)) {
          next();
          *end_tag = next().text;
          return ok_status();
        }
        if (contains(kInnerTags, tag.text)) {
          if (end_tags.size() == 0) return error_at(tag.pos, fmt::format("unexpected '{}' outside any block", tag.text));
          return error_at(tag.pos, fmt::format("unexpected '{}' in '{}' opened at line {}, column {}", tag.text,
                                               opened_by, opened_at.line, opened_at.column));
        }
        next();
        MNEMO_RETURN_IF_ERROR(parse_statement(body));
      } else {
        return unexpected("text or a tag");
      }
    }
  }

  Status parse_statement(Body* body) {
    const Token& tag = next();
    const std::string& keyword = tag.text;
    if (keyword == "if") return parse_if(body, tag.pos);
    if (keyword == "for") return parse_for(body, tag.pos);
    if (keyword == "set") return parse_set(body, tag.pos);
    if (keyword == "macro") return parse_macro(body, tag.pos);
    if (keyword == "break" || keyword == "continue") {
      if (loop_depth_ == 0) return error_at(tag.pos, fmt::format("'{}' outside a loop", keyword));
      MNEMO_RETURN_IF_ERROR(expect_statement_close(keyword));
      body->push_back(Node{LoopControlNode{keyword == "break"}, tag.pos});
      return ok_status();
    }
    if (keyword == "generation") {
      // HF's AssistantTracker marks assistant text for training masks; rendering ignores it.
      MNEMO_RETURN_IF_ERROR(expect_statement_close(keyword));
      std::string end_tag;
      MNEMO_RETURN_IF_ERROR(parse_body(body, {"endgeneration"}, &end_tag, tag.pos, keyword));
      return expect_statement_close("endgeneration");
    }
    if (contains(kUnsupportedTags, keyword)) return error_at(tag.pos, fmt::format("tag '{}' is not supported", keyword));
    return error_at(tag.pos, fmt::format("unknown tag '{}'", keyword));
  }

  Status parse_if(Body* body, SourcePos pos) {
    IfNode node;
    std::string end_tag = "if";
    while (end_tag == "if" || end_tag == "elif") {
      IfBranch branch;
      MNEMO_ASSIGN_OR_RETURN(branch.condition, parse_expression());
      MNEMO_RETURN_IF_ERROR(expect_statement_close(end_tag));
      ++conditional_depth_;
      const Status body_status = parse_body(&branch.body, {"elif", "else", "endif"}, &end_tag, pos, "if");
      --conditional_depth_;
      MNEMO_RETURN_IF_ERROR(body_status);
      node.branches.push_back(std::move(branch));
    }
    if (end_tag == "else") {
      MNEMO_RETURN_IF_ERROR(expect_statement_close("else"));
      ++conditional_depth_;
      const Status body_status = parse_body(&node.else_body, {"endif"}, &end_tag, pos, "if");
      --conditional_depth_;
      MNEMO_RETURN_IF_ERROR(body_status);
    }
    MNEMO_RETURN_IF_ERROR(expect_statement_close("endif"));
    body->push_back(Node{std::move(node), pos});
    return ok_status();
  }

  Status parse_for(Body* body, SourcePos pos) {
    ForNode node;
    do {
      MNEMO_ASSIGN_OR_RETURN(std::string target, expect_name("a loop variable"));
      node.targets.push_back(std::move(target));
    } while (skip_punct(","));
    if (!skip_name("in")) return unexpected("'in'");
    // No conditional expression here: an `if` after the iterable filters the items.
    MNEMO_ASSIGN_OR_RETURN(node.iterable, parse_or());
    if (skip_name("if")) {
      MNEMO_ASSIGN_OR_RETURN(node.filter, parse_expression());
    }
    if (at_name("recursive")) return error_at(peek().pos, "recursive loops are not supported");
    MNEMO_RETURN_IF_ERROR(expect_statement_close("for"));
    std::string end_tag;
    ++loop_depth_;
    loop_variable_read_.push_back(false);
    const Status body_status = parse_body(&node.body, {"else", "endfor"}, &end_tag, pos, "for");
    node.uses_loop_variable = loop_variable_read_.back();
    loop_variable_read_.pop_back();
    --loop_depth_;
    MNEMO_RETURN_IF_ERROR(body_status);
    if (end_tag == "else") {
      MNEMO_RETURN_IF_ERROR(expect_statement_close("else"));
      MNEMO_RETURN_IF_ERROR(parse_body(&node.else_body, {"endfor"}, &end_tag, pos, "for"));
    }
    MNEMO_RETURN_IF_ERROR(expect_statement_close("endfor"));
    body->push_back(Node{std::move(node), pos});
    return ok_status();
  }

  Status parse_set(Body* body, SourcePos pos) {
    SetNode node;
    MNEMO_ASSIGN_OR_RETURN(node.name, expect_name("a variable name"));
    if (skip_punct(".")) {
      MNEMO_ASSIGN_OR_RETURN(node.attribute, expect_name("an attribute name"));
    }
    if (skip_punct("=")) {
      MNEMO_ASSIGN_OR_RETURN(node.value, parse_expression());
      MNEMO_RETURN_IF_ERROR(expect_statement_close("set"));
    } else {
      if (!node.attribute.empty()) return unexpected("'='");
      MNEMO_RETURN_IF_ERROR(expect_statement_close("set"));
      std::string end_tag;
      MNEMO_RETURN_IF_ERROR(parse_body(&node.body, {"endset"}, &end_tag, pos, "set"));
      MNEMO_RETURN_IF_ERROR(expect_statement_close("endset"));
    }
    body->push_back(Node{std::move(node), pos});
    return ok_status();
  }

  Status parse_macro(Body* body, SourcePos pos) {
    MacroNode node;
    MNEMO_ASSIGN_OR_RETURN(node.name, expect_name("a macro name"));
    MNEMO_RETURN_IF_ERROR(expect_punct("("));
    while (!at_punct(")")) {
      MacroParam param;
      MNEMO_ASSIGN_OR_RETURN(param.name, expect_name("a parameter name"));
      if (skip_punct("=")) {
        MNEMO_ASSIGN_OR_RETURN(param.default_value, parse_expression());
      }
      node.params.push_back(std::move(param));
      if (!skip_punct(",")) break;
    }
    MNEMO_RETURN_IF_ERROR(expect_punct(")"));
    MNEMO_RETURN_IF_ERROR(expect_statement_close("macro"));
    // A loop around the definition does not make break/continue legal inside the macro.
    const int outer_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string end_tag;
    const Status body_status = parse_body(&node.body, {"endmacro"}, &end_tag, pos, "macro");
    loop_depth_ = outer_loop_depth;
    MNEMO_RETURN_IF_ERROR(body_status);
    MNEMO_RETURN_IF_ERROR(expect_statement_close("endmacro"));
    body->push_back(Node{std::move(node), pos});
    return ok_status();
  }

  // ---- expressions, lowest precedence first ----

  Result<ExprPtr> parse_expression() {
    const SourcePos pos = peek().pos;
    DepthScope depth(&depth_);
    if (depth_ > kMaxParseDepth) return too_deep(pos);
    MNEMO_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
    while (skip_name("if")) {
      ConditionalExpr conditional;
      conditional.then_value = std::move(expr);
      MNEMO_ASSIGN_OR_RETURN(conditional.condition, parse_or());
      if (skip_name("else")) {
        MNEMO_ASSIGN_OR_RETURN(conditional.else_value, parse_expression());
      }
      MNEMO_ASSIGN_OR_RETURN(expr, make(std::move(conditional), pos));
    }
    return expr;
  }

  template <class Operand>
  Result<ExprPtr> parse_binary_chain(Operand parse_operand, std::initializer_list<std::pair<std::string_view, BinaryOp>> ops,
                                     bool operators_are_names) {
    const SourcePos pos = peek().pos;
    MNEMO_ASSIGN_OR_RETURN(ExprPtr lhs, (this->*parse_operand)());
    while (true) {
      const auto match = std::find_if(ops.begin(), ops.end(), [&](const auto& op) {
        return operators_are_names ? at_name(op.first) : at_punct(op.first);
      });
      if (match == ops.end()) return lhs;
      next();
      MNEMO_ASSIGN_OR_RETURN(ExprPtr rhs, (this->*parse_operand)());
      MNEMO_ASSIGN_OR_RETURN(lhs, make(BinaryExpr{match->second, std::move(lhs), std::move(rhs)}, pos));
    }
  }

  Result<ExprPtr> parse_or() { return parse_binary_chain(&Parser::parse_and, {{"or", BinaryOp::kOr}}, true); }
  Result<ExprPtr> parse_and() { return parse_binary_chain(&Parser::parse_not, {{"and", BinaryOp::kAnd}}, true); }

  Result<ExprPtr> parse_not() {
    const SourcePos pos = peek().pos;
    if (!skip_name("not")) return parse_compare();
    DepthScope depth(&depth_);
    if (depth_ > kMaxParseDepth) return too_deep(pos);
    MNEMO_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
    return make(UnaryExpr{UnaryOp::kNot, std::move(operand)}, pos);
  }

  Result<ExprPtr> parse_compare() {
    const SourcePos pos = peek().pos;
    static constexpr std::pair<std::string_view, BinaryOp> kComparisons[] = {
        {"==", BinaryOp::kEqual}, {"!=", BinaryOp::kNotEqual}, {"<", BinaryOp::kLess},
        {"<=", BinaryOp::kLessEqual}, {">", BinaryOp::kGreater}, {">=", BinaryOp::kGreaterEqual}};
    CompareExpr compare;
    MNEMO_ASSIGN_OR_RETURN(compare.first, parse_math1());
    while (true) {
      BinaryOp op;
      const auto* match = std::find_if(std::begin(kComparisons), std::end(kComparisons),
                                       [&](const auto& candidate) { return at_punct(candidate.first); });
      if (match != std::end(kComparisons)) {
        op = match->second;
        next();
      } else if (at_name("in")) {
        op = BinaryOp::kIn;
        next();
      } else if (at_name("not") && at_name("in", 1)) {
        op = BinaryOp::kNotIn;
        next();
        next();
      } else {
        break;
      }
      MNEMO_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
      compare.rest.emplace_back(op, std::move(operand));
    }
    if (compare.rest.empty()) return std::move(compare.first);
    return make(std::move(compare), pos);
  }

  Result<ExprPtr> parse_math1() {
    return parse_binary_chain(&Parser::parse_concat, {{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSubtract}}, false);
  }
  Result<ExprPtr> parse_concat() { return parse_binary_chain(&Parser::parse_math2, {{"~", BinaryOp::kConcat}}, false); }
  Result<ExprPtr> parse_math2() {
    return parse_binary_chain(&Parser::parse_pow,
                              {{"*", BinaryOp::kMultiply}, {"/", BinaryOp::kDivide}, {"//", BinaryOp::kFloorDivide},
                               {"%", BinaryOp::kModulo}},
                              false);
  }
  Result<ExprPtr> parse_pow() { return parse_binary_chain(&Parser::parse_unary, {{"**", BinaryOp::kPower}}, false); }

  Result<ExprPtr> parse_unary() { return parse_unary_operand(/*with_filters=*/true); }

  Result<ExprPtr> parse_unary_operand(bool with_filters) {
    const SourcePos pos = peek().pos;
    DepthScope depth(&depth_);
    if (depth_ > kMaxParseDepth) return too_deep(pos);
    ExprPtr expr;
    if (at_punct("-") || at_punct("+")) {
      const UnaryOp op = next().text == "-" ? UnaryOp::kNegate : UnaryOp::kPlus;
      MNEMO_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary_operand(false));
      MNEMO_ASSIGN_OR_RETURN(expr, make(UnaryExpr{op, std::move(operand)}, pos));
    } else {
      MNEMO_ASSIGN_OR_RETURN(expr, parse_primary());
      MNEMO_ASSIGN_OR_RETURN(expr, parse_postfix(std::move(expr)));
    }
    if (!with_filters) return expr;
    return parse_filters_and_tests(std::move(expr));
  }

  Result<ExprPtr> parse_primary() {
    const Token& token = peek();
    const SourcePos pos = token.pos;
    switch (token.kind) {
      case TokenKind::kName: {
        next();
        if (token.text == "true" || token.text == "True") return make(LiteralExpr{Value::from_bool(true)}, pos);
        if (token.text == "false" || token.text == "False") return make(LiteralExpr{Value::from_bool(false)}, pos);
        if (token.text == "none" || token.text == "None") return make(LiteralExpr{Value::none()}, pos);
        if (token.text == "loop" && !loop_variable_read_.empty()) loop_variable_read_.back() = true;
        return make(VariableExpr{token.text}, pos);
      }
      case TokenKind::kString: {
        std::string text;
        while (peek().kind == TokenKind::kString) text += next().text;  // 'a' 'b' == 'ab'
        return make(LiteralExpr{Value::from_string(std::move(text))}, pos);
      }
      case TokenKind::kInteger: next(); return make(LiteralExpr{Value::from_int(token.integer)}, pos);
      case TokenKind::kFloat: next(); return make(LiteralExpr{Value::from_float(token.number)}, pos);
      case TokenKind::kPunct:
        if (token.text == "(") return parse_parenthesized();
        if (token.text == "[") {
          next();
          ListExpr list;
          MNEMO_RETURN_IF_ERROR(parse_items("]", &list.items));
          return make(std::move(list), pos);
        }
        if (token.text == "{") return parse_dict();
        break;
      default: break;
    }
    return unexpected("an expression");
  }

  // (a), a tuple (a, b), or the empty tuple (); tuples are lists here.
  Result<ExprPtr> parse_parenthesized() {
    const SourcePos pos = next().pos;
    if (skip_punct(")")) return make(ListExpr{}, pos);
    MNEMO_ASSIGN_OR_RETURN(ExprPtr first, parse_expression());
    if (skip_punct(")")) return first;
    if (!skip_punct(",")) return unexpected("')' or ','");
    ListExpr tuple;
    tuple.items.push_back(std::move(first));
    MNEMO_RETURN_IF_ERROR(parse_items(")", &tuple.items));
    return make(std::move(tuple), pos);
  }

  // Comma-separated expressions up to `closer` (a trailing comma is allowed); consumes closer.
  Status parse_items(std::string_view closer, std::vector<ExprPtr>* items) {
    while (!at_punct(closer)) {
      MNEMO_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
      items->push_back(std::move(item));
      if (!skip_punct(",")) break;
    }
    return expect_punct(closer);
  }

  Result<ExprPtr> parse_dict() {
    const SourcePos pos = next().pos;
    DictExpr dict;
    while (!at_punct("}")) {
      MNEMO_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
      MNEMO_RETURN_IF_ERROR(expect_punct(":"));
      MNEMO_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      dict.entries.emplace_back(std::move(key), std::move(value));
      if (!skip_punct(",")) break;
    }
    MNEMO_RETURN_IF_ERROR(expect_punct("}"));
    return make(std::move(dict), pos);
  }

  Result<ExprPtr> parse_postfix(ExprPtr expr) {
    while (true) {
      const SourcePos pos = peek().pos;
      if (skip_punct(".")) {
        if (peek().kind == TokenKind::kInteger) {  // a.0 is a[0] in Jinja
          MNEMO_ASSIGN_OR_RETURN(ExprPtr index, make(LiteralExpr{Value::from_int(next().integer)}, pos));
          MNEMO_ASSIGN_OR_RETURN(expr, make(ItemExpr{std::move(expr), std::move(index)}, pos));
          continue;
        }
        MNEMO_ASSIGN_OR_RETURN(std::string attribute, expect_name("an attribute name"));
        MNEMO_ASSIGN_OR_RETURN(expr, make(AttributeExpr{std::move(expr), std::move(attribute)}, pos));
      } else if (skip_punct("[")) {
        MNEMO_ASSIGN_OR_RETURN(expr, parse_subscript(std::move(expr), pos));
      } else if (at_punct("(")) {
        // A call is reported where its callee starts: "raise_exception(...)", not its "(".
        const SourcePos callee_pos = expr->pos;
        CallExpr call;
        call.callee = std::move(expr);
        MNEMO_RETURN_IF_ERROR(parse_call_args(&call.args));
        MNEMO_ASSIGN_OR_RETURN(expr, make(std::move(call), callee_pos));
      } else {
        return expr;
      }
    }
  }

  // After '[': an index a[i] or a slice a[start:stop:step] with any part omitted.
  Result<ExprPtr> parse_subscript(ExprPtr object, SourcePos pos) {
    ExprPtr start;
    if (!at_punct(":")) {
      MNEMO_ASSIGN_OR_RETURN(start, parse_expression());
    }
    if (!skip_punct(":")) {
      MNEMO_RETURN_IF_ERROR(expect_punct("]"));
      return make(ItemExpr{std::move(object), std::move(start)}, pos);
    }
    SliceExpr slice;
    slice.object = std::move(object);
    slice.start = std::move(start);
    if (!at_punct(":") && !at_punct("]")) {
      MNEMO_ASSIGN_OR_RETURN(slice.stop, parse_expression());
    }
    if (skip_punct(":") && !at_punct("]")) {
      MNEMO_ASSIGN_OR_RETURN(slice.step, parse_expression());
    }
    MNEMO_RETURN_IF_ERROR(expect_punct("]"));
    return make(std::move(slice), pos);
  }

  // (a, b, key=c): keyword arguments come after positional ones, as in Python.
  Status parse_call_args(CallArgs* args) {
    MNEMO_RETURN_IF_ERROR(expect_punct("("));
    while (!at_punct(")")) {
      if (peek().kind == TokenKind::kName && at_punct("=", 1)) {
        std::string name = next().text;
        next();
        MNEMO_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        args->keyword.emplace_back(std::move(name), std::move(value));
      } else {
        if (!args->keyword.empty()) return error_at(peek().pos, "positional argument after a keyword argument");
        MNEMO_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        args->positional.push_back(std::move(value));
      }
      if (!skip_punct(",")) break;
    }
    return expect_punct(")");
  }

  Result<ExprPtr> parse_filters_and_tests(ExprPtr expr) {
    while (true) {
      if (skip_punct("|")) {
        const Token& name = peek();
        MNEMO_ASSIGN_OR_RETURN(std::string filter, expect_name("a filter name"));
        if (!is_known_filter(filter) && conditional_depth_ == 0) {
          return error_at(name.pos, fmt::format("unknown filter '{}'", filter));
        }
        FilterExpr node{std::move(expr), std::move(filter), {}};
        if (at_punct("(")) MNEMO_RETURN_IF_ERROR(parse_call_args(&node.args));
        MNEMO_ASSIGN_OR_RETURN(expr, make(std::move(node), name.pos));
      } else if (skip_name("is")) {
        const bool negated = skip_name("not");
        const Token& name = peek();
        MNEMO_ASSIGN_OR_RETURN(std::string test, expect_name("a test name"));
        if (!is_known_test(test) && conditional_depth_ == 0) {
          return error_at(name.pos, fmt::format("unknown test '{}'", test));
        }
        TestExpr node{std::move(expr), std::move(test), negated, {}};
        if (at_punct("(")) {
          MNEMO_RETURN_IF_ERROR(parse_call_args(&node.args));
        } else if (starts_test_argument()) {  // `is divisibleby 3`, `is sameas none`
          MNEMO_ASSIGN_OR_RETURN(ExprPtr argument, parse_primary());
          MNEMO_ASSIGN_OR_RETURN(argument, parse_postfix(std::move(argument)));
          node.args.positional.push_back(std::move(argument));
        }
        MNEMO_ASSIGN_OR_RETURN(expr, make(std::move(node), name.pos));
      } else {
        return expr;
      }
    }
  }

  bool starts_test_argument() const {
    const Token& token = peek();
    if (token.kind == TokenKind::kName) {
      return token.text != "else" && token.text != "or" && token.text != "and" && token.text != "if" &&
             token.text != "is" && token.text != "in" && token.text != "not";
    }
    return token.kind == TokenKind::kString || token.kind == TokenKind::kInteger || token.kind == TokenKind::kFloat ||
           at_punct("[") || at_punct("{");
  }

  std::vector<Token> tokens_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<bool> loop_variable_read_;  // per open for loop: whether its body reads `loop`
  // Inside an if block, an unknown filter or test fails only if evaluated, as in Jinja 3: a
  // template may guard an extension filter (llama.cpp's from_json) behind a branch not taken.
  int conditional_depth_ = 0;
};

}  // namespace

Result<Body> parse_template(std::string_view source) {
  MNEMO_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  return Parser(std::move(tokens)).parse();
}

}  // namespace mnemo::jinja
