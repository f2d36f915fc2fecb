// Helpers of the schema matchers' tests: a schema compiled (a test failure if it does not), how
// many bytes of a text a matcher takes, and whether it takes the text as a whole document.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"

namespace mnemo::grammar {

inline CompiledSchema compiled(const nlohmann::json& schema) {
  auto c = compile_schema(schema);
  EXPECT_TRUE(c.ok()) << c.error().message();
  return c.ok() ? std::move(*c) : CompiledSchema{};
}

template <class Matcher>
size_t accepted_prefix_with(const CompiledSchema& schema, const std::string& text) {
  Matcher m(&schema);
  size_t i = 0;
  while (i < text.size() && m.feed(static_cast<uint8_t>(text[i]))) ++i;
  return i;
}

template <class Matcher>
bool completes_with(const CompiledSchema& schema, const std::string& text) {
  Matcher m(&schema);
  return m.feed(text) && m.complete();
}

}  // namespace mnemo::grammar
