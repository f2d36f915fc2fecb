// The KV tier conversions (kv/kv_codec.h) on one chunk of Gemma 3 270M's KV (32 tokens, 18
// layers, one KV head of 256: 576 KiB of F16): encode (demotion) and decode (promotion) per type,
// beside a plain copy of the chunk (what an F16 tier costs), and the Q8_0 kernels per ISA. Bytes
// per second count the F16 side. Reports the median and the fastest repetition ("_min").
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kv_quant.h"
#include "kv/kv_codec.h"
#include "util/fp16.h"

namespace mnemo {
namespace {

KvLayout gemma_chunk() {
  KvLayout l;
  l.n_layers = 18;
  l.n_kv_heads = 1;
  l.head_dim_k = l.head_dim_v = 256;
  l.block_size = 32;
  l.dtype = DType::F16;
  return l;
}

std::vector<uint8_t> random_chunk(const KvLayout& l) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> bytes(l.block_bytes());
  auto* h = reinterpret_cast<uint16_t*>(bytes.data());
  for (size_t i = 0; i < l.block_elems(); ++i) h[i] = fp32_to_fp16(normal(rng));
  return bytes;
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void codec_benchmark(benchmark::State& state, KvType type, bool encode) {
  const KvLayout l = gemma_chunk();
  const KvCodec codec = *KvCodec::make(l, type);
  const std::vector<uint8_t> chunk = random_chunk(l);
  std::vector<uint8_t> coded(codec.block_bytes()), back(l.block_bytes());
  codec.encode(chunk.data(), coded.data(), l.n_layers);
  for (auto _ : state) {
    if (encode) {
      codec.encode(chunk.data(), coded.data(), l.n_layers);
      benchmark::DoNotOptimize(coded.data());
    } else {
      codec.decode(coded.data(), back.data(), l.n_layers);
      benchmark::DoNotOptimize(back.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(l.block_bytes()));
}

void q8_0_isa_benchmark(benchmark::State& state, kernels::Isa isa, bool encode) {
  const KvLayout l = gemma_chunk();
  const std::vector<uint8_t> chunk = random_chunk(l);
  const auto n = static_cast<int64_t>(l.block_elems());
  std::vector<BlockQ8_0> coded(static_cast<size_t>(n / kQK));
  std::vector<uint16_t> back(static_cast<size_t>(n));
  const kernels::KvQuantKernels& k = kernels::kv_quant_kernels(isa);
  k.q8_0_encode(reinterpret_cast<const uint16_t*>(chunk.data()), coded.data(), n);
  for (auto _ : state) {
    if (encode) {
      k.q8_0_encode(reinterpret_cast<const uint16_t*>(chunk.data()), coded.data(), n);
    } else {
      k.q8_0_decode(coded.data(), back.data(), n);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(l.block_bytes()));
}

void register_benchmarks() {
  for (const KvType type : {KvType::kF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kKivi4, KvType::kK4V8}) {
    for (const bool encode : {true, false}) {
      const std::string name = std::string("kv_codec/") + std::string(kv_type_name(type)) + (encode ? "/encode" : "/decode");
      benchmark::RegisterBenchmark(name.c_str(), codec_benchmark, type, encode)
          ->Unit(benchmark::kMicrosecond)
          ->ComputeStatistics("min", min_of);
    }
  }
  for (const kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2}) {
    if (!kernels::isa_supported(isa)) continue;
    for (const bool encode : {true, false}) {
      const std::string name = std::string("q8_0/") + std::string(kernels::isa_name(isa)) + (encode ? "/encode" : "/decode");
      benchmark::RegisterBenchmark(name.c_str(), q8_0_isa_benchmark, isa, encode)
          ->Unit(benchmark::kMicrosecond)
          ->ComputeStatistics("min", min_of);
    }
  }
}

}  // namespace
}  // namespace mnemo

int main(int argc, char** argv) {
  mnemo::register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
