// StreamingDetokenizer and the UTF-8 helpers behind it: only whole characters are emitted,
// whatever the token boundaries.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_support.h"

namespace mnemo {
namespace {

using tokenizer::sanitize_utf8;
using tokenizer::utf8_complete_prefix_length;
using Tokens = std::vector<TokenId>;

constexpr TokenId byte_token(uint8_t byte) { return 3 + byte; }

std::unique_ptr<Tokenizer> byte_fallback_tokenizer() {
  tokenizer_test::SpmVocabSpec spec;
  spec.pieces = {{"a", -1.0F}, {"\xE2\x96\x81", -1.0F}};
  gguf::Writer writer = tokenizer_test::spm_writer(spec);
  writer.set_bool("tokenizer.ggml.add_space_prefix", false);
  auto tokenizer = tokenizer_test::tokenizer_from(writer);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.error().message();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

TEST(Utf8, CompletePrefixHoldsBackOnlyTruncatedCharacters) {
  EXPECT_EQ(utf8_complete_prefix_length(""), 0U);
  EXPECT_EQ(utf8_complete_prefix_length("abc"), 3U);
  EXPECT_EQ(utf8_complete_prefix_length("ab\xE2\x82"), 2U);          // € missing its last byte
  EXPECT_EQ(utf8_complete_prefix_length("\xF0\x9F\xA6"), 0U);        // 🦙 missing one byte
  EXPECT_EQ(utf8_complete_prefix_length("\xF0\x9F\xA6\x99"), 4U);    // complete
  EXPECT_EQ(utf8_complete_prefix_length("a\xC3"), 1U);
  EXPECT_EQ(utf8_complete_prefix_length("a\x80"), 2U);               // can never complete
  EXPECT_EQ(utf8_complete_prefix_length("a\xE2\x41"), 3U);           // broken, not truncated
  EXPECT_EQ(utf8_complete_prefix_length("a\xC0"), 2U);               // C0 never starts a character
  EXPECT_EQ(utf8_complete_prefix_length("a\xED\xA0"), 3U);           // would be a surrogate
}

TEST(Utf8, SanitizeReplacesIllFormedSubsequences) {
  EXPECT_EQ(sanitize_utf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(sanitize_utf8("a\xE2\x82"), "a\xEF\xBF\xBD");  // one U+FFFD for the truncated character
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("\xFF" "b"), "\xEF\xBF\xBD" "b");
}

TEST(StreamingDetokenizer, HoldsBackCharactersSplitAcrossByteTokens) {
  const auto tokenizer = byte_fallback_tokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "a\xC3\xA9" "a\xF0\x9F\xA6\x99\xE2\x82\xAC" "a";  // aéa🦙€a
  const Tokens tokens = tokenizer->encode(text, true, false);
  ASSERT_EQ(tokens.size(), 1 + 1 + 2 + 1 + 4 + 3 + 1U);

  StreamingDetokenizer stream(*tokenizer);
  std::vector<std::string> pieces;
  for (const TokenId token : tokens) pieces.push_back(stream.push(token));
  EXPECT_EQ(stream.flush(), "");
  const std::vector<std::string> expected = {"", "a", "", "\xC3\xA9", "a", "", "", "", "\xF0\x9F\xA6\x99", "", "",
                                             "\xE2\x82\xAC", "a"};
  EXPECT_EQ(pieces, expected);
  std::string joined;
  for (const std::string& piece : pieces) joined += piece;
  EXPECT_EQ(joined, tokenizer->decode(tokens));
}

TEST(StreamingDetokenizer, ReplacesBytesThatCanNeverFormACharacter) {
  const auto tokenizer = byte_fallback_tokenizer();
  ASSERT_NE(tokenizer, nullptr);
  StreamingDetokenizer stream(*tokenizer);
  EXPECT_EQ(stream.push(byte_token(0x80)), "\xEF\xBF\xBD");  // stray continuation byte: at once
  EXPECT_EQ(stream.push(byte_token(0xE2)), "");
  EXPECT_EQ(stream.push(byte_token(0x82)), "");
  EXPECT_EQ(stream.push(byte_token('a')), "\xEF\xBF\xBD" "a");  // the € never completed
  EXPECT_EQ(stream.push(byte_token(0xF0)), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // what is left at the end
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamingDetokenizer, ControlTokensOnlyWhenSpecial) {
  const auto tokenizer = byte_fallback_tokenizer();
  ASSERT_NE(tokenizer, nullptr);
  StreamingDetokenizer plain(*tokenizer);
  StreamingDetokenizer special(*tokenizer, /*special=*/true);
  EXPECT_EQ(plain.push(2), "");
  EXPECT_EQ(special.push(2), "</s>");
}

TEST(StreamingDetokenizer, EveryPrefixOfRandomByteStreamsIsValid) {
  const auto tokenizer = byte_fallback_tokenizer();
  ASSERT_NE(tokenizer, nullptr);
  uint32_t state = 99;
  for (int round = 0; round < 200; ++round) {
    StreamingDetokenizer stream(*tokenizer);
    for (int i = 0; i < 40; ++i) {
      state = state * 1664525U + 1013904223U;
      const std::string piece = stream.push(byte_token(static_cast<uint8_t>(state >> 24)));
      ASSERT_TRUE(tokenizer_test::is_valid_utf8(piece));
    }
    ASSERT_TRUE(tokenizer_test::is_valid_utf8(stream.flush()));
  }
}

}  // namespace
}  // namespace mnemo
