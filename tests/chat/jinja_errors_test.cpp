// Malformed templates get Errors with positions; hostile templates hit the limits (work,
// output, value size, nesting, recursion) and get Errors instead of crashing or hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "chat/builtin_templates.h"
#include "chat/chat_template.h"
#include "jinja_test_util.h"

namespace mnemo::jinja {
namespace {

using testing::render;
using testing::renders_error;

::testing::AssertionResult parse_fails(std::string_view source, std::string_view expected_part) {
  auto body = parse_template(source);
  if (body.ok()) return ::testing::AssertionFailure() << "parsed: " << source;
  if (body.error().message().find(expected_part) == std::string::npos) {
    return ::testing::AssertionFailure() << "error lacks '" << expected_part << "': " << body.error().message();
  }
  return ::testing::AssertionSuccess();
}

TEST(JinjaSyntaxErrors, UnclosedTagsCommentsStringsAndBlocks) {
  EXPECT_TRUE(parse_fails("ab{{ x ", "line 1, column 3: unclosed tag '{{': missing '}}'"));
  EXPECT_TRUE(parse_fails("{% if x ", "line 1, column 1: unclosed tag '{%'"));
  EXPECT_TRUE(parse_fails("x\n{# never closed", "line 2, column 1: unclosed comment"));
  EXPECT_TRUE(parse_fails("{{ 'abc }}", "line 1, column 4: unclosed string literal"));
  EXPECT_TRUE(parse_fails("{% if x %}abc", "line 1, column 4: unclosed 'if': expected 'endif'"));
  EXPECT_TRUE(parse_fails("{% for x in y %}\n{% if x %}\n{% endfor %}", "unexpected 'endfor' in 'if' opened at line 2, column 4"));
  EXPECT_TRUE(parse_fails("{% macro m() %}x", "unclosed 'macro'"));
  EXPECT_TRUE(parse_fails("{% set x %}x", "unclosed 'set'"));
}

TEST(JinjaSyntaxErrors, StrayAndUnknownTags) {
  EXPECT_TRUE(parse_fails("{% endfor %}", "line 1, column 4: unexpected 'endfor' outside any block"));
  EXPECT_TRUE(parse_fails("{% else %}", "unexpected 'else'"));
  EXPECT_TRUE(parse_fails("{% frobnicate %}", "unknown tag 'frobnicate'"));
  EXPECT_TRUE(parse_fails("{% include 'other.jinja' %}", "tag 'include' is not supported"));
  EXPECT_TRUE(parse_fails("{% break %}", "'break' outside a loop"));
  EXPECT_TRUE(parse_fails("{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", "'break' outside a loop"));
  EXPECT_TRUE(parse_fails("{% 'x' %}", "expected a tag name"));
}

TEST(JinjaSyntaxErrors, BadExpressions) {
  EXPECT_TRUE(parse_fails("{{ 1 + }}", "line 1, column 8: expected an expression, found '}}'"));
  EXPECT_TRUE(parse_fails("{% if %}{% endif %}", "expected an expression"));
  EXPECT_TRUE(parse_fails("{{ (1 }}", "line 1, column 7: unexpected '}': '(' at line 1, column 4 is not closed"));
  EXPECT_TRUE(parse_fails("{{ [1, 2 }}", "unexpected '}': '[' at line 1, column 4 is not closed"));
  EXPECT_TRUE(parse_fails("{{ 1) }}", "unexpected ')'"));
  EXPECT_TRUE(parse_fails("{{ f(1 2) }}", "expected ')'"));
  EXPECT_TRUE(parse_fails("{{ x y }}", "expected '}}'"));
  EXPECT_TRUE(parse_fails("{{ f(a=1, 2) }}", "positional argument after a keyword argument"));
  EXPECT_TRUE(parse_fails("{{ 99999999999999999999 }}", "integer '99999999999999999999' out of range"));
  EXPECT_TRUE(parse_fails("{{ a ; b }}", "unexpected character ';'"));
  EXPECT_TRUE(parse_fails("{% for in x %}{% endfor %}", "expected 'in'"));
  EXPECT_TRUE(parse_fails("{% set = 1 %}", "expected a variable name"));
}

TEST(JinjaSyntaxErrors, UnknownFiltersAndTestsWithPositions) {
  EXPECT_TRUE(parse_fails("line one\n  {{ x | nosuchfilter }}", "line 2, column 10: unknown filter 'nosuchfilter'"));
  EXPECT_TRUE(parse_fails("{{ x is nosuchtest }}", "line 1, column 9: unknown test 'nosuchtest'"));
  // Inside an if block they fail only when evaluated, as in Jinja 3 (templates guard extension
  // filters such as llama.cpp's from_json behind branches).
  EXPECT_EQ(render("{% if false %}{{ x | from_json }}{% endif %}ok"), "ok");
  EXPECT_TRUE(renders_error("{% if true %}{{ x | from_json }}{% endif %}", "line 1, column 21: unknown filter 'from_json'"));
}

TEST(JinjaSyntaxErrors, ChatTemplateNamesItself) {
  auto parsed = ChatTemplate::parse("{% if %}");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message().rfind("chat template: line 1, column 7: ", 0), 0u) << parsed.error().message();
}

TEST(JinjaRenderErrors, CarryPositions) {
  EXPECT_TRUE(renders_error("a\nb {{ 1 // 0 }}", "line 2, column 6: integer division or modulo by zero"));
  EXPECT_TRUE(renders_error("{{ none.x.y }}", "cannot read 'y' of 'None.x': it is undefined"));
  EXPECT_TRUE(renders_error("{% for x in 5 %}{% endfor %}", "line 1, column 13: 'int' object is not iterable"));
  EXPECT_TRUE(renders_error("{% for a, b in [1] %}{% endfor %}", "cannot unpack 'int' into 2 loop variables"));
  EXPECT_TRUE(renders_error("{{ {1.5: 2} }}", "dict keys must be strings or integers"));
}

// ---- limits ----

Limits small_limits() {
  Limits limits;
  limits.max_steps = 100'000;
  limits.max_output_bytes = 4096;
  limits.max_value_bytes = size_t{1} << 20;
  return limits;
}

TEST(JinjaLimits, NestedHugeLoopsStopOnTheWorkLimit) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(renders_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                            "exceeded its"));  // work limit, or the time limit in slow (sanitizer) builds
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(renders_error("{% for i in range(1000) %}{% for j in range(1000) %}{% set x = i %}{% endfor %}{% endfor %}",
                            "work limit", small_limits()));
}

