// A server-sent event's JSON: U+2028 and U+2029 escaped (a Unicode-aware line splitter would break
// the line there), everything else as nlohmann writes it, and the same value read back.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "server/sse_json.h"

namespace mnemo {
namespace {

TEST(SseJson, LineAndParagraphSeparatorsAreEscapedAndReadBackTheSame) {
  const nlohmann::json payload = {{"text", "a\u2028b\u2029c"}, {"more", {"\u2028"}}};
  const std::string line = sse_json(payload);
  EXPECT_EQ(line.find("\xE2\x80\xA8"), std::string::npos);
  EXPECT_EQ(line.find("\xE2\x80\xA9"), std::string::npos);
  EXPECT_EQ(line, R"({"more":["\u2028"],"text":"a\u2028b\u2029c"})");
  EXPECT_EQ(nlohmann::json::parse(line), payload);
}

TEST(SseJson, OtherCharactersStayAsTheyAre) {
  // "…" is E2 80 A6 and "€" E2 82 AC: neighbours of the separators' bytes.
  const nlohmann::json payload = {{"text", "\u2026 \u20ac \u2027\u202a \n"}};
  EXPECT_EQ(sse_json(payload), payload.dump());
  // Invalid UTF-8 is replaced, as before.
  EXPECT_EQ(sse_json(nlohmann::json{{"t", std::string("a\xff")}}), "{\"t\":\"a\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace mnemo
