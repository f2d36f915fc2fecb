// SentencePiece behaviour on small in-memory vocabularies: merge priority, byte fallback, space
// prefix, special-token splitting, BOS/EOS, pieces.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_support.h"

namespace mnemo {
namespace {

using tokenizer_test::kFirstSpmPiece;
using tokenizer_test::SpmVocabSpec;
using Tokens = std::vector<TokenId>;

constexpr TokenId kUnk = 0;
constexpr TokenId kBos = 1;
constexpr TokenId kEos = 2;
constexpr TokenId byte_token(uint8_t byte) { return 3 + byte; }

// Pieces (ids from kFirstSpmPiece on), then control <ctl>, then user-defined "bcd", "ab", "<ud>".
const SpmVocabSpec kSpec{
    .pieces = {{"\xE2\x96\x81", -1.0F},      // 259 ▁
               {"a", -2.0F},                 // 260
               {"b", -2.0F},                 // 261
               {"c", -2.0F},                 // 262
               {"ab", -0.5F},                // 263
               {"bc", -0.4F},                // 264
               {"\xE2\x96\x81" "a", -0.3F},  // 265 ▁a
               {"abc", -0.1F},               // 266
               {"xx", -1.0F},                // 267
               {"x", -2.0F}},                // 268
    .controls = {"<ctl>"},                   // 269
    .user_defined = {"bcd", "<ud>"},         // 270, 271
};
constexpr TokenId kSpace = kFirstSpmPiece;
constexpr TokenId kA = kFirstSpmPiece + 1;
constexpr TokenId kB = kFirstSpmPiece + 2;
constexpr TokenId kBC = kFirstSpmPiece + 5;
constexpr TokenId kSpaceA = kFirstSpmPiece + 6;
constexpr TokenId kABC = kFirstSpmPiece + 7;
constexpr TokenId kXX = kFirstSpmPiece + 8;
constexpr TokenId kX = kFirstSpmPiece + 9;
constexpr TokenId kCtl = kFirstSpmPiece + 10;
constexpr TokenId kBCD = kFirstSpmPiece + 11;
constexpr TokenId kUd = kFirstSpmPiece + 12;

std::unique_ptr<Tokenizer> make(gguf::Writer writer) {
  auto tokenizer = tokenizer_test::tokenizer_from(writer);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.error().message();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

std::unique_ptr<Tokenizer> make_without_space_prefix() {
  gguf::Writer writer = tokenizer_test::spm_writer(kSpec);
  writer.set_bool("tokenizer.ggml.add_space_prefix", false);
  return make(std::move(writer));
}

TEST(SpmTokenizer, MergesTheBestScoringPairFirst) {
  const auto tokenizer = make_without_space_prefix();
  ASSERT_NE(tokenizer, nullptr);
  // "bc" (-0.4) beats "ab" (-0.5); then "a"+"bc" forms "abc".
  EXPECT_EQ(tokenizer->encode("abc", false, false), Tokens{kABC});
  // Equal scores: the leftmost pair merges first.
  EXPECT_EQ(tokenizer->encode("xxx", false, false), (Tokens{kXX, kX}));
}

TEST(SpmTokenizer, AddsTheSpacePrefixAndEscapesSpaces) {
  const auto tokenizer = make(tokenizer_test::spm_writer(kSpec));  // add_space_prefix defaults to true
  ASSERT_NE(tokenizer, nullptr);
  // "▁abc": "▁a" (-0.3) merges first, then "bc"; "▁abc" is no token.
  EXPECT_EQ(tokenizer->encode("abc", false, false), (Tokens{kSpaceA, kBC}));
  EXPECT_EQ(tokenizer->encode("a a", false, false), (Tokens{kSpaceA, kSpaceA}));
  EXPECT_EQ(tokenizer->decode(tokenizer->encode("a a", false, false)), "a a");  // leading space stripped
  EXPECT_EQ(tokenizer->token_to_piece(kSpaceA, false), " a");
  EXPECT_TRUE(tokenizer->detokenize_rules().strip_leading_space);
  // After a special token the prefix comes again.
  EXPECT_EQ(tokenizer->encode("a<ctl>a", false, true), (Tokens{kSpaceA, kCtl, kSpaceA}));
}

TEST(SpmTokenizer, FallsBackToByteTokens) {
  const auto tokenizer = make_without_space_prefix();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->encode("\xC3\xA9" "a", false, false), (Tokens{byte_token(0xC3), byte_token(0xA9), kA}));
  EXPECT_EQ(tokenizer->token_to_piece(byte_token(0xC3), false), "\xC3");
  EXPECT_EQ(tokenizer->decode(Tokens{byte_token(0xC3), byte_token(0xA9)}), "\xC3\xA9");
  // Invalid UTF-8 is tokenised byte by byte, never dropped.
  EXPECT_EQ(tokenizer->encode("b\x80" "b", false, false), (Tokens{kB, byte_token(0x80), kB}));
}

TEST(SpmTokenizer, AnInvalidLeadByteSwallowsTheNextBytesLikeLlamaCpp) {
  const auto tokenizer = make_without_space_prefix();
  ASSERT_NE(tokenizer, nullptr);
  // llama.cpp sizes a symbol by its first byte alone: 0xFF "starts" four bytes, so "b" and the
  // escaped space after it become byte tokens too, and that space decodes as a literal "▁".
  EXPECT_EQ(tokenizer->encode("\xFF" "b\x80", false, false), (Tokens{byte_token(0xFF), byte_token('b'), byte_token(0x80)}));
  const Tokens tokens = tokenizer->encode("\xFF a", false, false);
  EXPECT_EQ(tokens, (Tokens{byte_token(0xFF), byte_token(0xE2), byte_token(0x96), byte_token(0x81), kA}));
  EXPECT_EQ(tokenizer->decode(tokens), "\xFF\xE2\x96\x81" "a");
}

TEST(SpmTokenizer, TokensSpanningAnEscapedSpaceAreFound) {
  // The merge runs separately between spaces unless some token joins a byte to a following "▁"
  // (Gemma's ">▁</"): such a token must still win.
  SpmVocabSpec spec = kSpec;
  spec.pieces.emplace_back("\xE2\x96\x81" "y", -1.0F);
  spec.pieces.emplace_back("x\xE2\x96\x81" "y", -0.05F);
  gguf::Writer writer = tokenizer_test::spm_writer(spec);
  writer.set_bool("tokenizer.ggml.add_space_prefix", false);
  const auto tokenizer = make(std::move(writer));
  ASSERT_NE(tokenizer, nullptr);
  const TokenId x_space_y = kFirstSpmPiece + static_cast<TokenId>(spec.pieces.size()) - 1;
  EXPECT_EQ(tokenizer->encode("ab x y", false, false), (Tokens{kFirstSpmPiece + 4, kSpace, x_space_y}));
  // Without such a token the pieces stay apart.
  const auto plain = make_without_space_prefix();
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->encode("x a", false, false), (Tokens{kX, kSpaceA}));
}

TEST(SpmTokenizer, AddsBosAndEosAsTheMetadataSays) {
  gguf::Writer writer = tokenizer_test::spm_writer(kSpec);
  writer.set_bool("tokenizer.ggml.add_space_prefix", false);
  writer.set_bool("tokenizer.ggml.add_eos_token", true);
  const auto tokenizer = make(std::move(writer));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->encode("abc", true, false), (Tokens{kBos, kABC, kEos}));
  EXPECT_EQ(tokenizer->encode("abc", false, false), Tokens{kABC});
  EXPECT_EQ(tokenizer->encode("", true, false), (Tokens{kBos, kEos}));
  EXPECT_EQ(tokenizer->encode("", false, false), Tokens{});
  EXPECT_EQ(tokenizer->bos(), kBos);
  EXPECT_EQ(tokenizer->eos(), kEos);
  EXPECT_TRUE(tokenizer->is_end_of_generation(kEos));
  EXPECT_FALSE(tokenizer->is_end_of_generation(kBos));
}

