// GBNF grammars (grammar/gbnf.h) and their matcher (grammar/gbnf_matcher.h): llama.cpp's syntax,
// the texts a grammar derives and only those (checked against the Regex engine on regular
// grammars, and on recursive ones by construction), every malformed or left-recursive grammar
// refused by name, and the matcher's limits refusing bytes instead of growing without bound.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "grammar/gbnf.h"
#include "grammar/gbnf_matcher.h"
#include "grammar/regex.h"

namespace mnemo::grammar {
namespace {

Gbnf compiled(const std::string& text) {
  auto g = Gbnf::compile(text);
  EXPECT_TRUE(g.ok()) << text << ": " << (g.ok() ? "" : g.error().message());
  return g.ok() ? std::move(*g) : *Gbnf::compile("root ::= \"\"");
}

// Whether `text` is derived whole; and every prefix of a derived text is accepted on the way.
bool derives(const Gbnf& g, const std::string& text) {
  GbnfStacks stacks(&g);
  GbnfMatcher m(&stacks);
  for (const char c : text) {
    if (!m.advance(static_cast<uint8_t>(c))) return false;
  }
  return m.complete();
}

std::string refusal(const std::string& text) {
  auto g = Gbnf::compile(text);
  return g.ok() ? "" : g.error().message();
}

TEST(Gbnf, ArithmeticAndNestedGroups) {
  const Gbnf g = compiled(R"g(
# expressions, as in llama.cpp's examples
root  ::= expr
expr  ::= term ([-+*/] term)*
term  ::= num | "(" ws expr ws ")"
num   ::= [0-9]+
ws    ::= [ \t]*
)g");
  for (const char* ok : {"1", "12+3", "(1+2)*3", "((4))", "( 1-2 )/30", "7*(8+(9))"}) EXPECT_TRUE(derives(g, ok)) << ok;
  for (const char* bad : {"", "+", "1+", "(1", "1)", "a", "1 + 2", "(1+2))"}) EXPECT_FALSE(derives(g, bad)) << bad;
}

TEST(Gbnf, AJsonGrammarTakesJsonAndNothingElse) {
  const Gbnf g = compiled(R"g(
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{4} )* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws     ::= [ \t\n]*
)g");
  for (const char* ok : {R"g({"a": [1, 2.5e3, -0, "x\"y"], "b": {"c": null}})g", "[]", "true", R"g("\u00e9t\u00E9")g",
                         "{\"é\": \"日本\"}", "[[[[1]]]]"}) {
    EXPECT_TRUE(derives(g, ok)) << ok;
  }
  for (const char* bad : {"{", R"g({"a" 1})g", "01", "[1,]", R"g("\x")g", "tru", "[1] x", "\"a\nb\""}) EXPECT_FALSE(derives(g, bad)) << bad;
}

TEST(Gbnf, RegularGrammarsAgreeWithTheRegexEngine) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {R"g(root ::= [a-c]{2,4} ("x" | "yz")*)g", "[a-c]{2,4}(x|yz)*"},
      {R"g(root ::= "a"? "b"+ [^ab]{0,2})g", "a?b+[^ab\\n]{0,2}"},
      {R"g(root ::= ("ab" | "a") ("bc" | "c")? "z"{1,})g", "(ab|a)(bc|c)?z{1,}"},
      {R"g(root ::= x x
x ::= [xyz] | "")g", "[xyz]?[xyz]?"},
  };
  const std::string alphabet = "abcxyz";
  std::mt19937 rng(3);
  for (const auto& [gbnf, pattern] : pairs) {
    const Gbnf g = compiled(gbnf);
    const auto regex = Regex::compile(pattern, /*anchored=*/true);
    ASSERT_TRUE(regex.ok()) << pattern;
    int derived = 0;
    for (int i = 0; i < 3000; ++i) {
      std::string text;
      const int n = static_cast<int>(rng() % 8);
      for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
      const bool want = regex->matches(text);
      EXPECT_EQ(derives(g, text), want) << gbnf << " on '" << text << "'";
      derived += want ? 1 : 0;
    }
    EXPECT_GT(derived, 20) << gbnf << ": too few derived texts to mean anything";
  }
}

TEST(Gbnf, CharactersAreCodePoints) {
  const Gbnf g = compiled(R"g(root ::= [一-龥]+ "." [^a-z] .)g");
  EXPECT_TRUE(derives(g, "日本語.Zé"));
  EXPECT_TRUE(derives(g, "中.😀😀"));
  EXPECT_FALSE(derives(g, "日本.a1"));
  EXPECT_FALSE(derives(g, "abc.ZZ"));
  EXPECT_FALSE(derives(g, "日\xff.ZZ")) << "not UTF-8";
  EXPECT_FALSE(derives(g, "日\xc0\xae.ZZ")) << "an overlong '.'";
  const Gbnf escapes = compiled(R"g(root ::= "\x41\u00e9\U0001F600\n\t\"\\" [\]\-\[])g");
  EXPECT_TRUE(derives(escapes, "A\xc3\xa9\xf0\x9f\x98\x80\n\t\"\\-"));
}

