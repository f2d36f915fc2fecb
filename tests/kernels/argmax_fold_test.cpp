// Output products that fold rows into their largest output (ArgmaxRows, greedy decoding): for
// every weight type, with and without tiles prepacked at load, on one and three threads, the
// index found is kernels::argmax of the same row computed in full (ties and non-finite outputs
// included), the other rows are the same bits as a plain product, and a folded row of y is
// never written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/nn/argmax.h"
#include "util/token_mask.h"

namespace mnemo::kernels {
namespace {

// out random rows of in elements, some of them copies of others (exact ties): the row of the
// largest norm is copied to two more rows, and activations equal to it make the three of them
// the largest outputs (Cauchy-Schwarz); `tied` is the lowest of their indices.
struct TiedWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> best_row;  // the copied row, dequantised
  int64_t tied = 0;
};

TiedWeights weights_with_ties(DType type, int64_t in, int64_t out, std::mt19937& rng) {
  const size_t row = row_bytes(type, in);
  TiedWeights w;
  int64_t best = 0;
  double best_norm = -1.0;
  std::vector<float> values(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    const std::vector<uint8_t> r = testing::random_weight_row(type, in, rng);
    w.bytes.insert(w.bytes.end(), r.begin(), r.end());
    type_kernels(type)->to_float(r.data(), values.data(), in);
    double norm = 0.0;
    for (const float v : values) norm += static_cast<double>(v) * v;
    if (norm > best_norm) {
      best_norm = norm;
      best = o;
      w.best_row = values;
    }
  }
  const int64_t lower = (best + out - 100) % out, higher = (best + 150) % out;
  std::memcpy(&w.bytes[static_cast<size_t>(lower) * row], &w.bytes[static_cast<size_t>(best) * row], row);
  std::memcpy(&w.bytes[static_cast<size_t>(higher) * row], &w.bytes[static_cast<size_t>(best) * row], row);
  w.tied = std::min({best, lower, higher});
  return w;
}

// Activation rows: the tied rows' weights, random ones, all zero (every output ties: index 0),
// huge (outputs overflow to infinities) and one holding a NaN.
std::vector<float> activations(const TiedWeights& weights, int64_t in, std::mt19937& rng) {
  std::vector<float> x = weights.best_row;
  const std::vector<float> more = testing::random_floats(3 * in, rng);
  x.insert(x.end(), more.begin(), more.end());
  x.insert(x.end(), static_cast<size_t>(in), 0.0f);
  for (int64_t i = 0; i < in; ++i) x.push_back((i % 2 == 0 ? 3e38f : -3e38f));
  std::vector<float> with_nan = testing::random_floats(in, rng);
  with_nan[static_cast<size_t>(in / 2)] = std::numeric_limits<float>::quiet_NaN();
  x.insert(x.end(), with_nan.begin(), with_nan.end());
  return x;
}

TEST(ArgmaxFold, FoldedRowsGiveTheArgmaxOfTheFullRowAndOthersAreUnchanged) {
  std::mt19937 rng(17);
  constexpr int64_t kOut = 333;  // a partial last tile
  for (const DType type : testing::weight_types()) {
    const int64_t in = 2 * std::max<int64_t>(testing::block_elems(type), 32);
    const TiedWeights tied = weights_with_ties(type, in, kOut, rng);
    const std::vector<uint8_t>& bytes = tied.bytes;
    const std::vector<float> x = activations(tied, in, rng);
    const int64_t n_rows = static_cast<int64_t>(x.size()) / in;
    for (const bool prepacked : {false, true}) {
      WeightMatrix w{type, in, kOut, bytes.data()};
      const PackedTiles tiles = prepacked ? prepack(w) : PackedTiles();
      for (const int threads : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << (prepacked ? " prepacked" : "") << ", " << threads << " threads");
        ThreadPool pool(threads);
        MatmulScratch scratch;
        std::vector<float> full(static_cast<size_t>(n_rows * kOut));
        matmul(w, x.data(), n_rows, full.data(), pool, scratch);
        // Every other row folded.
        std::vector<uint8_t> wanted(static_cast<size_t>(n_rows));
        for (int64_t r = 0; r < n_rows; ++r) wanted[static_cast<size_t>(r)] = r % 2 == 0 ? 1 : 0;
        std::vector<float> y(full.size(), std::numeric_limits<float>::quiet_NaN());
        ArgmaxRows folds;
        folds.wanted = wanted;
        matmul(w, x.data(), n_rows, y.data(), pool, scratch, folds);
        const GemmKernel* gemm = gemm_kernel(type);
        EXPECT_EQ(folds.folded, gemm != nullptr && gemm->folds_argmax);
        for (int64_t r = 0; r < n_rows; ++r) {
          const float* want = full.data() + r * kOut;
          const float* got = y.data() + r * kOut;
          if (wanted[static_cast<size_t>(r)] == 0) {
            EXPECT_EQ(std::memcmp(got, want, kOut * sizeof(float)), 0) << "row " << r;
            continue;
          }
          const int32_t expected = argmax(want, kOut);
          if (r == 0) {
            ASSERT_EQ(expected, tied.tied) << "the tie the test sets up";
          }
          if (folds.folded) {
            EXPECT_EQ(argmax_of_lanes(folds, r, n_rows), expected) << "row " << r;
            for (int64_t o = 0; o < kOut; ++o) ASSERT_TRUE(std::isnan(got[o])) << "folded row " << r << " written at " << o;
          } else {
            EXPECT_EQ(std::memcmp(got, want, kOut * sizeof(float)), 0) << "row " << r;
          }
        }
      }
    }
  }
}

