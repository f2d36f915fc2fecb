// The KV tier conversions (kv/kv_codec.h) on one chunk of Gemma 3 270M's KV (32 tokens, 18
// layers, one KV head of 256: 576 KiB of F16): encode (demotion) and decode (promotion) per type,
// beside a plain copy of the chunk (what an F16 tier costs), and the Q8_0 kernels per ISA. Bytes
// per second count the F16 side. Reports the median and the fastest repetition ("_min").
//
// write_through/<type>/<who encodes>: what writing one chunk through to a disk tier of that type
// costs the engine thread, when it converts the chunk itself before DiskTier::write (as before
// session 29) and when the disk's writer thread does (KvCache::write_to_disk now): the writer runs
// beside it, in a folder under /dev/shm (the disk's own speed is not what is measured).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "kernels/cpu/kv_quant.h"
#include "kv/disk_tier.h"
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

void write_through_benchmark(benchmark::State& state, KvType type, bool writer_encodes) {
  const KvLayout l = gemma_chunk();
  const KvCodec codec = *KvCodec::make(l, type);
  const std::vector<uint8_t> chunk = random_chunk(l);
  std::string dir = "/dev/shm/mnemo-write-through-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    state.SkipWithError("cannot make a folder under /dev/shm");
    return;
  }
  constexpr int kBatch = 64;  // extents on disk at most: written, then removed untimed
  auto tier = DiskTier::open(dir, 1, codec.block_bytes(), int64_t{1} << 30);
  if (!tier.ok()) {
    state.SkipWithError(tier.error().message().c_str());
    return;
  }
  ExtentHeader header;
  header.tokens.assign(static_cast<size_t>(l.block_size), 7);
  std::vector<uint8_t> staging(codec.block_bytes());
  uint64_t key = 0;
  for (auto _ : state) {
    header.key = ++key;
    if (writer_encodes) {
      (*tier)->write(header, chunk, codec.block_bytes(), [&codec, n = l.n_layers](std::span<const uint8_t> in, std::span<uint8_t> out) {
        codec.encode(in.data(), out.data(), n);
      });
    } else {
      codec.encode(chunk.data(), staging.data(), l.n_layers);
      (*tier)->write(header, staging);
    }
    if (key % kBatch == 0) {
      state.PauseTiming();
      (*tier)->flush();
      for (uint64_t k = key - kBatch + 1; k <= key; ++k) (*tier)->remove(k);
      (*tier)->flush();
      state.ResumeTiming();
    }
  }
  tier->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
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
  for (const KvType type : {KvType::kQ8_0, KvType::kK4V8}) {
    for (const bool writer_encodes : {false, true}) {
      const std::string name = std::string("write_through/") + std::string(kv_type_name(type)) +
                               (writer_encodes ? "/writer_encodes" : "/caller_encodes");
      benchmark::RegisterBenchmark(name.c_str(), write_through_benchmark, type, writer_encodes)
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