TEST(JinjaLimits, HugeRangesAndRepeatsAreRefusedBeforeAllocating) {
  EXPECT_TRUE(renders_error("{{ range(1000000000000) | length }}", "over the limit"));
  EXPECT_TRUE(renders_error("{{ range(-9223372036854775807, 9223372036854775807) | length }}", "over the limit"));
  EXPECT_TRUE(renders_error("{{ 'x' * 1000000000000 }}", "over the value size limit"));
  EXPECT_TRUE(renders_error("{{ [1, 2] * 1000000000000 }}", "over the value size limit"));
  EXPECT_EQ(render("{{ 'ab'.replace('', 'x') }}"), "xaxbx");
  EXPECT_TRUE(renders_error("{{ ('x' * 400000).replace('', 'yyy') }}", "over the", small_limits()));
  EXPECT_TRUE(renders_error("{{ ('x' * 400000) | replace('x', 'yyy') }}", "over the", small_limits()));
}

TEST(JinjaLimits, DoublingStringsAndListsHitsTheValueLimit) {
  EXPECT_TRUE(renders_error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                            "over the limit"));
  EXPECT_TRUE(renders_error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
                            "over the limit"));
}

TEST(JinjaLimits, SharedStructureCannotBePrintedOrComparedForFree) {
  // 60 doublings of [x, x] cost 60 steps to build but 2^60 to walk.
  std::string build = "{% set l0 = [1] %}";
  for (int i = 1; i <= 60; ++i) build += "{% set l" + std::to_string(i) + " = [l" + std::to_string(i - 1) + ", l" + std::to_string(i - 1) + "] %}";
  EXPECT_TRUE(renders_error(build + "{{ l60 }}", "over the limit"));
  EXPECT_TRUE(renders_error(build + "{{ l60 == l60 }}", "work limit"));
  EXPECT_TRUE(renders_error(build + "{{ l60 | tojson }}", "over the limit"));
  EXPECT_TRUE(renders_error(build + "{{ 1 in [l60] }}", "work limit"));
  EXPECT_TRUE(renders_error(build + "{{ l60 | unique | list }}", "over the limit"));
  EXPECT_TRUE(renders_error(build + "{{ namespace(l=l60) }}", "over the limit"));
  EXPECT_EQ(render(build + "{{ l60 | length }} {{ l60[0][1][0] | length }}"), "2 2");  // cheap uses still work
}

