// The Jinja subset: expressions, filters, tests, methods, statements, scoping and whitespace
// control. Expected outputs are what Jinja2 (with HF's trim_blocks/lstrip_blocks) prints.
#include <gtest/gtest.h>

#include "jinja_test_util.h"

namespace mnemo::jinja {
namespace {

using testing::render;
using testing::renders_error;
using testing::str;

Dict conversation() {
  List messages;
  messages.push_back(Value::from_dict({{"role", str("system")}, {"content", str("Be brief.")}}));
  messages.push_back(Value::from_dict({{"role", str("user")}, {"content", str(" Hi ")}}));
  messages.push_back(Value::from_dict({{"role", str("assistant")}, {"content", str("Hello")}}));
  return {{"messages", Value::from_list(std::move(messages))}, {"bos_token", str("<s>")}};
}

TEST(JinjaExpressions, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 10 }} {{ -3 + 1 }}"), "7 9 1024 -2");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }}"), "3 -4 1 2 -2");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 10 / 5 }} {{ 1.5 * 2 }} {{ 0.1 + 0.2 }} {{ 2 ** -1 }}"), "3.5 2.0 3.0 0.30000000000000004 0.5");
  EXPECT_EQ(render("{{ true + 1 }} {{ 1e3 }} {{ 1e16 }} {{ 2.5e-5 }}"), "2 1000.0 1e+16 2.5e-05");
  EXPECT_TRUE(renders_error("{{ 1 // 0 }}", "division or modulo by zero"));
  EXPECT_TRUE(renders_error("{{ 1 / 0 }}", "division by zero"));
  EXPECT_TRUE(renders_error("{{ 9223372036854775807 + 1 }}", "integer overflow"));
  EXPECT_TRUE(renders_error("{{ 'a' - 1 }}", "unsupported operand types for -: 'str' and 'int'"));
}

TEST(JinjaExpressions, StringsAndConcatenation) {
  EXPECT_EQ(render(R"({{ 'a' ~ 1 ~ none ~ true ~ missing }})"), "a1NoneTrue");
  EXPECT_EQ(render(R"({{ 'a' + 'b' }}{{ "it's" }}{{ 'tab\there' }}{{ 'x' 'y' }})"), "abit'stab\therexy");
  EXPECT_EQ(render(R"({{ '\u00e9\x41\n' }})"), "\xC3\xA9" "A\n");
  EXPECT_EQ(render(R"({{ 'ab' * 3 }}{{ [1] * 2 }})"), "ababab[1, 1]");
  EXPECT_TRUE(renders_error("{{ 'a' + 1 }}", "unsupported operand types for +: 'str' and 'int'"));
}

TEST(JinjaExpressions, FiltersBindTighterThanOperators) {
  // Jinja parses a + b | trim + c as a + (b | trim) + c: Gemma 2's template depends on it.
  EXPECT_EQ(render("{{ '<' + ' x ' | trim + '>' }}"), "<x>");
  EXPECT_EQ(render("{{ -1 | abs }}"), "1");
}

TEST(JinjaExpressions, LogicAndComparisons) {
  EXPECT_EQ(render("{{ not true or true }} {{ not (true or true) }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "True False True False");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ [1, 'a'] == [1, 'a'] }} {{ {'a': 1} == {'a': 1} }} {{ 'a' != 'b' }}"), "True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }}"), "x b []");
  EXPECT_EQ(render("{{ 'at' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1, 2] }}"), "True True True True");
  EXPECT_EQ(render("{{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }}"), "True True");
  EXPECT_TRUE(renders_error("{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'"));
}

TEST(JinjaExpressions, InlineIf) {
  EXPECT_EQ(render("{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 else 'no' }}|{{ 'yes' if 0 }}|"), "yes|no||");
  EXPECT_EQ(render("{{ 'a' if false else 'b' if true else 'c' }}"), "b");
}

TEST(JinjaExpressions, IndexingAndSlicing) {
  const Dict globals = conversation();
  EXPECT_EQ(render("{{ messages[0]['role'] }} {{ messages[1].content }} {{ messages[-1].role }}", globals), "system  Hi  assistant");
  EXPECT_EQ(render("{{ messages[1:] | length }} {{ messages[5] is defined }} {{ messages[0].nope is defined }}", globals),
            "2 False False");
  EXPECT_EQ(render("{{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3, 4][::-1] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3][-2:] }}"),
            "[2, 3] [4, 3, 2, 1] [1, 3] [2, 3]");
  EXPECT_EQ(render("{{ 'hello'[1:3] }} {{ 'hello'[-1] }} {{ 'hello'[:-1] }} {{ 'h\u00e9llo'[1:3] }}"), "el o hell \xC3\xA9l");
  EXPECT_EQ(render("{{ [1, 2][5] }}|{{ {'a': 1}.b }}|{{ {'a': 1}['a'] }}"), "||1");
  EXPECT_TRUE(renders_error("{{ [1][::0] }}", "slice step cannot be zero"));
}

TEST(JinjaExpressions, DictLiterals) {
  EXPECT_EQ(render("{% set d = {'a': 1, 'b': {'c': [2]}} %}{{ d.a }} {{ d['b'].c[0] }} {{ d | length }}"), "1 2 2");
  EXPECT_EQ(render("{{ {'a': 1, 'a': 2} }}"), "{'a': 2}");  // a later key wins, as in Python
  // Integer keys are kept as their digits: lookups by the integer work, and tojson writes
  // them as strings, as Python's json does.
  EXPECT_EQ(render("{% set d = {0: 'zero', 512: 'x'} %}{{ d[512] }} {{ d | tojson }}"), "x {\"0\": \"zero\", \"512\": \"x\"}");
}

TEST(JinjaExpressions, PrintsValuesAsPython) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(render("{{ {'a': [1], 'b': \"it's\"} }}"), "{'a': [1], 'b': \"it's\"}");
  EXPECT_EQ(render("{{ none }}|{{ missing }}|{{ false }}"), "None||False");
}

