// Renders a parsed template: an interpreter over the tree from jinja_parser.h.
//
// Scoping follows Jinja: `set` inside a for loop (or a macro) stays inside it, which is why
// templates use namespace() to carry state out of loops; `set` inside an `if` does not open a
// scope. Missing variables, keys and attributes are undefined: they print as nothing, are false,
// and fail only when used further (an attribute of undefined, undefined + 1), as with Jinja's
// default Undefined that HF uses.
//
// Every render runs under Limits (jinja_builtins.h): work steps, output and value sizes, value
// nesting and evaluation depth; hitting one is an Error, never a crash or a hang.
#pragma once

#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_value.h"
#include "util/result.h"

namespace mnemo::jinja {

// `globals` are the template's variables (messages, bos_token, ...). Errors carry the line and
// column of the node that failed, e.g. "line 1, column 420: Conversation roles must alternate".
Result<std::string> render_template(const Body& body, const Dict& globals, const Limits& limits);

}  // namespace mnemo::jinja
