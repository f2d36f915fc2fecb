// Microbenchmarks of the CPU kernels: vec_dot and the activation quantisers per type and ISA
// (4096 elements), and matmul at the default model's shapes: the 640 x 262144 Q8_0 output layer
// at batch 1 and 32, and the layer matrices at batch 1, 8, 32 and 512. Besides the median, each
// reports the fastest repetition ("_min"), the best estimate on a shared machine. The GEMM
// benchmarks also count multiply-adds per second (MACs). The greedy argmax runs per ISA over one
// row of the default model's 262,144 logits.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/type_kernels.h"
#include "kernels/nn/argmax.h"
#include "kernels/nn/ops.h"
#include "tensor/quant_blocks.h"
#include "util/fp16.h"

namespace mnemo::kernels {
namespace {

constexpr int64_t kDotLength = 4096;

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                              DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(rng);
  return values;
}

void vec_dot_benchmark(benchmark::State& state, DType type, Isa isa) {
  const TypeKernels* kernels = type_kernels(type, isa);
  const TypeKernels* activation = type_kernels(kernels->vec_dot_type, isa);
  const std::vector<float> w_floats = random_floats(kDotLength, 1);
  const std::vector<float> a_floats = random_floats(kDotLength, 2);
  std::vector<uint8_t> w(row_bytes(type, kDotLength)), a(row_bytes(kernels->vec_dot_type, kDotLength));
  kernels->from_float(w_floats.data(), w.data(), kDotLength);
  activation->quantize_activations(a_floats.data(), a.data(), kDotLength);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kernels->vec_dot(kDotLength, w.data(), a.data()));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w.size()));
}

void quantize_benchmark(benchmark::State& state, DType type, Isa isa) {
  const TypeKernels* kernels = type_kernels(type, isa);
  const std::vector<float> x = random_floats(kDotLength, 3);
  std::vector<uint8_t> out(row_bytes(type, kDotLength));
  for (auto _ : state) {
    kernels->quantize_activations(x.data(), out.data(), kDotLength);
    benchmark::ClobberMemory();
  }
}

// Weights filled with cheap pseudo-random levels and a fixed scale: from_float over hundreds of
// megabytes would dominate the start-up time, and the kernels' speed does not depend on values.
std::vector<uint8_t> synthetic_weights(DType type, int64_t in, int64_t out) {
  std::vector<uint8_t> bytes(row_bytes(type, in) * static_cast<size_t>(out));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(&bytes[i], &state, 8);
  }
  const size_t block_bytes = dtype_info(type).block_bytes;
  const uint16_t scale = fp32_to_fp16(0.01f);
  for (size_t offset = 0; offset < bytes.size(); offset += block_bytes) {
    std::memcpy(&bytes[offset], &scale, sizeof(scale));  // d is the first field of Q8_0/Q5_0
  }
  return bytes;
}

void matmul_benchmark(benchmark::State& state, DType type, int64_t in, int64_t out, bool prepacked) {
  const int64_t rows = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::vector<uint8_t> weights = synthetic_weights(type, in, out);
  WeightMatrix w{type, in, out, weights.data()};
  const PackedTiles tiles = prepacked ? prepack(w) : PackedTiles();
  if (prepacked && w.tiles == nullptr) state.SkipWithError("no prepacked tiles for this type on this ISA");
  const std::vector<float> x = random_floats(in * rows, 4);
  std::vector<float> y(static_cast<size_t>(out * rows));
  ThreadPool pool(threads);
  MatmulScratch scratch;
  for (auto _ : state) {
    matmul(w, x.data(), rows, y.data(), pool, scratch);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(weights.size()));
  state.counters["MACs"] = benchmark::Counter(static_cast<double>(in * out * rows), benchmark::Counter::kIsIterationInvariantRate);
}

// As matmul_benchmark, but cycling through enough copies of the matrix (over 256 MB) that each
// call reads its weights from memory, as a decode step does (the model's matrices together are
// far larger than the caches).
void matmul_cold_benchmark(benchmark::State& state, DType type, int64_t in, int64_t out) {
  const int64_t rows = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::vector<uint8_t> weights = synthetic_weights(type, in, out);
  std::vector<WeightMatrix> copies;
  std::vector<PackedTiles> tiles;
  size_t total = 0;
  while (total < (size_t{256} << 20)) {
    copies.push_back(WeightMatrix{type, in, out, weights.data()});
    tiles.push_back(prepack(copies.back()));
    if (copies.back().tiles == nullptr) {
      state.SkipWithError("no prepacked tiles for this type on this ISA");
      return;
    }
    total += tiles.back().bytes();
  }
  const std::vector<float> x = random_floats(in * rows, 4);
  std::vector<float> y(static_cast<size_t>(out * rows));
  ThreadPool pool(threads);
  MatmulScratch scratch;
  size_t next = 0;
  for (auto _ : state) {
    matmul(copies[next], x.data(), rows, y.data(), pool, scratch);
    next = (next + 1) % copies.size();
    benchmark::ClobberMemory();
  }
  state.counters["MACs"] = benchmark::Counter(static_cast<double>(in * out * rows), benchmark::Counter::kIsIterationInvariantRate);
}