TEST(JinjaExpressions, UndefinedValues) {
  EXPECT_EQ(render("{{ missing is defined }} {{ missing is undefined }} {{ missing | default('d') }} {{ missing | length }}"),
            "False True d 0");
  EXPECT_EQ(render("{% for x in missing %}x{% endfor %}{% if not missing %}empty{% endif %}"), "empty");
  EXPECT_TRUE(renders_error("{{ missing.attr }}", "cannot read 'attr' of 'missing': it is undefined"));
  EXPECT_EQ(render("{{ messages[0]['role'] }}", {{"messages", Value::from_list({})}}),
            "ERROR: line 1, column 15: cannot read an item of 'messages[0]': it is undefined");
  EXPECT_TRUE(renders_error("{{ messages[0] }}", "cannot read an item of 'messages': it is undefined"));
  EXPECT_TRUE(renders_error("{{ missing + 1 }}", "unsupported operand types for +: 'Undefined' and 'int'"));
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("{{ '  a b \n' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}"),
            "a b|a|ABC|abc");
  EXPECT_EQ(render("{{ 'hello world' | capitalize }}|{{ 'hello world' | title }}|{{ 'a-b-a' | replace('a', 'x') }}"),
            "Hello world|Hello World|x-b-x");
  EXPECT_EQ(render("{{ 'h\u00e9llo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }}"), "5 2 1");
  EXPECT_EQ(render("{{ 3 | string ~ 'x' }} {{ '<a>' | e }} {{ 'x' | safe }}"), "3x &lt;a&gt; x");
  EXPECT_EQ(render("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"), "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }} {{ ' 7.8 ' | int }} {{ 'x' | int(-1) }}"),
            "43 0 3 7 -1");
  EXPECT_EQ(render("{{ '2.5' | float }} {{ '+1e2' | float }} {{ 'x' | float }} {{ 2.567 | round(2) }} {{ 2.5 | round(0, 'floor') }}"),
            "2.5 100.0 0.0 2.57 2.0");
}

TEST(JinjaFilters, Default) {
  EXPECT_EQ(render("{{ missing | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ none | d('x') }}"),
            "d||d|None");
}