TEST(SpmTokenizer, SplitsSpecialTokensLikeLlamaCpp) {
  const auto tokenizer = make_without_space_prefix();
  ASSERT_NE(tokenizer, nullptr);
  // Control tokens only with parse_special; otherwise their text is tokenised as text.
  EXPECT_EQ(tokenizer->encode("<ctl>", false, true), Tokens{kCtl});
  const Tokens plain = tokenizer->encode("<ctl>", false, false);
  EXPECT_NE(plain, Tokens{kCtl});
  EXPECT_EQ(tokenizer->decode(plain), "<ctl>");
  // User-defined tokens are split out always.
  EXPECT_EQ(tokenizer->encode("<ud>a<ud>", false, false), (Tokens{kUd, kA, kUd}));
  // Longer special texts are claimed first anywhere in the text (not leftmost-first): in "abcd",
  // user-defined "bcd" wins and "a" is left over, although "abc" starts further left.
  EXPECT_EQ(tokenizer->encode("abcd", false, false), (Tokens{kA, kBCD}));
  // The unknown token is special too.
  EXPECT_EQ(tokenizer->encode("<unk>", false, true), Tokens{kUnk});
}

TEST(SpmTokenizer, RendersPieces) {
  const auto tokenizer = make_without_space_prefix();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->token_to_piece(kSpace, false), " ");
  EXPECT_EQ(tokenizer->token_to_piece(kCtl, false), "");
  EXPECT_EQ(tokenizer->token_to_piece(kCtl, true), "<ctl>");
  EXPECT_EQ(tokenizer->token_to_piece(kUd, false), "<ud>");
  EXPECT_EQ(tokenizer->token_to_piece(kUnk, false), "");
  EXPECT_EQ(tokenizer->token_to_piece(kUnk, true), "<unk>");
  EXPECT_EQ(tokenizer->token_to_piece(-5, true), "");
  EXPECT_EQ(tokenizer->token_to_piece(100000, true), "");
  EXPECT_EQ(tokenizer->decode(Tokens{kBos, kABC, kEos}), "abc");
  EXPECT_EQ(tokenizer->decode(Tokens{kBos, kABC, kEos}, true), "<s>abc</s>");
  EXPECT_EQ(tokenizer->token_text(kSpaceA), "\xE2\x96\x81" "a");
  EXPECT_EQ(tokenizer->token_type(kCtl), TokenType::kControl);
  EXPECT_EQ(tokenizer->model_name(), "llama");
}