void argmax_benchmark(benchmark::State& state, Isa isa) {
  const std::vector<float> logits = random_floats(262144, 3);
  const ArgmaxFn argmax = argmax_kernel(isa);
  for (auto _ : state) benchmark::DoNotOptimize(argmax(logits.data(), static_cast<int64_t>(logits.size())));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(logits.size() * sizeof(float)));
}

// GeGLU over a decode batch of 32 rows of the default model's 2048 features.
void geglu_benchmark(benchmark::State& state) {
  const int64_t n = 32 * 2048;
  std::vector<float> gate = random_floats(n, 5), up = random_floats(n, 6), out(static_cast<size_t>(n));
  for (float& g : gate) g *= 4.0f;
  for (auto _ : state) {
    geglu(gate.data(), up.data(), out.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// The machine is shared: the fastest repetition is the best estimate of the kernel's own speed.
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// "kind/TYPE/isa"
std::string benchmark_name(std::string_view kind, DType type, Isa isa) {
  std::string name(kind);
  name.append("/").append(dtype_name(type)).append("/").append(isa_name(isa));
  return name;
}

void register_benchmarks() {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (DType type : kWeightTypes) {
      benchmark::RegisterBenchmark(benchmark_name("vec_dot", type, isa).c_str(), vec_dot_benchmark, type, isa);
    }
    for (DType type : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F16}) {
      benchmark::RegisterBenchmark(benchmark_name("quantize_activations", type, isa).c_str(), quantize_benchmark,
                                   type, isa);
    }
    benchmark::RegisterBenchmark(("argmax/262144/" + std::string(isa_name(isa))).c_str(), argmax_benchmark, isa)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("geglu/65536", geglu_benchmark)->Unit(benchmark::kMicrosecond);
  // Output layer of the default model: 262144 rows of 640 Q8_0 elements (178 MB), one token.
  // As the model multiplies it: repacked once at load (prepack), when the kernel offers it.
  for (const bool prepacked : {false, true}) {
    benchmark::RegisterBenchmark(prepacked ? "matmul/Q8_0_640x262144_prepacked" : "matmul/Q8_0_640x262144",
                                 matmul_benchmark, DType::Q8_0, 640, 262144, prepacked)
        ->ArgNames({"rows", "threads"})
        ->ArgsProduct({{1, 32}, {1, 2}})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->ComputeStatistics("min", min_of);
  }
  // The layer matrices of the default model (Q5_0 Q/K/V/gate/up, Q8_0 V, Q4_K output and down,
  // Q6_K down) at decode batches 1, 8 and 32 and a 512-token prefill chunk; prepacked, also with
  // the weights coming from memory ("_cold").
  struct Shape {
    const char* name;
    DType type;
    int64_t in, out;
  };
  for (const Shape& shape : {Shape{"matmul/Q5_0_640x2048", DType::Q5_0, 640, 2048},
                             Shape{"matmul/Q8_0_640x2048", DType::Q8_0, 640, 2048},
                             Shape{"matmul/Q4_K_2048x640", DType::Q4_K, 2048, 640},
                             Shape{"matmul/Q4_K_1024x640", DType::Q4_K, 1024, 640},
                             Shape{"matmul/Q6_K_2048x640", DType::Q6_K, 2048, 640},
                             Shape{"matmul/F16_640x2048", DType::F16, 640, 2048}}) {
    benchmark::RegisterBenchmark((std::string(shape.name) + "_prepacked_cold").c_str(), matmul_cold_benchmark, shape.type,
                                 shape.in, shape.out)
        ->ArgNames({"rows", "threads"})
        ->ArgsProduct({{1, 8, 32}, {1, 2}})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->ComputeStatistics("min", min_of);
    for (const bool prepacked : {false, true}) {  // as the model multiplies it: prepacked at load
      const std::string name = std::string(shape.name) + (prepacked ? "_prepacked" : "");
      benchmark::RegisterBenchmark(name.c_str(), matmul_benchmark, shape.type, shape.in, shape.out, prepacked)
          ->ArgNames({"rows", "threads"})
          ->ArgsProduct({{1, 8, 32, 512}, {1, 2}})
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime()
          ->ComputeStatistics("min", min_of);
    }
  }
}

}  // namespace
}  // namespace mnemo::kernels

int main(int argc, char** argv) {
  mnemo::kernels::register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