TEST(JinjaFilters, ToJsonMatchesPythonJsonDumps) {
  EXPECT_EQ(render(R"({{ {'a': [1, 2.5], 'b': 'x"y\n', 'c': none, 'd': true, 'e': {}} | tojson }})"),
            R"({"a": [1, 2.5], "b": "x\"y\n", "c": null, "d": true, "e": {}})");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1]} | tojson(indent=2, sort_keys=true) }}"), "{\n  \"a\": [\n    1\n  ],\n  \"b\": 1\n}");
  EXPECT_EQ(render("{{ 'caf\u00e9' | tojson }}{{ [] | tojson }}"), "\"caf\xC3\xA9\"[]");  // ensure_ascii=False, as HF
  EXPECT_EQ(render("{{ {'a': 1} | tojson(separators=[',', ':']) }}"), "{\"a\":1}");
  EXPECT_TRUE(renders_error("{{ missing | tojson }}", "not JSON serializable"));
}

TEST(JinjaFilters, Lists) {
  EXPECT_EQ(render("{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }}"),
            "[1, 2, 3] [3, 2, 1] ['A', 'b', 'c']");
  EXPECT_EQ(render("{{ [1, 2] | join(', ') }}|{{ [1, 2] | first }}|{{ [1, 2] | last }}|{{ 'ab' | list }}|{{ [1, 2] | reverse | list }}"),
            "1, 2|1|2|['a', 'b']|[2, 1]");
  EXPECT_EQ(render("{{ [1, 2, 1, 3] | unique | list }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2, 3] | sum }}"),
            "[1, 2, 3] 1 3 6");
  // (Pairs are tuples in Python; they are lists here, so print their parts, not the pairs.)
  EXPECT_EQ(render("{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %} "
                   "{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}"),
            "b1a2 a2b1");
  EXPECT_EQ(render("{{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3, 4] | reject('even') | list }}"), "[2, 4] [1, 3]");
  EXPECT_EQ(render("{{ [0, 1, '', 'a'] | select | list }}"), "[1, 'a']");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }}"), "AB");
}

TEST(JinjaFilters, AttributeSelection) {
  const Dict globals = conversation();
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}", globals),
            "[' Hi ']");
  EXPECT_EQ(render("{{ messages | rejectattr('role', 'in', ['system', 'user']) | map(attribute='role') | join }}", globals),
            "assistant");
  EXPECT_EQ(render("{{ messages | map(attribute='missing', default='-') | join }}", globals), "---");
  EXPECT_EQ(render("{{ none | selectattr('type', 'equalto', 'x') | list }}"), "[]");  // as Jinja: none selects nothing
}

TEST(JinjaTests, TypeAndValueTests) {
  EXPECT_EQ(render("{{ 'a' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}"),
            "True True True True True");
  EXPECT_EQ(render("{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ [] is sequence }}"),
            "True True True False True");
  EXPECT_EQ(render("{{ none is none }} {{ 1 is not none }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }}"),
            "True True True True True");
  EXPECT_EQ(render("{{ 'a' is equalto 'a' }} {{ 2 is in [1, 2] }} {{ 'abc' is lower }} {{ 'ABC' is upper }}"),
            "True True True True");
  EXPECT_EQ(render("{{ raise_exception is defined }} {{ strftime_now is defined }} {{ nothing is defined }}"),
            "True True False");
}

TEST(JinjaMethods, StringMethods) {
  EXPECT_EQ(render("{{ '  x '.strip() }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ 'xxaxx'.strip('x') }}"),
            "x|x |  x|a");
  EXPECT_EQ(render("{{ 'a b  c'.split() }} {{ 'a,b,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }}"),
            "['a', 'b', 'c'] ['a', 'b', 'c'] ['a', 'b,c']");
  EXPECT_EQ(render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.startswith('lo') }}"),
            "True True False");
  EXPECT_EQ(render("{{ 'Ab'.upper() }}{{ 'Ab'.lower() }} {{ 'a-a'.replace('a', 'b') }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }}"),
            "ABab b-b 2 2");
  EXPECT_EQ(render("{{ '{} and {}'.format(1, 'x') }} {{ '{name}!'.format(name='hi') }} {{ ', '.join(['a', 'b']) }}"),
            "1 and x hi! a, b");
  EXPECT_TRUE(renders_error("{{ 'x'.nosuchmethod() }}", "'str' object has no method 'nosuchmethod'"));
}

