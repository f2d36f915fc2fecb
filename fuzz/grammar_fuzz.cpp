// libFuzzer target for what constrained decoding and tool calling read from requests and model
// output: the first byte picks a part, the rest is the input.
//   0: a regex pattern (up to the first NUL) compiled anchored and not, then the rest matched
//      byte by byte (a match must agree with matches());
//   1: a JSON Schema (up to the first NUL) compiled, then the rest fed to its matcher (a set when
//      it has anyOf): a document it completes must parse as JSON;
//   2: model output parsed as a reply in each tool format; every call's arguments must be text;
//   3: a GBNF grammar (up to the first NUL) compiled, then the rest fed to its matcher byte by
//      byte: a refused byte leaves the state as it was (the rest still matches as before).
// Never a crash, a hang or a sanitizer report.
//   build/fuzz/fuzz/grammar_fuzz -dict=fuzz/openai.dict -max_len=2048 CORPUS
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"
#include "grammar/gbnf_matcher.h"
#include "grammar/schema_matcher_set.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "grammar_fuzz: %s\n", what);
  std::abort();
}

void regex(std::string_view pattern, std::string_view text) {
  for (const bool anchored : {true, false}) {
    auto compiled = mnemo::grammar::Regex::compile(pattern, anchored);
    if (!compiled.ok()) continue;
    auto states = compiled->start();
    bool alive = true;
    for (const char c : text) {
      states = compiled->step(states, static_cast<uint8_t>(c));
      if (mnemo::grammar::Regex::empty(states)) {
        alive = false;
        break;
      }
    }
    if ((alive && compiled->accepts(states)) != compiled->matches(text)) fail("step and matches disagree");
  }
}

void schema(std::string_view source, std::string_view document) {
  const nlohmann::json parsed = nlohmann::json::parse(source, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
  if (parsed.is_discarded()) return;
  auto compiled = mnemo::grammar::compile_schema(parsed);
  if (!compiled.ok()) return;
  mnemo::grammar::SchemaMatcherSet matcher(&*compiled);
  for (const char c : document) {
    if (!matcher.feed(static_cast<uint8_t>(c))) return;
  }
  if (matcher.complete() && nlohmann::json::parse(document, nullptr, false).is_discarded()) fail("a complete document is not JSON");
}

void reply(std::string_view text) {
  for (const auto format : {mnemo::ToolFormat::kGeneric, mnemo::ToolFormat::kHermes, mnemo::ToolFormat::kLlama3,
                            mnemo::ToolFormat::kMistral}) {
    for (const bool envelope : {false, true}) {
      const mnemo::ParsedReply parsed = mnemo::parse_reply(format, envelope, text);
      for (const mnemo::ToolCall& call : parsed.calls) {
        if (call.id.empty() || call.name.size() > text.size()) fail("a call not from the text");
      }
    }
  }
}

void gbnf(std::string_view text, std::string_view input) {
  auto compiled = mnemo::grammar::Gbnf::compile(text);
  if (!compiled.ok()) return;
  mnemo::grammar::GbnfStacks stacks(&*compiled);
  mnemo::grammar::GbnfMatcher m(&stacks);
  for (const char c : input) {
    mnemo::grammar::GbnfMatcher before = m;
    if (!m.advance(static_cast<uint8_t>(c))) {
      // Unchanged: what it completes and what its next byte does are as before.
      if (m.complete() != before.complete()) fail("a refused byte changed the state");
      continue;
    }
  }
  (void)m.complete();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = input.find('\0');
  const std::string_view head = input.substr(0, nul);
  const std::string_view rest = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  switch (data[0] % 4) {
    case 0: regex(head, rest); break;
    case 1: schema(head, rest); break;
    case 2: reply(input); break;
    default: gbnf(head, rest); break;
  }
  return 0;
}
