// Paged attention: the tiled SIMD kernel against the portable reference (tolerance), and batch
// invariance of the path the model uses (bit for bit): a query's output is the same alone on one
// thread, inside a prefill chunk of its sequence among other sequences' queries, and with its
// context split across threads in chunks (flash decoding). Contexts span several 256-position
// chunks, pool blocks are shuffled, with and without sliding windows, GQA and F16/F32 pools.
#include "kernels/nn/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "util/fp16.h"

namespace mnemo::kernels {
namespace {

struct Case {
  DType kv_dtype;
  int32_t block_size;
  int32_t n_heads, n_kv_heads, head_dim;
  int32_t window;
};

std::string case_name(const Case& c) {
  return std::string(dtype_name(c.kv_dtype)) + "_block" + std::to_string(c.block_size) + "_h" +
         std::to_string(c.n_heads) + "kv" + std::to_string(c.n_kv_heads) + "_d" + std::to_string(c.head_dim) +
         "_window" + std::to_string(c.window);
}

constexpr int32_t kContext = 700;  // three chunks of 256
constexpr int32_t kSequences = 2;

class AttentionTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    layout_ = KvLayout{1, c.n_kv_heads, c.head_dim, c.head_dim, c.block_size, c.kv_dtype};
    const int32_t blocks_per_sequence = (kContext + c.block_size - 1) / c.block_size;
    kv_ = std::make_unique<KvStorage>(layout_, blocks_per_sequence * kSequences);
    std::vector<BlockId> ids(static_cast<size_t>(blocks_per_sequence * kSequences));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(17);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int32_t s = 0; s < kSequences; ++s) {
      tables_[s].assign(ids.begin() + s * blocks_per_sequence, ids.begin() + (s + 1) * blocks_per_sequence);
      for (int32_t pos = 0; pos < kContext; ++pos) {
        const BlockId block = tables_[s][static_cast<size_t>(pos / c.block_size)];
        const int32_t slot = pos % c.block_size;
        for (int32_t h = 0; h < c.n_kv_heads; ++h) {
          for (int32_t d = 0; d < c.head_dim; ++d) {
            // Keys with a per-position bias, so that some positions dominate the softmax.
            set(kv_->keys(block, 0, h), slot * c.head_dim + d, normal(rng) * (1.0f + 0.002f * static_cast<float>(pos % 97)));
            set(kv_->values(block, 0, h), slot * c.head_dim + d, normal(rng));
          }
        }
      }
      q_[s].resize(static_cast<size_t>(kContext) * c.n_heads * c.head_dim);
      for (float& x : q_[s]) x = normal(rng) * 0.5f;
    }
    shape_ = AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                            c.window, 0.0f};
  }

  void set(void* plane, int32_t index, float value) {
    if (layout_.dtype == DType::F32) {
      static_cast<float*>(plane)[index] = value;
    } else {
      static_cast<uint16_t*>(plane)[index] = fp32_to_fp16(value);
    }
  }

  size_t out_size() const { return static_cast<size_t>(GetParam().n_heads) * GetParam().head_dim; }

  // Query of sequence s at `position`, writing into out.
  AttentionQuery query(int32_t s, int32_t position, float* out) const {
    return {q_[s].data() + static_cast<size_t>(position) * out_size(), out, position, tables_[s]};
  }

  KvLayout layout_;
  std::unique_ptr<KvStorage> kv_;
  std::vector<BlockId> tables_[kSequences];
  std::vector<float> q_[kSequences];
  AttentionShape shape_;
};

TEST_P(AttentionTest, TiledKernelMatchesReference) {
  // The ISA with a tiled kernel, whatever MNEMO_ISA chose for the process.
  if (!paged_attention_has_tiles(Isa::kAvx512)) GTEST_SKIP() << "no tiled kernel on this CPU";
  ThreadPool pool(2);
  // A prefill chunk crossing chunk boundaries, plus decode-style single queries.
  std::vector<int32_t> positions;
  for (int32_t p = 240; p < 280; ++p) positions.push_back(p);
  for (int32_t p : {0, 1, 15, 16, 255, 256, 511, 512, kContext - 1}) positions.push_back(p);
  std::vector<float> tiled(positions.size() * out_size()), reference(tiled.size());
  std::vector<AttentionQuery> a, b;
  for (size_t i = 0; i < positions.size(); ++i) {
    a.push_back(query(0, positions[i], tiled.data() + i * out_size()));
    b.push_back(query(0, positions[i], reference.data() + i * out_size()));
  }
  paged_attention_tiled(a, *kv_, 0, shape_, pool, Isa::kAvx512);
  paged_attention_reference(b, *kv_, 0, shape_, pool);
  for (size_t i = 0; i < tiled.size(); ++i) {
    // Outputs are averages of values of magnitude ~1: the two summation orders differ by a few
    // float roundings per position.
    ASSERT_NEAR(tiled[i], reference[i], 2e-5f) << "position " << positions[i / out_size()] << ", element " << i % out_size();
  }
}

TEST_P(AttentionTest, QueryOutputDoesNotDependOnTheBatchOrThreads) {
  std::vector<int32_t> probe = {3, 100, 255, 256, 300, 520, kContext - 1};
  // Each probe alone on one thread.
  ThreadPool one(1);
  std::vector<float> alone(probe.size() * out_size());
  for (size_t i = 0; i < probe.size(); ++i) {
    const AttentionQuery q = query(0, probe[i], alone.data() + i * out_size());
    paged_attention({&q, 1}, *kv_, 0, shape_, one);
  }
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    // Alone again (split across the threads by head, then by chunk).
    for (size_t i = 0; i < probe.size(); ++i) {
      std::vector<float> out(out_size());
      const AttentionQuery q = query(0, probe[i], out.data());
      paged_attention({&q, 1}, *kv_, 0, shape_, pool);
      ASSERT_EQ(std::memcmp(out.data(), alone.data() + i * out_size(), out_size() * sizeof(float)), 0)
          << "position " << probe[i] << " alone, " << threads << " threads";
    }
    // Inside prefill chunks of various lengths and offsets, after another sequence's queries.
    for (int32_t chunk : {5, 8, 13}) {
      for (size_t i = 0; i < probe.size(); ++i) {
        const int32_t first = std::max(0, probe[i] - chunk / 2);
        const int32_t last = std::min(kContext - 1, first + chunk - 1);
        std::vector<float> out(static_cast<size_t>(last - first + 1 + 3) * out_size());
        std::vector<AttentionQuery> batch;
        for (int32_t p : {10, 400, 401}) batch.push_back(query(1, p, out.data() + batch.size() * out_size()));
        for (int32_t p = first; p <= last; ++p) batch.push_back(query(0, p, out.data() + batch.size() * out_size()));
        paged_attention(batch, *kv_, 0, shape_, pool);
        const size_t at = static_cast<size_t>(3 + probe[i] - first);
        ASSERT_EQ(std::memcmp(out.data() + at * out_size(), alone.data() + i * out_size(), out_size() * sizeof(float)), 0)
            << "position " << probe[i] << " in a chunk of " << chunk << ", " << threads << " threads";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, AttentionTest,
    ::testing::Values(Case{DType::F16, 16, 4, 1, 256, 0}, Case{DType::F16, 4, 2, 1, 64, 0},
                      Case{DType::F32, 16, 4, 2, 64, 300}, Case{DType::F16, 16, 8, 2, 128, 300},
                      Case{DType::F32, 5, 2, 2, 80, 0}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return case_name(param_info.param); });

}  // namespace
}  // namespace mnemo::kernels