TEST(JinjaMethods, DictMethods) {
  EXPECT_EQ(render("{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }}"), "1 None 2");
  EXPECT_EQ(render("{{ {'a': 1, 'b': 2}.items() | length }} {{ {'a': 1}.keys() | list }} {{ {'a': 1}.values() | list }}"),
            "2 ['a'] [1]");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
}

TEST(JinjaStatements, IfElifElse) {
  const char* source = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(source, {{"x", Value::from_int(1)}}), "one");
  EXPECT_EQ(render(source, {{"x", Value::from_int(2)}}), "two");
  EXPECT_EQ(render(source, {{"x", Value::from_int(3)}}), "many");
}

TEST(JinjaStatements, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}{{ loop.length }}{{ loop.revindex }};{% endfor %}"),
            "01aF33;12b32;23cL31;");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}"), "-2;1-3;2-;");
  EXPECT_EQ(render("{% for c in 'ab' %}{{ c }}.{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}"), "a.b.xy");
  EXPECT_EQ(render("{% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 7, 2) %}{{ i }}{% endfor %} "
                   "{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}"),
            "012 135 321");
}

TEST(JinjaStatements, ForLoopFilterElseBreakContinue) {
  // loop.last refers to the filtered sequence, as in Jinja.
  EXPECT_EQ(render("{% for x in range(6) if x is even %}{{ x }}{% if loop.last %}!{% endif %}{% endfor %}"), "024!");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "012");
  EXPECT_EQ(render("{% for x in range(4) %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "02");
  EXPECT_EQ(render("{% for row in [[1, 2], [3]] %}{% for x in row %}{{ loop.index }}{{ x }}{% endfor %}|{% endfor %}"),
            "1122|13|");
}

TEST(JinjaStatements, ScopingAndNamespaces) {
  // set inside a loop stays inside it; set inside an if does not open a scope.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in range(3) %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% if true %}{% set x = 5 %}{% endif %}{{ x }}"), "5");
  EXPECT_EQ(render("{% set ns = namespace(total=0, found=false) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}"
                   "{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.found }}"),
            "6 True");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.index = 0 %}{% set ns.index = ns.index + 1 %}{{ ns.index }}"), "1");
  EXPECT_TRUE(renders_error("{% set x = 1 %}{% set x.y = 2 %}", "'x' is not a namespace"));
  EXPECT_EQ(render("{% set messages = messages[1:] %}{{ messages | length }}", conversation()), "2");
}

TEST(JinjaStatements, BlockSetAndMacros) {
  EXPECT_EQ(render("{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]"), "[a2b]");
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}"),
            "Hi Ann! Hi Bo? Hi Cy!");
  EXPECT_EQ(render("{% macro count(n) %}{% if n > 0 %}{{ n }}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}"),
            "321");
  EXPECT_EQ(render("{% macro m() %}x{% endmacro %}{{ m is defined }}"), "True");
  EXPECT_TRUE(renders_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "macro 'm' takes 1 arguments, 2 given"));
  EXPECT_TRUE(renders_error("{{ nosuch(1) }}", "'nosuch' is not a function or macro"));
}

TEST(JinjaStatements, RaiseException) {
  EXPECT_TRUE(renders_error("ok{{ raise_exception('Bad roles') }}", "line 1, column 6: Bad roles"));
}

TEST(JinjaWhitespace, ExplicitControl) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(render("a {#- comment -#} b"), "ab");
}

TEST(JinjaWhitespace, TrimBlocksAndLstripBlocks) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one.
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\ny"), "x\ny");
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n"), "  x\n");
  EXPECT_EQ(render("{% for i in range(2) %}\n    {{ i }}\n{% endfor %}\n"), "    0\n    1\n");
  EXPECT_EQ(render("  {# note #}\nx"), "x");
  // Output tags are not lstripped, and text before a tag on the same line stays.
  EXPECT_EQ(render("  {{ 'x' }}\n"), "  x");
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
  // '+' turns trimming and lstripping off.
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
}

TEST(JinjaWhitespace, NewlinesAreNormalisedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(render("a\r\nb\n"), "a\nb");
  EXPECT_EQ(render("a\n\n"), "a\n");
}

TEST(JinjaStatements, GenerationBlocksRenderTheirBody) {
  EXPECT_EQ(render("{% generation %}answer{% endgeneration %}"), "answer");
}

}  // namespace
}  // namespace mnemo::jinja
