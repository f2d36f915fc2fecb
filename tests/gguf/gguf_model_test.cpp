// Known facts about the real default model (scripts/fetch_model.py). Labelled "model": fails,
// rather than skips, when the file is missing, so a missing model cannot pass for a good one.
#include <gtest/gtest.h>

#include "gguf/gguf_file.h"
#include "util/paths.h"

namespace mnemo::gguf {
namespace {

TEST(GgufModel, Gemma3_270mHasItsKnownShape) {
  const std::string path = reference_model_path();
  auto file = File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message() << " (fetch it with scripts/fetch_model.py)";

  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), kDefaultAlignment);
  EXPECT_EQ(*file->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(*file->get_int("gemma3.block_count"), 18);
  EXPECT_EQ(file->tensors().size(), 236u);

  const TensorInfo* embedding = file->find_tensor("token_embd.weight");
  ASSERT_NE(embedding, nullptr);
  EXPECT_EQ(embedding->type, DType::Q8_0);
  EXPECT_EQ(embedding->dims, (std::vector<int64_t>{640, 262144}));
  EXPECT_EQ(embedding->n_bytes, size_t{262144} * (640 / 32) * 34);

  const TensorInfo* attn_q = file->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(attn_q, nullptr);
  EXPECT_EQ(attn_q->type, DType::Q5_0);

  auto tokens = file->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.error().message();
  EXPECT_EQ(tokens->size(), 262144u);
}

}  // namespace
}  // namespace mnemo::gguf
