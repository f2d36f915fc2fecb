// Jinja's operators with Python's semantics: + on numbers, strings and lists; / always gives a
// float; // and % floor toward negative infinity; integer overflow is an Error (Python ints do
// not overflow, so a result that does not fit would be wrong, not just large).
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_value.h"

namespace mnemo::jinja {

// Arithmetic, ~, comparisons and (not) in; not `and`/`or`, which short-circuit in the evaluator.
Result<Value> binary_operation(BinaryOp op, const Value& lhs, const Value& rhs, Budget& budget);

// `item in container`: substring, list element or dict key.
Result<bool> contains(const Value& container, const Value& item);

// object[index] and object.name for a defined object: a missing key or an index out of range
// gives undefined, as Jinja's getitem/getattr do.
Value get_item(const Value& object, const Value& index);
Value get_attribute(const Value& object, std::string_view name);

// object[start:stop:step] on a list or string; unset parts are undefined or none.
Result<Value> slice(const Value& object, const Value& start, const Value& stop, const Value& step, Budget& budget);

}  // namespace mnemo::jinja
