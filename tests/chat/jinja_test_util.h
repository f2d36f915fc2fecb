// Renders a template string straight through the Jinja layer, for the language tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "chat/jinja_eval.h"
#include "chat/jinja_parser.h"

namespace mnemo::jinja::testing {

// The rendered text, or "ERROR: <message>" for a parse or render error.
inline std::string render(std::string_view source, const Dict& globals = {}, const Limits& limits = Limits{}) {
  auto body = parse_template(source);
  if (!body.ok()) return "ERROR: " + body.error().message();
  auto text = render_template(*body, globals, limits);
  if (!text.ok()) return "ERROR: " + text.error().message();
  return *text;
}

inline ::testing::AssertionResult renders_error(std::string_view source, std::string_view expected_part,
                                                const Limits& limits = Limits{}) {
  const std::string result = render(source, {}, limits);
  if (result.rfind("ERROR: ", 0) != 0) return ::testing::AssertionFailure() << "rendered without error: " << result;
  if (result.find(expected_part) == std::string::npos) {
    return ::testing::AssertionFailure() << "error lacks '" << expected_part << "': " << result;
  }
  return ::testing::AssertionSuccess();
}

inline Value str(std::string text) { return Value::from_string(std::move(text)); }

}  // namespace mnemo::jinja::testing