TEST(JinjaLimits, DeepValuesAndNamespaceCycles) {
  EXPECT_TRUE(renders_error("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}",
                            "nests"));
  EXPECT_TRUE(renders_error("{% set ns = namespace() %}{% set ns.me = [ns] %}", "a namespace cannot hold another namespace"));
}

TEST(JinjaLimits, OutputLimit) {
  EXPECT_TRUE(renders_error("{% for i in range(1000) %}0123456789{% endfor %}", "output over the limit of 4096 bytes",
                            small_limits()));
}

TEST(JinjaLimits, RecursionDepth) {
  EXPECT_TRUE(renders_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion deeper than"));
  EXPECT_TRUE(renders_error("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
                            "recursion deeper than"));
}

TEST(JinjaLimits, DeeplyNestedSourceIsAParseError) {
  const std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_TRUE(parse_fails(parens, "nests more than"));
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_TRUE(parse_fails(blocks, "nests more than"));
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_TRUE(parse_fails(nots + "x }}", "nests more than"));
  std::string minus = "{{ " + std::string(100000, '-') + "1 }}";
  EXPECT_TRUE(parse_fails(minus, "nests more than"));
  // Long flat chains build tall trees without recursing in the parser: bounded too.
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  EXPECT_TRUE(parse_fails(sum + " }}", "operations deep"));
  std::string attributes = "{{ x";
  for (int i = 0; i < 100000; ++i) attributes += ".a";
  EXPECT_TRUE(parse_fails(attributes + " }}", "operations deep"));
  std::string filters = "{{ x";
  for (int i = 0; i < 100000; ++i) filters += " | trim";
  EXPECT_TRUE(parse_fails(filters + " }}", "operations deep"));
}

TEST(JinjaLimits, ModerateRealisticNestingStillWorks) {
  std::string sum = "{{ 0";
  for (int i = 0; i < 150; ++i) sum += " + 1";
  EXPECT_EQ(render(sum + " }}"), "150");
  std::string blocks;
  for (int i = 0; i < 40; ++i) blocks += "{% if true %}";
  blocks += "deep";
  for (int i = 0; i < 40; ++i) blocks += "{% endif %}";
  EXPECT_EQ(render(blocks), "deep");
}

// ---- robustness: arbitrary bytes never crash ----

TEST(JinjaFuzz, MutatedTemplatesNeverCrash) {
  const std::string seeds[] = {
      std::string(*builtin_template_source("gemma")), std::string(*builtin_template_source("llama2")),
      "{% set ns = namespace(i=0) %}{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.content | trim | "
      "upper }}{% set ns.i = ns.i + 1 %}{% endfor %}{{ ns.i }}{{ messages[1:][::-1] | map(attribute='role') | join(',') }}",
      "{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ {'a': [1, 2.5, none]} | tojson(indent=2) }}{{ 'a b'.split() }}",
  };
  const std::string fragments[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|", ".",
                                   "for", "endfor", "if", "endif", " in ", "loop", "range(99999)", "\\", "\xff", "\n"};
  std::mt19937 random(1234);
  int rendered = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = seeds[random() % std::size(seeds)];
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = random() % text.size();
      switch (random() % 3) {
        case 0: text.erase(at, 1 + random() % 8); break;
        case 1: text.insert(at, fragments[random() % std::size(fragments)]); break;
        default: text[at] = static_cast<char>(random() % 256); break;
      }
    }
    auto result = parse_and_render_for_fuzzing(text);
    if (result.ok()) ++rendered;
    else EXPECT_FALSE(result.error().message().empty());
  }
  EXPECT_GT(rendered, 0);  // some mutations stay valid, so rendering is exercised too
}

TEST(JinjaFuzz, RandomBytesNeverCrash) {
  std::mt19937 random(99);
  for (int round = 0; round < 2000; ++round) {
    std::string text(random() % 200, '\0');
    for (char& c : text) c = static_cast<char>(random() % 256);
    if (random() % 2 == 0) text = "{{ " + text + " }}";
    (void)parse_and_render_for_fuzzing(text);
  }
}

}  // namespace
}  // namespace mnemo::jinja
