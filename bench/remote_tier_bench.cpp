// What the KV cache's tiers cost across shards (kv/remote_device.h): a coordinator's pulls and
// pushes of real SmolLM2 blocks (--model) from and to two pipeline stages (or --tensor: two tensor
// ranks) over loopback UCX, in one process, against the in-memory copy one instance makes of the
// same bytes (the same run's peer). Reports, per batch size, the median time of a pull and a push
// of that many blocks over --repeats, per block and in MiB/s, and checks the pulled bytes are the
// pushed ones.
//   build/release/bench/mnemo_remote_tier_bench [--model PATH] [--repeats 15] [--tensor]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "parallel/pipeline.h"
#include "parallel/stage_worker.h"
#include "parallel/tensor_parallel.h"
#include "util/paths.h"

namespace {

using namespace mnemo;
using Clock = std::chrono::steady_clock;

constexpr int32_t kBlockSize = 32;
constexpr int32_t kBlocks = 512;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class Op>
double time_median(int repeats, Op&& op) {
  std::vector<double> s;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    if (!op()) return -1;
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(s);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = chat_model_path();
  int repeats = 15;
  bool tensor = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--model" && i + 1 < argc) model_path = argv[++i];
    else if (flag == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
    else if (flag == "--tensor") tensor = true;
  }
  LoadOptions coordinator_load;
  coordinator_load.layer_end = 0;
  coordinator_load.layer_norms = tensor;
  auto coordinator = Model::load(model_path, coordinator_load);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "%s\n", coordinator.error().message().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<parallel::StageWorker>> workers;
  std::vector<std::string> endpoints;
  for (int i = 0; i < 2; ++i) {
    parallel::StageWorkerOptions w;
    w.model_path = model_path;
    w.threads = 1;
    auto worker = parallel::StageWorker::start(w);
    if (!worker.ok()) return 1;
    endpoints.push_back((*worker)->endpoint());
    workers.push_back(std::move(*worker));
  }
  std::unique_ptr<RemoteDevice> remote;
  if (tensor) {
    parallel::TensorParallelOptions options;
    options.workers = endpoints;
    auto tp = parallel::TensorParallel::connect(model_path, **coordinator, kBlockSize, DType::F16, kBlocks, options);
    if (!tp.ok()) return std::fprintf(stderr, "%s\n", tp.error().message().c_str()), 1;
    remote = std::move(*tp);
  } else {
    parallel::PipelineOptions options;
    options.stages = endpoints;
    auto pipeline = parallel::Pipeline::connect(model_path, **coordinator, kBlockSize, DType::F16, kBlocks, options);
    if (!pipeline.ok()) return std::fprintf(stderr, "%s\n", pipeline.error().message().c_str()), 1;
    remote = std::move(*pipeline);
  }
  const KvLayout layout = (*coordinator)->kv_layout(kBlockSize);
  KvStorage mine(layout, kBlocks), back(layout, kBlocks), host(layout, kBlocks);
  std::mt19937 rng(1);
  for (BlockId b = 0; b < kBlocks; ++b) {
    for (size_t i = 0; i < mine.block_bytes(); ++i) mine.block(b)[i] = static_cast<uint8_t>(rng() % 64);
  }
  const double block_mib = static_cast<double>(layout.block_bytes()) / (1 << 20);
  std::printf("model %s, %s: blocks of %d tokens, %.3f MiB each; medians of %d\n", model_path.c_str(),
              tensor ? "two tensor ranks" : "two pipeline stages", kBlockSize, block_mib, repeats);
  std::printf("| blocks | push ms | pull ms | pull ms a block | pull MiB/s | in-memory copy ms | pull / copy |\n|---|---|---|---|---|---|---|\n");
  bool same = true;
  for (const int32_t n : {1, 4, 16, 64, 256}) {
    std::vector<BlockId> blocks(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) blocks[static_cast<size_t>(i)] = i * (kBlocks / 256);
    const double push = time_median(repeats, [&] { return remote->push(blocks, mine).ok(); });
    const double pull = time_median(repeats, [&] { return remote->pull(blocks, back).ok(); });
    const double copy = time_median(repeats, [&] {
      for (BlockId b : blocks) std::memcpy(host.block(b), mine.block(b), mine.block_bytes());
      return true;
    });
    for (BlockId b : blocks) same = same && std::memcmp(mine.block(b), back.block(b), mine.block_bytes()) == 0;
    std::printf("| %d | %.2f | %.2f | %.3f | %.0f | %.3f | %.0fx |\n", n, push * 1e3, pull * 1e3, pull * 1e3 / n,
                n * block_mib / pull, copy * 1e3, pull / copy);
  }
  std::printf("pulled bytes %s the pushed ones\n", same ? "equal" : "DIFFER FROM");
  return same ? 0 : 1;
}
