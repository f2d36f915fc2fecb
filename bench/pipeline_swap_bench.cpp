// Microbatch swapping (SPEC D6) on the real model: one stage holding every layer of Gemma 3
// 270M (or --model), a host pool with the KV of 4 microbatches of --sequences sequences of
// --context tokens each, and a device pool that holds ONE microbatch's blocks. Each decode step
// runs the 4 microbatches in turn, swapping each in and out (layer by layer beside the compute,
// then with the whole copy before the compute), against the same steps on a pool that holds
// everything (no swap). Checks the rows are the same bits, and reports the median step time of
// each mode over --steps steps and their ratios to no swap. One stage thread and the copy thread.
//   build/release/bench/mnemo_pipeline_swap_bench [--model PATH] [--sequences 4] [--context 1024] [--steps 16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/model.h"
#include "parallel/microbatch_swap.h"
#include "util/paths.h"

namespace {

using namespace mnemo;
using Clock = std::chrono::steady_clock;

constexpr int32_t kBlockSize = 32;
constexpr int kMicrobatches = 4;

struct Args {
  std::string model = reference_model_path();
  int sequences = 4;
  int context = 1024;
  int steps = 16;
};

// Microbatch m's sequences: blocks [m * per_microbatch, ...), contiguous per sequence.
std::vector<Batch> microbatches(const Args& a, int32_t position, int32_t length, int32_t n_vocab) {
  const int32_t blocks_per_sequence = (a.context + kBlockSize - 1) / kBlockSize + 1;
  std::vector<Batch> out(kMicrobatches);
  for (int m = 0; m < kMicrobatches; ++m) {
    for (int s = 0; s < a.sequences; ++s) {
      SequenceInput seq;
      for (int32_t i = 0; i < length; ++i) seq.tokens.push_back((position + i * 7 + s * 13 + m * 31) % n_vocab);
      seq.ranges = {{position, length}};
      const int32_t first = (m * a.sequences + s) * blocks_per_sequence;
      for (int32_t b = 0; b < blocks_per_sequence; ++b) seq.block_table.push_back(first + b);
      seq.logits = LogitsFor::kNone;
      out[static_cast<size_t>(m)].sequences.push_back(std::move(seq));
    }
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model") a.model = argv[i + 1];
    else if (flag == "--sequences") a.sequences = std::stoi(argv[i + 1]);
    else if (flag == "--context") a.context = std::stoi(argv[i + 1]);
    else if (flag == "--steps") a.steps = std::stoi(argv[i + 1]);
  }
  LoadOptions stage;
  stage.head = false;
  auto loaded = Model::load(a.model, stage);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.error().message().c_str());
    return 1;
  }
  Model& model = **loaded;
  const int32_t n_embd = model.config().n_embd;
  const int32_t blocks_per_sequence = (a.context + kBlockSize - 1) / kBlockSize + 1;
  const int32_t blocks = kMicrobatches * a.sequences * blocks_per_sequence;
  const KvLayout layout = model.stage_kv_layout(kBlockSize);
  KvStorage whole(layout, blocks);   // no swap: every block in the pool the layers run on
  KvStorage host(layout, blocks);    // swap: every block here...
  KvStorage device(layout, a.sequences * blocks_per_sequence);  // ...and one microbatch's here
  parallel::MicrobatchSwap overlapped(host, device, true);
  parallel::MicrobatchSwap serial(host, device, false);
  ThreadPool pool(1);
  // Prefill every microbatch's context on both pools (the swap pool through the swap itself).
  const auto rows_of = [&](const Batch& b) {
    size_t tokens = 0;
    for (const SequenceInput& s : b.sequences) tokens += s.tokens.size();
    return std::vector<float>(tokens * static_cast<size_t>(n_embd), 0.25f);
  };
  for (int32_t start = 0; start < a.context; start += 256) {
    for (Batch& b : microbatches(a, start, std::min(256, a.context - start), model.n_vocab())) {
      std::vector<float> x = rows_of(b), y = x;
      if (!model.run_layers(b, x, whole, pool).ok()) return 1;
      if (!overlapped.run(b, 0, [&](const Batch& s) { return model.run_layers(s, y, device, pool); }).ok()) return 1;
    }
  }
  const double prefill_waits = overlapped.stats().wait_seconds;
  std::vector<double> plain_s, overlap_s, serial_s;
  bool same = true;
  for (int step = 0; step < a.steps; ++step) {
    const int32_t position = a.context + step;
    std::vector<Batch> mbs = microbatches(a, position, 1, model.n_vocab());
    std::vector<std::vector<float>> want, got;
    auto t0 = Clock::now();
    for (Batch& b : mbs) {
      want.push_back(rows_of(b));
      if (!model.run_layers(b, want.back(), whole, pool).ok()) return 1;
    }
    plain_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    parallel::MicrobatchSwap& swap = step % 2 == 0 ? overlapped : serial;
    t0 = Clock::now();
    for (Batch& b : mbs) {
      got.push_back(rows_of(b));
      std::vector<float>& y = got.back();
      if (!swap.run(b, 0, [&](const Batch& s) { return model.run_layers(s, y, device, pool); }).ok()) return 1;
    }
    (step % 2 == 0 ? overlap_s : serial_s).push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    for (size_t m = 0; m < want.size(); ++m) same = same && std::memcmp(want[m].data(), got[m].data(), want[m].size() * 4) == 0;
  }
  const double plain = median(plain_s), over = median(overlap_s), ser = median(serial_s);
  const double mib = static_cast<double>(a.sequences) * blocks_per_sequence * static_cast<double>(layout.block_bytes()) / (1 << 20);
  std::printf("model %s: %d microbatches of %d sequences at %d tokens; device pool %d blocks (%.1f MiB), host %d blocks\n",
              a.model.c_str(), kMicrobatches, a.sequences, a.context, device.n_blocks(), mib, blocks);
  std::printf("step (4 microbatches, decode): no swap %.2f ms | swap overlapped %.2f ms (%.3fx) | swap then compute %.2f ms (%.3fx)\n",
              plain * 1e3, over * 1e3, over / plain, ser * 1e3, ser / plain);
  std::printf("copy waits per step: overlapped %.2f ms, serial %.2f ms; swapped in %.1f MiB a microbatch; rows %s\n",
              (overlapped.stats().wait_seconds - prefill_waits) * 1e3 / static_cast<double>(std::max<size_t>(1, overlap_s.size())),
              serial.stats().wait_seconds * 1e3 / static_cast<double>(std::max<size_t>(1, serial_s.size())), mib, same ? "bit-identical" : "DIFFER");
  return same ? 0 : 1;
}
