// Batch invariance of matmul, bit for bit (the serving engine relies on it: a request must
// produce the same output alone or among others, and continue identically when recomputed): the
// output of one activation row must not depend on the other rows of the call, their number, the
// row's position among them, the number of threads, or the other matrices of a matmul_many.
// For every weight type, on the ISA chosen at start-up (whose kernels the model uses).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/matmul.h"

namespace mnemo::kernels {
namespace {

constexpr int64_t kIn = 512;    // a multiple of every block size
constexpr int64_t kOut = 75;    // not a multiple of a 16-row tile
constexpr int64_t kRows = 40;   // distinct activation rows to draw batches from

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix view;
};

// Random level bits (extremes included) with moderate scales, as the kernel tests use.
Matrix random_matrix(DType type, int64_t in, int64_t out, std::mt19937& rng) {
  Matrix m;
  for (int64_t o = 0; o < out; ++o) {
    const std::vector<uint8_t> row = testing::random_weight_row(type, in, rng);
    m.bytes.insert(m.bytes.end(), row.begin(), row.end());
  }
  m.view = WeightMatrix{type, in, out, m.bytes.data()};
  return m;
}

bool bitwise_equal(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

class MatmulBatchInvarianceTest : public ::testing::TestWithParam<DType> {
 protected:
  ThreadPool one_{1};
  ThreadPool two_{2};
};

TEST_P(MatmulBatchInvarianceTest, RowResultDoesNotDependOnTheBatch) {
  const DType type = GetParam();
  std::mt19937 rng(71);
  const Matrix w = random_matrix(type, kIn, kOut, rng);
  const std::vector<float> x = testing::random_floats(kIn * kRows, rng);

  // Each row alone, on one thread.
  std::vector<float> alone(static_cast<size_t>(kRows * kOut));
  MatmulScratch scratch;
  for (int64_t r = 0; r < kRows; ++r) matmul(w.view, x.data() + r * kIn, 1, alone.data() + r * kOut, one_, scratch);

  std::uniform_int_distribution<int64_t> any_row(0, kRows - 1);
  for (const int64_t batch : {3, 8, 33}) {
    for (int trial = 0; trial < 3; ++trial) {
      // A batch of random rows (repeats allowed), so every row sits at different positions.
      std::vector<int64_t> picked(static_cast<size_t>(batch));
      for (int64_t& r : picked) r = any_row(rng);
      std::vector<float> xb(static_cast<size_t>(batch * kIn));
      for (int64_t i = 0; i < batch; ++i) {
        std::memcpy(&xb[static_cast<size_t>(i * kIn)], &x[static_cast<size_t>(picked[static_cast<size_t>(i)] * kIn)],
                    kIn * sizeof(float));
      }
      for (ThreadPool* pool : {&one_, &two_}) {
        std::vector<float> y(static_cast<size_t>(batch * kOut));
        matmul(w.view, xb.data(), batch, y.data(), *pool, scratch);
        for (int64_t i = 0; i < batch; ++i) {
          const int64_t r = picked[static_cast<size_t>(i)];
          ASSERT_TRUE(bitwise_equal(&y[static_cast<size_t>(i * kOut)], &alone[static_cast<size_t>(r * kOut)], kOut))
              << "row " << r << " at position " << i << " of " << batch << ", " << pool->size() << " threads";
        }
      }
    }
  }
}

TEST_P(MatmulBatchInvarianceTest, TilesPackedAtLoadGiveTheRowsBits) {
  // A model's matrices are prepacked where the kernel offers it; then a batch reads the tiles
  // while one row may read the file's rows (speculative verification depends on these agreeing).
  const DType type = GetParam();
  std::mt19937 rng(72);
  Matrix w = random_matrix(type, kIn, kOut, rng);
  const std::vector<float> x = testing::random_floats(kIn * kRows, rng);
  MatmulScratch scratch;
  std::vector<float> alone(static_cast<size_t>(kRows * kOut));
  for (int64_t r = 0; r < kRows; ++r) matmul(w.view, x.data() + r * kIn, 1, alone.data() + r * kOut, one_, scratch);
  // (Where the kernel has no tiles for the type on this ISA, the batch reads the rows as before.)
  const PackedTiles tiles = prepack(w.view);
  for (const int64_t rows : {int64_t{1}, int64_t{2}, int64_t{5}, kRows}) {
    for (ThreadPool* pool : {&one_, &two_}) {
      std::vector<float> y(static_cast<size_t>(rows * kOut));
      matmul(w.view, x.data(), rows, y.data(), *pool, scratch);
      ASSERT_TRUE(bitwise_equal(y.data(), alone.data(), rows * kOut)) << rows << " rows, " << pool->size() << " threads";
    }
  }
}

TEST_P(MatmulBatchInvarianceTest, SharedActivationsDoNotChangeTheResult) {
  // Q, K and V style: the matrix among others of other types, sharing the quantised rows.
  const DType type = GetParam();
  std::mt19937 rng(72);
  const Matrix w = random_matrix(type, kIn, kOut, rng);
  const Matrix before = random_matrix(DType::Q8_0, kIn, 33, rng);
  const Matrix after = random_matrix(DType::Q4_K, kIn, 50, rng);
  const int64_t rows = 9;
  const std::vector<float> x = testing::random_floats(kIn * rows, rng);
  MatmulScratch scratch;
  std::vector<float> single(static_cast<size_t>(rows * kOut));
  matmul(w.view, x.data(), rows, single.data(), one_, scratch);
  std::vector<float> y_before(static_cast<size_t>(rows * 33)), y(single.size()), y_after(static_cast<size_t>(rows * 50));
  const MatmulTask tasks[] = {{&before.view, y_before.data()}, {&w.view, y.data()}, {&after.view, y_after.data()}};
  matmul_many(tasks, x.data(), rows, two_, scratch);
  EXPECT_TRUE(bitwise_equal(y.data(), single.data(), rows * kOut));
}

TEST_P(MatmulBatchInvarianceTest, OutputRowsDoNotDependOnTheirNeighbours) {
  // The same weight row inside a different matrix (another offset in its tile, other rows
  // around it) gives the same outputs.
  const DType type = GetParam();
  std::mt19937 rng(73);
  const Matrix w = random_matrix(type, kIn, kOut, rng);
  const int64_t rows = 5;
  const std::vector<float> x = testing::random_floats(kIn * rows, rng);
  MatmulScratch scratch;
  std::vector<float> y(static_cast<size_t>(rows * kOut));
  matmul(w.view, x.data(), rows, y.data(), two_, scratch);
  const size_t row_bytes = w.view.row_bytes();
  for (const int64_t first : {int64_t{1}, int64_t{17}, int64_t{60}}) {
    const int64_t count = std::min<int64_t>(kOut - first, 7);
    const WeightMatrix part{type, kIn, count, w.bytes.data() + static_cast<size_t>(first) * row_bytes};
    std::vector<float> yp(static_cast<size_t>(rows * count));
    matmul(part, x.data(), rows, yp.data(), one_, scratch);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(bitwise_equal(&yp[static_cast<size_t>(r * count)], &y[static_cast<size_t>(r * kOut + first)], count))
          << "rows " << first << ".." << first + count << ", activation row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, MatmulBatchInvarianceTest, ::testing::ValuesIn(testing::weight_types()),
                         [](const auto& test_info) { return std::string(dtype_name(test_info.param)); });

}  // namespace
}  // namespace mnemo::kernels