TEST(SpmTokenizer, RecognisesEndOfTurnTokensByText) {
  SpmVocabSpec spec = kSpec;
  spec.pieces.emplace_back("<end_of_turn>", 0.0F);  // normal type, found by its text
  spec.controls.emplace_back("<|eom_id|>");  // after <ctl>, before the user-defined tokens
  const auto tokenizer = make(tokenizer_test::spm_writer(spec));
  ASSERT_NE(tokenizer, nullptr);
  const TokenId end_of_turn = kFirstSpmPiece + static_cast<TokenId>(kSpec.pieces.size());
  EXPECT_EQ(tokenizer->token_text(end_of_turn), "<end_of_turn>");
  EXPECT_TRUE(tokenizer->is_end_of_generation(end_of_turn));
  // ... and is then treated as a control token, like in llama.cpp.
  EXPECT_EQ(tokenizer->token_to_piece(end_of_turn, false), "");
  EXPECT_EQ(tokenizer->encode("<end_of_turn>", false, true), Tokens{end_of_turn});
  const TokenId end_of_message = end_of_turn + 2;
  EXPECT_EQ(tokenizer->token_text(end_of_message), "<|eom_id|>");
  EXPECT_TRUE(tokenizer->is_end_of_generation(end_of_message));
}

// (Neither "▁", which decodes to a space, nor bytes like 0xFF that swallow their neighbours.)
TEST(SpmTokenizer, RandomInputNeverCrashesAndRoundTrips) {
  const auto tokenizer = make_without_space_prefix();
  ASSERT_NE(tokenizer, nullptr);
  uint32_t state = 12345;
  auto next = [&]() { return state = state * 1664525U + 1013904223U; };
  const std::vector<std::string> alphabet = {"a", "b", "c", "x", " ", "\n", "<ctl>", "<ud>", "bcd", "\xC3\xA9",
                                             "\xF0\x9F\xA6\x99", "\x80", "<", ">"};
  for (int round = 0; round < 500; ++round) {
    std::string text;
    const uint32_t length = next() % 30;
    for (uint32_t i = 0; i < length; ++i) text += alphabet[(next() >> 8) % alphabet.size()];
    const Tokens tokens = tokenizer->encode(text, true, true);
    EXPECT_EQ(tokenizer->decode(tokens, true), "<s>" + text);
  }
}

}  // namespace
}  // namespace mnemo
