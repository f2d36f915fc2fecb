// Loading refuses what it cannot run, naming the file and the problem: unsupported
// architectures, missing or misshapen tensors, inconsistent hyper-parameters.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>

#include "kernels/cpu/gemm.h"
#include "model/model.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using testing::TinyModelSpec;

std::string load_error(gguf::Writer writer, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid()) + ".gguf";
  EXPECT_TRUE(writer.write(path).ok());
  auto model = Model::load(path);
  std::remove(path.c_str());
  if (model.ok()) return "";
  EXPECT_NE(model.error().message().find(path), std::string::npos) << model.error().message();
  return model.error().message();
}

TEST(ModelLoad, TinyModelsOfEveryArchitectureLoad) {
  for (const Arch arch : {Arch::kLlama, Arch::kGemma3}) {
    TinyModelSpec spec;
    spec.arch = arch;
    EXPECT_EQ(load_error(testing::make_tiny_model(spec), "ok"), "");
  }
}

TEST(ModelLoad, Gemma3LayerPatternAndRopeBasesComeFromTheMetadata) {
  TinyModelSpec spec;
  spec.arch = Arch::kGemma3;
  spec.n_layers = 6;
  spec.swa_pattern = 3;
  const std::string path = testing::write_tiny_model(spec, "pattern");
  auto model = Model::load(path);
  std::remove(path.c_str());
  ASSERT_TRUE(model.ok()) << model.error().message();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.layer_is_local, (std::vector<bool>{true, true, false, true, true, false}));
  EXPECT_EQ(c.sliding_window, spec.sliding_window);
  EXPECT_FLOAT_EQ(c.rope_base, 1000000.0f);
  EXPECT_FLOAT_EQ(c.rope_base_local, 10000.0f);
  EXPECT_FLOAT_EQ(c.attention_scale, 0.25f);  // 1 / sqrt(head_dim 16)
  EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);   // sqrt(n_embd 64)
}

TEST(ModelLoad, TheOutputProjectionIsRepackedOnceWhereTheGemmKernelOffersIt) {
  TinyModelSpec spec;
  spec.arch = Arch::kGemma3;  // tied: the Q8_0 embedding is the output projection
  const std::string path = testing::write_tiny_model(spec, "prepack");
  auto model = Model::load(path);
  std::remove(path.c_str());
  ASSERT_TRUE(model.ok()) << model.error().message();
  const ModelWeights& w = (*model)->weights();
  ASSERT_EQ(w.output.type, DType::Q8_0);
  const kernels::GemmKernel* gemm = kernels::gemm_kernel(DType::Q8_0);
  const bool offered = gemm != nullptr && gemm->pack_tile != nullptr;
  EXPECT_EQ(w.output.tiles != nullptr, offered);
  EXPECT_EQ(w.token_embedding.tiles, nullptr);  // the lookup reads rows of the file's copy
  if (offered) {
    const auto tiles = static_cast<size_t>((spec.n_vocab + gemm->tile_rows - 1) / gemm->tile_rows);
    EXPECT_EQ(w.output_tiles.bytes(), tiles * gemm->tile_bytes(spec.n_embd));
  }
}

TEST(ModelLoad, UnsupportedArchitectureIsRefusedByName) {
  gguf::Writer w = testing::make_tiny_model(TinyModelSpec{});
  w.set_string("general.architecture", "bert");
  const std::string error = load_error(std::move(w), "bert");
  EXPECT_NE(error.find("architecture 'bert' is not supported"), std::string::npos) << error;
}

TEST(ModelLoad, MissingTensorIsNamed) {
  TinyModelSpec spec;
  gguf::Writer w = testing::make_tiny_model(spec);
  w.set_u32("llama.block_count", 4);  // the file has tensors for 3 layers
  const std::string error = load_error(std::move(w), "missing");
  EXPECT_NE(error.find("missing tensor 'blk.3.attn_norm.weight'"), std::string::npos) << error;
}

TEST(ModelLoad, WrongShapeIsNamed) {
  gguf::Writer w = testing::make_tiny_model(TinyModelSpec{});
  w.set_u32("llama.feed_forward_length", 128);  // tensors have 256
  const std::string error = load_error(std::move(w), "shape");
  EXPECT_NE(error.find("tensor 'blk.0.ffn_gate.weight' has shape [64, 256], expected [64, 128]"), std::string::npos) << error;
}

TEST(ModelLoad, InconsistentHeadCountsAreRefused) {
  gguf::Writer w = testing::make_tiny_model(TinyModelSpec{});
  w.set_u32("llama.attention.head_count_kv", 3);
  const std::string error = load_error(std::move(w), "heads");
  EXPECT_NE(error.find("not a multiple of 3 key/value heads"), std::string::npos) << error;
}

TEST(ModelLoad, MissingHyperParameterIsNamed) {
  gguf::Writer w = testing::make_tiny_model(TinyModelSpec{});
  w.set_string("general.architecture", "qwen2");  // qwen2.* keys are absent
  const std::string error = load_error(std::move(w), "nokeys");
  EXPECT_NE(error.find("metadata 'qwen2.block_count': missing"), std::string::npos) << error;
}

TEST(ModelLoad, NonexistentFileIsAnError) {
  auto model = Model::load("/nonexistent/model.gguf");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message().find("/nonexistent/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace mnemo