// Masks of kOut outputs: every 20th, all but the tied best rows, a single one, nine in ten.
std::vector<TokenMask> masks_over(int64_t out, int64_t tied, std::mt19937& rng) {
  std::vector<TokenMask> masks(4);
  for (TokenMask& m : masks) m.clear(static_cast<int32_t>(out));
  std::bernoulli_distribution dense(0.9);
  for (int32_t o = 0; o < out; ++o) {
    if (o % 20 == 3) masks[0].set(o);
    if (o != tied) masks[1].set(o);
    if (dense(rng)) masks[3].set(o);
  }
  masks[2].set(static_cast<int32_t>(out - 7));  // in the partial last tile
  return masks;
}

TEST(ArgmaxFold, MaskedRowsGiveTheArgmaxOverTheirAllowedOutputs) {
  std::mt19937 rng(23);
  constexpr int64_t kOut = 333;
  for (const DType type : testing::weight_types()) {
    const int64_t in = 2 * std::max<int64_t>(testing::block_elems(type), 32);
    const TiedWeights tied = weights_with_ties(type, in, kOut, rng);
    const std::vector<float> x = activations(tied, in, rng);
    const int64_t n_rows = static_cast<int64_t>(x.size()) / in;
    const std::vector<TokenMask> masks = masks_over(kOut, tied.tied, rng);
    WeightMatrix w{type, in, kOut, tied.bytes.data()};
    const PackedTiles tiles = prepack(w);
    for (const int threads : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << ", " << threads << " threads");
      ThreadPool pool(threads);
      MatmulScratch scratch;
      std::vector<float> full(static_cast<size_t>(n_rows * kOut));
      matmul(w, x.data(), n_rows, full.data(), pool, scratch);
      // Every row folded; row r masked by masks[(r + 1) % 5] (the fifth: none), so that row 0,
      // whose largest outputs are the tied rows, may not have them.
      std::vector<uint8_t> wanted(static_cast<size_t>(n_rows), 1);
      std::vector<const uint64_t*> row_masks(static_cast<size_t>(n_rows));
      for (int64_t r = 0; r < n_rows; ++r) {
        const auto m = static_cast<size_t>((r + 1) % 5);
        row_masks[static_cast<size_t>(r)] = m < 4 ? masks[m].words().data() : nullptr;
      }
      std::vector<float> y(full.size());
      ArgmaxRows folds;
      folds.wanted = wanted;
      folds.masks = row_masks;
      matmul(w, x.data(), n_rows, y.data(), pool, scratch, folds);
      if (!folds.folded) continue;  // the model then takes argmax_allowed of the full row
      for (int64_t r = 0; r < n_rows; ++r) {
        const float* row = full.data() + r * kOut;
        const uint64_t* mask = row_masks[static_cast<size_t>(r)];
        const int32_t expected = mask != nullptr ? argmax_allowed(row, kOut, mask) : argmax(row, kOut);
        EXPECT_EQ(argmax_of_lanes(folds, r, n_rows), expected) << "row " << r;
        if (r == 0) {
          EXPECT_NE(expected, tied.tied) << "the mask leaves out the largest outputs";
          EXPECT_TRUE(masks[1].test(expected));
        }
      }
    }
  }
}

TEST(ArgmaxFold, ArgmaxAllowedIsTheArgmaxOfTheRowWithTheOthersAtMinusInfinity) {
  std::mt19937 rng(29);
  constexpr int64_t kN = 1000;
  std::vector<float> x = testing::random_floats(kN, rng);
  x[500] = x[700] = 50.0f;  // a tie: the lower index
  x[800] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<TokenMask> masks = masks_over(kN, 500, rng);
  for (size_t m = 0; m < masks.size(); ++m) {
    std::vector<float> masked(x);
    for (int32_t i = 0; i < kN; ++i) {
      if (!masks[m].test(i)) masked[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
    }
    EXPECT_EQ(argmax_allowed(x.data(), kN, masks[m].words().data()), argmax(masked.data(), kN)) << "mask " << m;
  }
  TokenMask nothing;
  nothing.clear(kN);
  EXPECT_EQ(argmax_allowed(x.data(), kN, nothing.words().data()), 0);
}

}  // namespace
}  // namespace mnemo::kernels
