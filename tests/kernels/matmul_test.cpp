// matmul and dequantize_row against naive references, with a 2-thread pool and odd shapes.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/gemm.h"

namespace mnemo::kernels {
namespace {

struct Shape {
  int64_t in_blocks;  // in_features in blocks of the weight type
  int64_t out;
  int64_t rows;
};

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix view;
};

Matrix random_matrix(DType type, int64_t in, int64_t out, std::mt19937& rng) {
  Matrix m;
  const std::vector<float> values = testing::random_floats(in * out, rng, 0.05f);
  m.bytes.resize(row_bytes(type, in) * static_cast<size_t>(out));
  type_kernels(type)->from_float(values.data(), m.bytes.data(), in * out);
  m.view = WeightMatrix{type, in, out, m.bytes.data()};
  return m;
}

class MatmulTest : public ::testing::TestWithParam<DType> {
 protected:
  ThreadPool pool_{2};
  MatmulScratch scratch_;
};

// Against float arithmetic on the dequantised weights and the dequantised *quantised*
// activations (what the kernels actually multiply), so the tolerance can stay tight.
TEST_P(MatmulTest, MatchesNaiveFloatReference) {
  const DType type = GetParam();
  const TypeKernels* kernels = type_kernels(type);
  const TypeKernels* act_kernels = type_kernels(kernels->vec_dot_type);
  const int64_t block = std::max<int64_t>(testing::block_elems(type), testing::block_elems(kernels->vec_dot_type));
  std::mt19937 rng(41);
  for (const Shape shape : {Shape{3, 37, 1}, Shape{1, 1, 1}, Shape{2, 513, 3}, Shape{5, 64, 7}, Shape{1, 3, 32}}) {
    const int64_t in = shape.in_blocks * std::max<int64_t>(block, 32);
    const Matrix w = random_matrix(type, in, shape.out, rng);
    const std::vector<float> x = testing::random_floats(in * shape.rows, rng);
    std::vector<float> y(static_cast<size_t>(shape.out * shape.rows), NAN);
    matmul(w.view, x.data(), shape.rows, y.data(), pool_, scratch_);

    std::vector<float> a_row(static_cast<size_t>(in));
    std::vector<uint8_t> a_quant(row_bytes(kernels->vec_dot_type, in));
    std::vector<float> w_row(static_cast<size_t>(in));
    for (int64_t r = 0; r < shape.rows; ++r) {
      act_kernels->quantize_activations(x.data() + r * in, a_quant.data(), in);
      act_kernels->to_float(a_quant.data(), a_row.data(), in);
      for (int64_t o = 0; o < shape.out; ++o) {
        dequantize_row(w.view, o, w_row.data());
        const testing::DotReference ref = testing::float_dot(w_row, a_row);
        const float got = y[static_cast<size_t>(r * shape.out + o)];
        const uint8_t* w_bytes = w.bytes.data() + static_cast<size_t>(o) * w.view.row_bytes();
        const double slack = testing::q8_1_sum_rounding(type, w_bytes, a_quant.data(), in);
        ASSERT_LE(std::fabs(got - ref.dot), 2e-6 * ref.magnitude + slack + 1e-30)
            << "in=" << in << " out=" << shape.out << " rows=" << shape.rows << " r=" << r << " o=" << o;
        // Without a GEMM kernel, exactly what a direct vec_dot gives: matmul only arranges the
        // calls. (The GEMM kernels have their own cross-checks in gemm_test.cpp.)
        if (gemm_kernel(type) == nullptr) {
          ASSERT_EQ(got, kernels->vec_dot(in, w_bytes, a_quant.data()));
        }
      }
    }
  }
}

TEST_P(MatmulTest, ThreadCountDoesNotChangeResults) {
  const DType type = GetParam();
  std::mt19937 rng(42);
  const int64_t in = 512, out = 301, rows = 5;  // enough work to use the pool
  const Matrix w = random_matrix(type, in, out, rng);
  const std::vector<float> x = testing::random_floats(in * rows, rng);
  std::vector<float> one(static_cast<size_t>(out * rows)), two(one.size());
  ThreadPool single(1);
  MatmulScratch scratch;
  matmul(w.view, x.data(), rows, one.data(), single, scratch);
  matmul(w.view, x.data(), rows, two.data(), pool_, scratch_);
  EXPECT_EQ(one, two);
}

TEST_P(MatmulTest, ScratchIsReusedAcrossShapes) {
  const DType type = GetParam();
  std::mt19937 rng(43);
  const Matrix big = random_matrix(type, 1024, 70, rng);
  const Matrix small = random_matrix(type, 256, 9, rng);
  const std::vector<float> x = testing::random_floats(1024 * 4, rng);
  std::vector<float> y_big(70 * 4), y_small(9 * 2), y_small_fresh(9 * 2);
  matmul(big.view, x.data(), 4, y_big.data(), pool_, scratch_);
  matmul(small.view, x.data(), 2, y_small.data(), pool_, scratch_);
  MatmulScratch fresh;
  matmul(small.view, x.data(), 2, y_small_fresh.data(), pool_, fresh);
  EXPECT_EQ(y_small, y_small_fresh);
}

TEST_P(MatmulTest, DequantizeRowPicksTheRightRow) {
  const DType type = GetParam();
  std::mt19937 rng(44);
  const int64_t in = 256, out = 5;
  const Matrix w = random_matrix(type, in, out, rng);
  std::vector<float> all(static_cast<size_t>(in * out)), row(static_cast<size_t>(in));
  type_kernels(type)->to_float(w.bytes.data(), all.data(), in * out);
  for (int64_t o = 0; o < out; ++o) {
    dequantize_row(w.view, o, row.data());
    ASSERT_TRUE(std::equal(row.begin(), row.end(), all.begin() + o * in)) << "row " << o;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, MatmulTest, ::testing::ValuesIn(testing::weight_types()),
                         [](const auto& test_info) { return std::string(dtype_name(test_info.param)); });

TEST(KernelsMatmul, NoRowsIsANoOp) {
  ThreadPool pool(2);
  MatmulScratch scratch;
  const std::vector<uint8_t> bytes(row_bytes(DType::Q8_0, 64) * 3);
  const WeightMatrix w{DType::Q8_0, 64, 3, bytes.data()};
  float y = 42.0f;
  matmul(w, nullptr, 0, &y, pool, scratch);
  EXPECT_EQ(y, 42.0f);
}

}  // namespace
}  // namespace mnemo::kernels
