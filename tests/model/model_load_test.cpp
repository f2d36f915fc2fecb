// Loading refuses what it cannot run, naming the file and the problem: unsupported
// architectures, missing or misshapen tensors, inconsistent hyper-parameters.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

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
    ASSERT_FALSE(w.packed_tiles.empty());
    EXPECT_EQ(w.packed_tiles.front().bytes(), tiles * gemm->tile_bytes(spec.n_embd));
    EXPECT_EQ(w.output.tiles, w.packed_tiles.front().data());
  }
}

// Which matrices a budget lets through, and what it counts: tiles that replace the file's rows
// (Q8_0) cost what they add to them, the others (the tiny model's layers mix Q4_0, Q5_0, Q4_K,
// Q5_K, Q6_K and float types) all their bytes.
TEST(ModelLoad, LayerMatricesArePrepackedInOrderWithinTheBudget) {
  TinyModelSpec spec;
  spec.arch = Arch::kGemma3;
  const std::string path = testing::write_tiny_model(spec, "prepack-budget");
  const auto load = [&](size_t budget) { return Model::load(path, LoadOptions{budget}); };
  const auto extra_of = [](const WeightMatrix& m) {
    const size_t bytes = kernels::prepacked_bytes(m);
    const size_t file_bytes = m.row_bytes() * static_cast<size_t>(m.out_features);
    return kernels::prepacked_tiles_replace_rows(m) ? bytes - std::min(bytes, file_bytes) : bytes;
  };
  const auto matrices = [](const ModelWeights& w) {
    std::vector<const WeightMatrix*> out{&w.output};
    for (const LayerWeights& l : w.layers) {
      for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) out.push_back(m);
    }
    return out;
  };

  auto unlimited = load(SIZE_MAX);
  ASSERT_TRUE(unlimited.ok()) << unlimited.error().message();
  const ModelWeights& all = (*unlimited)->weights();
  size_t offered = 0, extra = 0;
  for (const WeightMatrix* m : matrices(all)) {
    const bool packable = kernels::prepacked_bytes(*m) > 0;
    EXPECT_EQ(m->tiles != nullptr, packable) << dtype_name(m->type);
    offered += packable ? 1 : 0;
    extra += packable ? extra_of(*m) : 0;
  }
  EXPECT_EQ(all.packed_tiles.size(), offered);
  EXPECT_EQ(all.prepacked_extra_bytes, extra);

  auto none = load(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)->weights().packed_tiles.empty());
  for (const WeightMatrix* m : matrices((*none)->weights())) EXPECT_EQ(m->tiles, nullptr);

  const WeightMatrix& wq = all.layers.front().wq;
  if (kernels::prepacked_bytes(wq) == 0 || kernels::prepacked_bytes(all.output) == 0) {
    std::remove(path.c_str());
    GTEST_SKIP() << "no prepacking GEMM kernels on this ISA";  // the AVX-512 CI machine has them
  }
  ASSERT_EQ(wq.type, DType::Q5_0);
  EXPECT_FALSE(kernels::prepacked_tiles_replace_rows(wq));  // 8-bit levels outgrow the 5-bit rows
  // Room for the output projection and the first layer's Q exactly: every later matrix that
  // could be prepacked costs more than nothing, so none is.
  auto partial = load(extra_of(all.output) + extra_of(wq));
  ASSERT_TRUE(partial.ok());
  const ModelWeights& some = (*partial)->weights();
  EXPECT_EQ(some.packed_tiles.size(), 2u);
  EXPECT_EQ(some.prepacked_extra_bytes, extra_of(all.output) + extra_of(wq));
  const std::vector<const WeightMatrix*> listed = matrices(some);
  for (size_t i = 0; i < listed.size(); ++i) EXPECT_EQ(listed[i]->tiles != nullptr, i < 2) << "matrix " << i;
  std::remove(path.c_str());
}

// The same logits, bit for bit, whatever was prepacked: for batched rows and for one.
TEST(ModelLoad, PrepackingDoesNotChangeTheLogits) {
  TinyModelSpec spec;
  spec.arch = Arch::kGemma3;
  const std::string path = testing::write_tiny_model(spec, "prepack-logits");
  std::vector<std::vector<float>> logits;
  for (const size_t budget : {size_t{0}, SIZE_MAX}) {
    auto model = Model::load(path, LoadOptions{budget});
    ASSERT_TRUE(model.ok()) << model.error().message();
    KvStorage kv((*model)->kv_layout(16), 4);
    ThreadPool pool(2);
    Batch batch;
    for (int32_t s = 0; s < 2; ++s) {  // a 5-token prompt, then a batched step of 2 sequences
      SequenceInput seq;
      seq.tokens = s == 0 ? std::vector<TokenId>{3, 9, 27, 81 % spec.n_vocab, 5} : std::vector<TokenId>{7};
      seq.ranges = {QueryRange{0, static_cast<int32_t>(seq.tokens.size())}};
      seq.block_table = {static_cast<BlockId>(s)};
      seq.logits = LogitsFor::kAll;
      batch.sequences.push_back(seq);
    }
    ForwardOutput out;
    ASSERT_TRUE((*model)->forward(batch, kv, pool, out).ok());
    logits.push_back(out.logits);
    Batch one;  // a single row: the one-row products
    one.sequences.push_back(SequenceInput{{11}, {QueryRange{0, 1}}, {2}, LogitsFor::kLast, {}});
    ASSERT_TRUE((*model)->forward(one, kv, pool, out).ok());
    logits.push_back(out.logits);
  }
  std::remove(path.c_str());
  ASSERT_EQ(logits.size(), 4u);
  for (size_t i = 0; i < 2; ++i) {  // budget 0 against unlimited, batched then one row
    ASSERT_EQ(logits[i].size(), logits[i + 2].size());
    ASSERT_FALSE(logits[i].empty());
    EXPECT_EQ(std::memcmp(logits[i].data(), logits[i + 2].data(), logits[i].size() * sizeof(float)), 0) << i;
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
