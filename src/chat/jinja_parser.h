// Recursive-descent parser for the Jinja subset, following Jinja2's grammar and precedence:
//   conditional (a if c else b) < or < and < not < comparisons (==, !=, <, <=, >, >=, in, not in)
//   < + - < ~ < * / // % < ** < unary - + < postfix (.a, [i], [a:b:c], calls), filters (| f)
//   and tests (is [not] t), which therefore bind tighter than any binary operator.
// Unknown filters and tests are errors here, as when Jinja compiles a template, except inside
// if blocks, where (as in Jinja 3) they fail only when evaluated.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"
#include "util/result.h"

namespace mnemo::jinja {

// Parsing recurses over nested blocks and brackets, and rendering over the resulting tree; both
// are bounded so that a hostile template gets an Error instead of overflowing the stack.
inline constexpr int kMaxParseDepth = 100;        // nested blocks, brackets, not/minus chains
inline constexpr uint32_t kMaxExprHeight = 200;   // height of one expression's tree (a+b+c+...)

// Errors name the line and column: "line 3, column 7: unclosed 'for' ...".
Result<Body> parse_template(std::string_view source);

}  // namespace mnemo::jinja
