// libFuzzer target for bounded JSON parsing (util/bounded_json.h), the gate for JSON from outside
// the process: the first byte picks a nesting limit (1-64), the rest is the text. parse_bounded_json
// must answer a value or an Error, never throw; a value must be nested no deeper than the limit
// (the depth scan never under-counts what the parser builds), and must survive what the rest of
// the code does with values recursively (copy, compare, dump), dumping to text that parses back to
// the same value within the same limit.
// Seeds: fuzz/corpus/openai; dictionary: fuzz/openai.dict.
//   build/fuzz/fuzz/bounded_json_fuzz fuzz/corpus/openai -dict=fuzz/openai.dict -max_len=4096 -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/bounded_json.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "bounded_json_fuzz: %s\n", what);
  std::abort();
}

// The nesting depth of a value, without recursion (a value deeper than the limit must not
// overflow the checker's stack before it can say so).
int depth_of(const nlohmann::json& root) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::json*, int>> stack{{&root, 0}};
  while (!stack.empty()) {
    const auto [value, depth] = stack.back();
    stack.pop_back();
    if (!value->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    for (const auto& child : *value) stack.emplace_back(&child, depth + 1);
  }
  return deepest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const mnemo::JsonLimits limits{.max_bytes = size_t{1} << 20, .max_depth = 1 + data[0] % 64};
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  // The scan alone, with every limit around the text's own depth.
  const int depth = mnemo::json_nesting_depth(text, 1 << 30);
  if (depth < 0 || static_cast<size_t>(depth) > text.size()) fail("a depth beyond the text");
  if (mnemo::json_nesting_depth(text, depth) != depth) fail("the scan stops early at its own depth");
  if (depth > 0 && mnemo::json_nesting_depth(text, depth - 1) != depth) fail("the scan stops somewhere other than past the limit");

  auto parsed = mnemo::parse_bounded_json(text, limits);
  if (!parsed.ok()) {
    if (parsed.error().message().empty()) fail("an error without a message");
    return 0;
  }
  if (depth_of(*parsed) > limits.max_depth) fail("a value nested deeper than the limit was accepted");
  if (depth_of(*parsed) > depth) fail("the scan under-counted the depth");

  const nlohmann::json copy = *parsed;  // recursive copy
  if (copy != *parsed) fail("a copy differs");  // recursive compare
  const std::string dumped = copy.dump();  // recursive dump; strict: the parser let no invalid UTF-8 in
  auto again = mnemo::parse_bounded_json(dumped, limits);
  if (!again.ok()) fail("a dumped value does not parse back");
  if (*again != *parsed) fail("a dumped value parses back to another value");
  (void)copy.dump(2);  // indented too
  return 0;
}
