// Broken or unsupported tokenizer metadata gives an Error that names the problem, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_support.h"

namespace mnemo {
namespace {

using ::testing::HasSubstr;
using tokenizer_test::SpmVocabSpec;

void expect_refused(const gguf::Writer& writer, const std::string& problem) {
  const auto tokenizer = tokenizer_test::tokenizer_from(writer);
  ASSERT_FALSE(tokenizer.ok()) << "expected an error about: " << problem;
  EXPECT_THAT(tokenizer.error().message(), HasSubstr(problem));
  EXPECT_THAT(tokenizer.error().message(), HasSubstr("tiny.gguf"));
}

gguf::Writer valid_spm() {
  SpmVocabSpec spec;
  spec.pieces = {{"a", -1.0F}};
  return tokenizer_test::spm_writer(spec);
}

TEST(MalformedTokenizer, ValidBaselinesLoad) {
  EXPECT_TRUE(tokenizer_test::tokenizer_from(valid_spm()).ok());
  EXPECT_TRUE(tokenizer_test::tokenizer_from(tokenizer_test::bpe_writer({"a b"}, {})).ok());
}

TEST(MalformedTokenizer, MissingOrUnsupportedModel) {
  gguf::Writer no_model;
  no_model.set_string_array("tokenizer.ggml.tokens", {"a"});
  expect_refused(no_model, "'tokenizer.ggml.model' is missing");

  gguf::Writer bert = valid_spm();
  bert.set_string("tokenizer.ggml.model", "bert");
  expect_refused(bert, "tokenizer model 'bert' is not supported");

  gguf::Writer not_a_string = valid_spm();
  not_a_string.set_u32("tokenizer.ggml.model", 1);
  expect_refused(not_a_string, "tokenizer.ggml.model");
}

TEST(MalformedTokenizer, TokensArray) {
  gguf::Writer missing;
  missing.set_string("tokenizer.ggml.model", "llama");
  expect_refused(missing, "'tokenizer.ggml.tokens' is missing");

  gguf::Writer wrong_type = valid_spm();
  wrong_type.set_i32_array("tokenizer.ggml.tokens", {1, 2, 3});
  expect_refused(wrong_type, "'tokenizer.ggml.tokens' must be an array of strings");

  gguf::Writer not_an_array = valid_spm();
  not_an_array.set_string("tokenizer.ggml.tokens", "abc");
  expect_refused(not_an_array, "'tokenizer.ggml.tokens' must be an array of strings");

  gguf::Writer empty = valid_spm();
  empty.set_string_array("tokenizer.ggml.tokens", {});
  expect_refused(empty, "'tokenizer.ggml.tokens' is empty");

  gguf::Writer duplicate;
  duplicate.set_string("tokenizer.ggml.model", "llama");
  duplicate.set_string_array("tokenizer.ggml.tokens", {"<unk>", "a", "b", "a"});
  duplicate.set_bool("tokenizer.ggml.add_bos_token", false);
  expect_refused(duplicate, "tokens 1 and 3 have the same text 'a'");
}

TEST(MalformedTokenizer, ScoresAndTypes) {
  gguf::Writer short_scores = valid_spm();
  short_scores.set_f32_array("tokenizer.ggml.scores", {0, 0, 0});
  expect_refused(short_scores, "'tokenizer.ggml.scores' has 3 entries for 260 tokens");

  gguf::Writer long_scores = valid_spm();
  long_scores.set_f32_array("tokenizer.ggml.scores", std::vector<float>(261, 0.0F));
  expect_refused(long_scores, "'tokenizer.ggml.scores' has 261 entries for 260 tokens");

  gguf::Writer nan_score = valid_spm();
  std::vector<float> scores(260, 0.0F);
  scores[7] = std::numeric_limits<float>::quiet_NaN();
  nan_score.set_f32_array("tokenizer.ggml.scores", scores);
  expect_refused(nan_score, "score of token 7 is NaN");

  gguf::Writer string_scores = valid_spm();
  string_scores.set_string_array("tokenizer.ggml.scores", std::vector<std::string>(260, "x"));
  expect_refused(string_scores, "'tokenizer.ggml.scores' must be an array of numbers");

  gguf::Writer short_types = valid_spm();
  short_types.set_i32_array("tokenizer.ggml.token_type", {1});
  expect_refused(short_types, "'tokenizer.ggml.token_type' has 1 entries for 260 tokens");

  gguf::Writer float_types = valid_spm();
  float_types.set_f32_array("tokenizer.ggml.token_type", std::vector<float>(260, 1.0F));
  expect_refused(float_types, "'tokenizer.ggml.token_type' must be an array of integers");

  // Unknown type numbers are tolerated as "undefined", as in llama.cpp.
  gguf::Writer odd_types = valid_spm();
  std::vector<int32_t> types(260, 1);
  types[259] = 42;
  odd_types.set_i32_array("tokenizer.ggml.token_type", types);
  const auto tokenizer = tokenizer_test::tokenizer_from(odd_types);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message();
  EXPECT_EQ((*tokenizer)->token_type(259), TokenType::kUndefined);
  EXPECT_EQ((*tokenizer)->token_to_piece(259, true), "");
}

TEST(MalformedTokenizer, SpecialTokenIds) {
  gguf::Writer bos_out_of_range = valid_spm();
  bos_out_of_range.set_u32("tokenizer.ggml.bos_token_id", 260);
  expect_refused(bos_out_of_range, "'tokenizer.ggml.bos_token_id' = 260 is not a token id");

  gguf::Writer negative_eos = valid_spm();
  negative_eos.set_i32("tokenizer.ggml.eos_token_id", -1);
  expect_refused(negative_eos, "'tokenizer.ggml.eos_token_id' = -1 is not a token id");

  gguf::Writer eot_out_of_range = valid_spm();
  eot_out_of_range.set_u32("tokenizer.ggml.eot_token_id", 1000000);
  expect_refused(eot_out_of_range, "'tokenizer.ggml.eot_token_id' = 1000000 is not a token id");

  gguf::Writer bos_wrong_type = valid_spm();
  bos_wrong_type.set_string("tokenizer.ggml.bos_token_id", "1");
  expect_refused(bos_wrong_type, "tokenizer.ggml.bos_token_id");

  gguf::Writer add_bos_wrong_type = valid_spm();
  add_bos_wrong_type.set_string("tokenizer.ggml.add_bos_token", "yes");
  expect_refused(add_bos_wrong_type, "tokenizer.ggml.add_bos_token");

  // SentencePiece adds BOS by default, but a one-token vocabulary has no token 1 for it.
  gguf::Writer no_bos;
  no_bos.set_string("tokenizer.ggml.model", "llama");
  no_bos.set_string_array("tokenizer.ggml.tokens", {"a"});
  expect_refused(no_bos, "add_bos_token is set but the vocabulary has no BOS token");

  gguf::Writer add_eos_without_eos = tokenizer_test::bpe_writer({}, {});
  add_eos_without_eos.set_bool("tokenizer.ggml.add_eos_token", true);
  expect_refused(add_eos_without_eos, "add_eos_token is set but the vocabulary has no EOS token");
}

TEST(MalformedTokenizer, BpeMergesAndPreTokenizer) {
  gguf::Writer no_merges = tokenizer_test::bpe_writer({}, {});
  no_merges.set_string("tokenizer.ggml.merges", "not an array");
  expect_refused(no_merges, "'tokenizer.ggml.merges' must be an array of strings");

  gguf::Writer missing_merges;
  missing_merges.set_string("tokenizer.ggml.model", "gpt2");
  missing_merges.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  expect_refused(missing_merges, "'tokenizer.ggml.merges' is missing");

  gguf::Writer unknown_side = tokenizer_test::bpe_writer({"a b"}, {});
  unknown_side.set_string_array("tokenizer.ggml.merges", {"a b", "ab zz"});
  expect_refused(unknown_side, "merge 1 'ab zz' refers to 'zz', which is not a token");

  gguf::Writer no_space = tokenizer_test::bpe_writer({"a b"}, {});
  no_space.set_string_array("tokenizer.ggml.merges", {"ab"});
  expect_refused(no_space, "merge 0 'ab' is not two tokens separated by a space");

  gguf::Writer empty_merge = tokenizer_test::bpe_writer({"a b"}, {});
  empty_merge.set_string_array("tokenizer.ggml.merges", {""});
  expect_refused(empty_merge, "merge 0 '' is not two tokens separated by a space");

  gguf::Writer unknown_pre = tokenizer_test::bpe_writer({}, {}, "chatglm-bpe");
  expect_refused(unknown_pre, "pre-tokenizer 'chatglm-bpe' (tokenizer.ggml.pre) is not supported");
}

}  // namespace
}  // namespace mnemo