TEST(Gbnf, AlternativesMaySpanLinesAndCommentsAreSkipped) {
  const Gbnf g = compiled(
      "root ::= (\n  \"a\" # first\n  | \"b\"\n) tail |\n  \"c\"\n\n# a comment line\ntail ::= \"!\"?\n");
  for (const char* ok : {"a", "b!", "c"}) EXPECT_TRUE(derives(g, ok)) << ok;
  for (const char* bad : {"c!", "ab", ""}) EXPECT_FALSE(derives(g, bad)) << bad;
}

TEST(Gbnf, MalformedAndLeftRecursiveGrammarsAreRefusedByName) {
  EXPECT_NE(refusal("root ::= item\n").find("'item' is used but not defined"), std::string::npos);
  EXPECT_NE(refusal("start ::= \"a\"\n").find("no 'root'"), std::string::npos);
  EXPECT_NE(refusal("root ::= root \"a\" | \"b\"\n").find("'root' is left-recursive"), std::string::npos);
  EXPECT_NE(refusal("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"\n").find("'a' is left-recursive"), std::string::npos);
  EXPECT_NE(refusal("root ::= (\"a\")* root\n").find("left-recursive"), std::string::npos) << "through a nullable group";
  for (const char* bad : {"root ::= \"abc", "root ::= [abc", "root ::= \"\\q\"", "root ::= [z-a]", "root ::= \"a\"{3,1}",
                          "root ::= \"a\"{5000}", "root := \"a\"", "root ::= * \"a\"", "root ::= (\"a\"", "::= \"a\"",
                          "root ::= \"a\" )", "root ::= \"a\"\nroot ::= \"b\"", "root ::= \"\\x4\"", "root ::= \"\\U00110000\"",
                          "root ::= \"\xff\"", "root ::= \"\xc0\xae\"", "root ::= [\xe2\x82]"}) {
    EXPECT_FALSE(refusal(bad).empty()) << bad;
  }
  std::string deep = "root ::= ";
  for (int i = 0; i < 100; ++i) deep += "(";
  deep += "\"a\"";
  for (int i = 0; i < 100; ++i) deep += ")";
  EXPECT_NE(refusal(deep).find("nested"), std::string::npos);
  std::string big = "root ::= ";
  for (int i = 0; i < 70; ++i) big += "(\"ab\"){1000} ";
  EXPECT_NE(refusal(big).find("elements"), std::string::npos) << "70,000 elements";
}

TEST(GbnfMatcher, ARefusedByteLeavesTheStateAsItWas) {
  const Gbnf g = compiled(R"g(root ::= "ab" "é" "c")g");
  GbnfStacks stacks(&g);
  GbnfMatcher m(&stacks);
  EXPECT_TRUE(m.advance('a'));
  EXPECT_FALSE(m.advance('x'));
  EXPECT_TRUE(m.advance('b'));
  EXPECT_FALSE(m.advance(0xE1)) << "no class takes a character from U+1000 to U+1FFF here";
  // Lead bytes whose raw value range would cover 'é' or ASCII only through overlong forms.
  for (const uint8_t lead : {0xC0, 0xC1, 0xE0, 0xF0, 0xF5}) EXPECT_FALSE(m.advance(lead)) << std::hex << int{lead};
  EXPECT_TRUE(m.advance(0xC3));
  EXPECT_FALSE(m.advance(0xA8)) << "è, not é";
  EXPECT_TRUE(m.advance(0xA9));
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.advance('c'));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.only_end());
}

TEST(GbnfMatcher, DeepNestingGrowsTheArenaAndAmbiguityIsBounded) {
  const Gbnf nested = compiled(R"g(root ::= "(" root ")" | "x")g");
  std::string text(3000, '(');
  text += "x" + std::string(3000, ')');
  EXPECT_TRUE(derives(nested, text));
  // Every split of a run of a's into "a" and "aa" is a parse; their stacks coincide, so the
  // live set stays small and long runs pass.
  const Gbnf ambiguous = compiled(R"g(root ::= ("a" | "aa" | "a" "a")*)g");
  EXPECT_TRUE(derives(ambiguous, std::string(500, 'a')));
  // A choice among 200 words opens 200 parses: within the set.
  std::string words = "root ::= ";
  for (int i = 0; i < 200; ++i) words += (i ? " | \"w" : "\"w") + std::to_string(i) + "\"";
  EXPECT_TRUE(derives(compiled(words), "w137"));
  EXPECT_FALSE(derives(compiled(words), "w200"));
  // One whose live parses outgrow the matcher's set refuses bytes instead.
  std::string wide = "root ::= ";
  for (int i = 0; i < 300; ++i) wide += (i ? " | \"a" : "\"a") + std::to_string(i) + "\"";
  const Gbnf many = compiled(wide);
  GbnfStacks stacks(&many);
  GbnfMatcher m(&stacks);
  EXPECT_FALSE(m.advance('a')) << "300 live parses, more than kMaxStacks";
}

}  // namespace
}  // namespace mnemo::grammar
