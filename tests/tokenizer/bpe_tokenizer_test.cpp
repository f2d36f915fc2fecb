// Byte-level BPE on small in-memory vocabularies (merge ranks, byte alphabet, decode clean-up),
// and the pre-tokenizer's word splitting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_support.h"

namespace mnemo {
namespace {

using Tokens = std::vector<TokenId>;
using tokenizer::PreTokenizer;
using tokenizer::PreTokenizerKind;

// Byte-level vocabularies start with the 256 byte characters in byte order.
constexpr TokenId byte_token(char byte) { return static_cast<uint8_t>(byte); }

std::unique_ptr<Tokenizer> make(const gguf::Writer& writer) {
  auto tokenizer = tokenizer_test::tokenizer_from(writer);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.error().message();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

TEST(BpeTokenizer, MergesByRank) {
  // Tokens 256.. are the merge results: "bc" (rank 0), "ab" (1), "abc" (2, unreachable from bc).
  const auto tokenizer = make(tokenizer_test::bpe_writer({"b c", "a b", "ab c"}, {}));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->encode("abc", false, false), (Tokens{byte_token('a'), 256}));
  EXPECT_EQ(tokenizer->encode("ab", false, false), Tokens{257});
  EXPECT_EQ(tokenizer->model_name(), "gpt2");
}

TEST(BpeTokenizer, WorksOnGpt2ByteCharacters) {
  // A space is "Ġ" (U+0120) in the byte alphabet; merges are written in it.
  const auto tokenizer = make(tokenizer_test::bpe_writer({"\xC4\xA0 a", "\xC4\xA0" "a b"}, {}));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->encode(" ab", false, false), Tokens{257});
  EXPECT_EQ(tokenizer->token_to_piece(257, false), " ab");
  // Every byte has a token, so any input (even invalid UTF-8, which becomes U+FFFD first, as in
  // llama.cpp) encodes and decodes.
  EXPECT_EQ(tokenizer->encode("\xC3\xA9", false, false), (Tokens{0xC3, 0xA9}));
  EXPECT_EQ(tokenizer->decode(tokenizer->encode("\xFF", false, false)), "\xEF\xBF\xBD");
}

TEST(BpeTokenizer, CleansUpSpacesInDecodeAsLlamaCpp) {
  const auto gpt2 = make(tokenizer_test::bpe_writer({}, {}, "gpt-2"));
  ASSERT_NE(gpt2, nullptr);
  EXPECT_TRUE(gpt2->detokenize_rules().clean_up_spaces);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Hello , world !", "Hello, world!"}, {"a ? b . c", "a? b. c"},   {"x ' y", "x'y"},
      {"it 's I 'm", "it's I'm"},            {"you 're we 've", "you're we've"},
      {"he 'll do n't she 'd", "he 'll do n't she 'd"},                  {" ?", "?"},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(gpt2->decode(gpt2->encode(text, false, false)), expected) << text;

  const auto qwen2 = make(tokenizer_test::bpe_writer({}, {}, "qwen2"));
  ASSERT_NE(qwen2, nullptr);
  EXPECT_FALSE(qwen2->detokenize_rules().clean_up_spaces);
  EXPECT_EQ(qwen2->decode(qwen2->encode("Hello , world !", false, false)), "Hello , world !");
}

TEST(BpeTokenizer, ControlTokensAndEndOfGeneration) {
  const auto tokenizer = make(tokenizer_test::bpe_writer({}, {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->encode("<|im_start|>x<|im_end|>", false, true), (Tokens{256, byte_token('x'), 257}));
  EXPECT_FALSE(tokenizer->is_end_of_generation(256));
  EXPECT_TRUE(tokenizer->is_end_of_generation(257));
  EXPECT_TRUE(tokenizer->is_end_of_generation(258));
  EXPECT_EQ(tokenizer->decode(Tokens{256, byte_token('x'), 257}), "x");
  EXPECT_EQ(tokenizer->decode(Tokens{256, byte_token('x'), 257}, true), "<|im_start|>x<|im_end|>");
  // No BOS/EOS in the metadata: none, and add_special adds nothing (gpt-2 does not add BOS).
  EXPECT_EQ(tokenizer->bos(), -1);
  EXPECT_EQ(tokenizer->eos(), -1);
  EXPECT_EQ(tokenizer->encode("x", true, false), Tokens{byte_token('x')});
}

std::vector<std::string> words_of(PreTokenizerKind kind, std::string_view text) {
  auto pre_tokenizer = PreTokenizer::create(kind);
  EXPECT_TRUE(pre_tokenizer.ok()) << pre_tokenizer.error().message();
  const std::vector<char32_t> codepoints = tokenizer::decode_codepoints_lenient(text);
  std::vector<std::string> words;
  size_t begin = 0;
  for (const size_t length : pre_tokenizer->split(codepoints)) {
    std::string word;
    for (size_t i = begin; i < begin + length; ++i) tokenizer::append_utf8(word, codepoints[i]);
    words.push_back(word);
    begin += length;
  }
  return words;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2Rules) {
  EXPECT_EQ(words_of(PreTokenizerKind::kGpt2, "Hello world's  123 !!"),
            (Words{"Hello", " world", "'s", " ", " 123", " !!"}));
  EXPECT_EQ(words_of(PreTokenizerKind::kGpt2, "   x"), (Words{"  ", " x"}));
  EXPECT_EQ(words_of(PreTokenizerKind::kGpt2, "It'S"), (Words{"It", "'", "S"}));  // case-sensitive
  EXPECT_EQ(words_of(PreTokenizerKind::kGpt2, "caf\xC3\xA9 \xD0\xB6\xD0\xB8"), (Words{"caf\xC3\xA9", " \xD0\xB6\xD0\xB8"}));
}

TEST(PreTokenizer, Llama3AndQwen2Rules) {
  EXPECT_EQ(words_of(PreTokenizerKind::kLlama3, "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(words_of(PreTokenizerKind::kQwen2, "123"), (Words{"1", "2", "3"}));
  EXPECT_EQ(words_of(PreTokenizerKind::kLlama3, "It'S a\n\n b"), (Words{"It", "'S", " a", "\n\n", " b"}));
  EXPECT_EQ(words_of(PreTokenizerKind::kLlama3, "(x) ...\n\ny"), (Words{"(x", ")", " ...\n\n", "y"}));
  // Unicode White_Space (NBSP, ideographic space) counts as whitespace.
  EXPECT_EQ(words_of(PreTokenizerKind::kLlama3, "a\xC2\xA0\xC2\xA0" "b"), (Words{"a", "\xC2\xA0", "\xC2\xA0" "b"}));
}

TEST(PreTokenizer, RegexStepsOfTheDefaultRules) {
  // Punctuation runs split first, then GPT-2's rules, then digit runs and triples.
  EXPECT_EQ(words_of(PreTokenizerKind::kDefault, "a,b 12345"), (Words{"a", ",", "b", " ", "123", "45"}));
  EXPECT_EQ(words_of(PreTokenizerKind::kStarCoder, "x12 y"), (Words{"x", "1", "2", " y"}));
}

TEST(BpeTokenizer, RandomInputNeverCrashes) {
  const auto tokenizer = make(tokenizer_test::bpe_writer({"a b", "\xC4\xA0 ab"}, {"<|x|>"}, "qwen2"));
  ASSERT_NE(tokenizer, nullptr);
  uint32_t state = 777;
  auto next = [&]() { return state = state * 1664525U + 1013904223U; };
  const std::vector<std::string> alphabet = {"a", "b", "1", " ", "\n", "\r", "'", "s", "<|x|>", "\xC3\xA9", "\xF0\x9F\xA6\x99",
                                             "\xE3\x80\x80", ".", "\t"};
  for (int round = 0; round < 500; ++round) {
    std::string text;
    const uint32_t length = next() % 30;
    for (uint32_t i = 0; i < length; ++i) text += alphabet[(next() >> 8) % alphabet.size()];
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false, true), true), text);
  }
}

}  // namespace
}  // namespace mnemo
