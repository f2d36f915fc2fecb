// The grammars the mask benchmarks share (bench/mask_bench.cpp, and the side by side with
// XGrammar in bench/xgrammar/): a JSON schema with a pattern, an integer and an anyOf; llama.cpp's
// GBNF grammar of JSON; a regex with a wide character class.
#pragma once

namespace mnemo::bench {

inline constexpr const char* kPersonSchema = R"({"type":"object",
      "properties":{"name":{"type":"string"},"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]+$"},"age":{"type":"integer"},
      "pet":{"anyOf":[{"enum":["cat","dog"]},{"type":"null"}]}},"required":["name","code","age"]})";

inline constexpr const char* kJsonGbnf = R"g(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)?
ws     ::= [ \t\n]*
)g";

inline constexpr const char* kAnswerRegex = R"((yes|no): [a-z ]+\.)";

}  // namespace mnemo::bench
