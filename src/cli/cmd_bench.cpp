// `mnemo bench`: the model runtime's speed on this machine, in the shapes llama-bench and
// llama-batched-bench measure (bench/compare_llama_cpp.sh runs them side by side):
//   prefill: a P-token prompt in one forward pass (tokens/s);
//   decode:  B sequences with a C-token context each, advancing one token per step together
//            (generated tokens/s over all sequences).
//   memory:  the machine's streaming read bandwidth with the same threads (a plain sum over a
//            buffer far larger than the caches), measured right before each batch-1 repeat;
//   roofline: bytes of weights one batch-1 decode step reads (every layer matrix and the output
//            matrix, once) divided by the step time, as a fraction of that bandwidth.
//   compute: the other side of the roofline, for the largest batch: the multiply-adds of its
//            weight products per step divided by the step time, as a fraction of the int8
//            dot-product peak of the same threads (kernels/cpu/int8_peak.h), measured right
//            before each of its repeats; and the step rate that peak would allow if the weight
//            products were all a step did (so, against batch 1, the ceiling of batching).
//   verify:  speculative decoding's verification (--verify-rows): B sequences each running R
//            query rows (the last token and R - 1 drafted ones, every row's argmax found) per
//            step, as time per step over the one-row step's: the tokens a pass must yield per
//            sequence to break even, and where extra rows stop being nearly free.
// Each figure is the median of --repeats runs. The decode batch sizes take turns, one run each
// per round, and the scaling line gives each batch's rate over batch 1's round by round.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/sampler.h"
#include "kernels/cpu/int8_peak.h"
#include "kernels/cpu/type_kernels.h"
#include "model/model.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

struct BenchArgs {
  std::string model_path;
  int32_t threads = 0;
  int32_t prompt = 512;
  int32_t context = 128;
  int32_t steps = 32;
  std::vector<int32_t> batches = {1, 8, 32};
  int32_t repeats = 3;
  std::string kv_type = "f16";
  bool full_logits = false;
  std::vector<int32_t> verify_rows;
  ModelFlags model_flags;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Streaming read bandwidth of the pool's threads, in bytes per second: a plain sum over a buffer
// far larger than the caches. The memory of a shared machine is shared too, so the bandwidth is
// measured next to each batch-1 decode repeat and the roofline pairs them.
class BandwidthProbe {
 public:
  static constexpr size_t kBytes = size_t{256} << 20;
  static constexpr int kPasses = 3;

  BandwidthProbe() : buffer_(kBytes / sizeof(uint64_t), 1) {}  // written once: every page present

  // The median of kPasses passes.
  double measure(ThreadPool& pool) {
    std::vector<uint64_t> sums(static_cast<size_t>(pool.size()));
    std::vector<double> rates;
    for (int pass = 0; pass < kPasses; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      pool.parallel_for(static_cast<int64_t>(buffer_.size() / 8), [&](int64_t begin, int64_t end, int t) {
        // Eight independent sums so that the loads, not the adds, set the pace.
        uint64_t acc[8] = {};
        for (int64_t i = begin; i < end; ++i) {
          for (int k = 0; k < 8; ++k) acc[k] += buffer_[static_cast<size_t>(i) * 8 + static_cast<size_t>(k)];
        }
        sums[static_cast<size_t>(t)] = std::accumulate(acc, acc + 8, uint64_t{0});
      });
      rates.push_back(static_cast<double>(kBytes) / seconds_since(start));
    }
    if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) == 0) std::printf(" ");  // keeps the sums alive
    return median(rates);
  }

 private:
  std::vector<uint64_t> buffer_;
};

// The int8 dot-product peak of the pool's threads together, in multiply-adds per second: each
// thread issues the probe's instructions alone for a few milliseconds; median of kPasses.
class ComputeProbe {
 public:
  static constexpr int kPasses = 3;
  static constexpr int64_t kRoundsPerThread = int64_t{1} << 19;

  explicit ComputeProbe(const kernels::Int8Peak& peak) : peak_(peak) {}

  double measure(ThreadPool& pool) {
    std::vector<double> rates;
    std::vector<kernels::Int8PeakRun> runs(static_cast<size_t>(pool.size()));
    for (int pass = 0; pass < kPasses; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      pool.run_on_all([&](int t) { runs[static_cast<size_t>(t)] = peak_.run(kRoundsPerThread, 3, 5); });
      const double seconds = seconds_since(start);
      int64_t macs = 0;
      for (const kernels::Int8PeakRun& r : runs) macs += r.macs;
      rates.push_back(static_cast<double>(macs) / seconds);
    }
    return median(rates);
  }

 private:
  const kernels::Int8Peak& peak_;
};

// Multiply-adds of the weight products of one decode step per sequence: every layer matrix and
// the output matrix, once.
double decode_weight_macs(const Model& model) {
  const auto macs = [](const WeightMatrix& w) { return static_cast<double>(w.in_features) * static_cast<double>(w.out_features); };
  double total = macs(model.weights().output);
  for (const LayerWeights& l : model.weights().layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) total += macs(*w);
  }
  return total;
}

// Bytes of the weight matrices a batch-1 decode step reads: every layer matrix and the output
// matrix once (the embedding lookup reads one row).
double decode_weight_bytes(const Model& model) {
  const auto bytes = [](const WeightMatrix& w) { return static_cast<double>(w.row_bytes()) * static_cast<double>(w.out_features); };
  double total = bytes(model.weights().output);
  for (const LayerWeights& l : model.weights().layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) total += bytes(*w);
  }
  return total;
}

std::vector<TokenId> random_tokens(int32_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> dist(100, std::min(vocab, 20000) - 1);
  std::vector<TokenId> out(static_cast<size_t>(n));
  for (TokenId& t : out) t = dist(rng);
  return out;
}

constexpr int32_t kBenchBlock = 16;

// One decode run per batch size in each round, so that every batch size meets the shared
// machine in the same states and the ratios between them can be taken round by round.
struct DecodeRun {
  int32_t batch_size;
  std::unique_ptr<KvStorage> kv;
  Batch batch;
  std::vector<double> rates;  // tokens/s, one per round
};

// What the probes measured beside the runs, one figure per round.
struct ProbeFigures {
  std::vector<double> bandwidths, roofline_fractions;  // batch 1
  std::vector<double> peaks, compute_fractions;        // the largest batch
};

Status bench_prefill(Model& model, ThreadPool& pool, const BenchArgs& args, DType kv_dtype) {
  KvStorage kv(model.kv_layout(kBenchBlock, kv_dtype), (args.prompt + kBenchBlock - 1) / kBenchBlock);
  SequenceInput seq;
  seq.tokens = random_tokens(args.prompt, model.n_vocab(), 1);
  seq.ranges = {{0, args.prompt}};
  seq.block_table.resize(static_cast<size_t>(kv.n_blocks()));
  std::iota(seq.block_table.begin(), seq.block_table.end(), 0);
  Batch batch;
  batch.sequences.push_back(seq);
  ForwardOutput out;
  std::vector<double> rates;
  for (int32_t r = 0; r < args.repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    MNEMO_RETURN_IF_ERROR(model.forward(batch, kv, pool, out));
    rates.push_back(args.prompt / seconds_since(start));
  }
  std::printf("prefill  pp%-4d            %8.1f tokens/s\n", args.prompt, median(rates));
  return ok_status();
}

std::vector<DecodeRun> decode_runs(const Model& model, const BenchArgs& args, DType kv_dtype) {
  std::vector<DecodeRun> runs;
  const int32_t per_seq_blocks = (args.context + args.steps + kBenchBlock - 1) / kBenchBlock;
  for (const int32_t batch_size : args.batches) {
    DecodeRun run{batch_size, std::make_unique<KvStorage>(model.kv_layout(kBenchBlock, kv_dtype), per_seq_blocks * batch_size), {}, {}};
    for (int32_t s = 0; s < batch_size; ++s) {
      SequenceInput seq;
      seq.tokens = random_tokens(args.context, model.n_vocab(), static_cast<uint32_t>(s + 2));
      seq.ranges = {{0, args.context}};
      for (int32_t b = 0; b < per_seq_blocks; ++b) seq.block_table.push_back(s * per_seq_blocks + b);
      run.batch.sequences.push_back(seq);
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

// Fills the run's contexts (not timed), then times its decode steps: tokens/s.
Result<double> time_decode(Model& model, ThreadPool& pool, const BenchArgs& args, DecodeRun& run, std::vector<Sampler>& samplers) {
  ForwardOutput out;
  Batch prefill = run.batch;
  for (SequenceInput& seq : prefill.sequences) seq.tokens.resize(static_cast<size_t>(args.context));
  MNEMO_RETURN_IF_ERROR(model.forward(prefill, *run.kv, pool, out));
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Batch step = run.batch;
  // Greedy decoding as the engine runs it: the model finds each token (LogitsFor::kArgmax),
  // or with --full-logits every logit is computed and a sampler takes the largest.
  for (SequenceInput& seq : step.sequences) seq.logits = args.full_logits ? LogitsFor::kLast : LogitsFor::kArgmax;
  const auto start = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < args.steps; ++i) {
    // The sequences are sampled in parallel, as an engine would (one sampler per thread).
    pool.parallel_for(static_cast<int64_t>(step.sequences.size()), [&](int64_t begin, int64_t end, int t) {
      for (int64_t s = begin; s < end; ++s) {
        const auto at = static_cast<size_t>(s);
        const TokenId next = out.argmax[at] >= 0 ? out.argmax[at]
                                                 : samplers[static_cast<size_t>(t)].sample(
                                                       greedy, {out.last_row(at), static_cast<size_t>(out.n_vocab)}, {},
                                                       static_cast<uint64_t>(i));
        step.sequences[at].tokens = {next};
        step.sequences[at].ranges = {{args.context + i, 1}};
      }
    });
    MNEMO_RETURN_IF_ERROR(model.forward(step, *run.kv, pool, out));
  }
  return static_cast<double>(run.batch_size) * args.steps / seconds_since(start);
}

// Each batch size's median rate, and its rounds' ratios to batch 1.
void report_decode(const std::vector<DecodeRun>& runs, const BenchArgs& args) {
  const DecodeRun* batch1_run = nullptr;
  for (const DecodeRun& run : runs) {
    std::printf("decode   batch %-3d ctx %-4d %8.1f tokens/s\n", run.batch_size, args.context, median(run.rates));
    if (run.batch_size == 1) batch1_run = &run;
  }
  if (batch1_run == nullptr) return;
  for (const DecodeRun& run : runs) {
    if (run.batch_size == 1) continue;
    std::vector<double> ratios;
    std::string listed;
    for (size_t i = 0; i < run.rates.size(); ++i) {
      ratios.push_back(run.rates[i] / batch1_run->rates[i]);
      listed += fmt::format("{}{:.2f}", i == 0 ? "" : " ", ratios.back());
    }
    std::printf("scaling  batch %-3d / batch 1  %8.2fx (median of the rounds' ratios: %s)\n", run.batch_size,
                median(ratios), listed.c_str());
  }
}

void report_probes(const Model& model, const ThreadPool& pool, const ProbeFigures& probes, double batch1_rate,
                   int32_t compute_batch, double compute_batch_rate) {
  const double weight_bytes = decode_weight_bytes(model);
  if (batch1_rate > 0.0) {
    std::printf("memory   read bandwidth      %8.1f GB/s (%d threads; median of %d passes over %zu MiB next to each "
                "batch-1 repeat)\n",
                median(probes.bandwidths) / 1e9, pool.size(), BandwidthProbe::kPasses, BandwidthProbe::kBytes >> 20);
    std::printf("roofline batch 1: %.1f MB of weights per step, %.1f GB/s = %.0f%% of measured bandwidth "
                "(median over repeats)\n",
                weight_bytes / 1e6, weight_bytes * batch1_rate / 1e9, 100.0 * median(probes.roofline_fractions));
  }
  if (compute_batch_rate <= 0.0) return;
  const double step_macs = decode_weight_macs(model) * compute_batch;
  const double peak = median(probes.peaks);
  std::printf("compute  int8 peak           %8.1f GMAC/s (%d threads, %s; median of %d passes next to each batch-%d "
              "repeat)\n",
              peak / 1e9, pool.size(), std::string(kernels::isa_name(kernels::detected_isa())).c_str(), ComputeProbe::kPasses,
              compute_batch);
  std::printf("compute  batch %d: %.2f GMAC of weight products per step, %.1f GMAC/s = %.0f%% of the int8 peak "
              "(median over repeats)\n",
              compute_batch, step_macs / 1e9, step_macs * compute_batch_rate / compute_batch / 1e9,
              100.0 * median(probes.compute_fractions));
  const double ceiling_rate = compute_batch * peak / step_macs;
  std::printf("ceiling  batch %d if its weight products ran at the int8 peak and nothing else did: %.1f tokens/s",
              compute_batch, ceiling_rate);
  if (batch1_rate > 0.0) std::printf(" = %.1fx batch 1 (measured: %.1fx)", ceiling_rate / batch1_rate, compute_batch_rate / batch1_rate);
  std::printf("\n");
}

// Seconds per step of `run`'s sequences each running `rows` query rows after their contexts
// (filled before), the same positions every step: the median of --steps steps.
Result<double> time_verify_step(Model& model, ThreadPool& pool, const BenchArgs& args, DecodeRun& run, int32_t rows) {
  ForwardOutput out;
  Batch step = run.batch;
  for (size_t s = 0; s < step.sequences.size(); ++s) {
    SequenceInput& seq = step.sequences[s];
    seq.tokens = random_tokens(rows, model.n_vocab(), static_cast<uint32_t>(1000 + s));
    seq.ranges = {{args.context, rows}};
    seq.logits = LogitsFor::kArgmaxAll;
  }
  std::vector<double> seconds;
  for (int32_t i = 0; i < args.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    MNEMO_RETURN_IF_ERROR(model.forward(step, *run.kv, pool, out));
    seconds.push_back(seconds_since(start));
  }
  return median(seconds);
}

Status bench_verify(Model& model, ThreadPool& pool, const BenchArgs& args, DType kv_dtype) {
  const int32_t max_rows = *std::max_element(args.verify_rows.begin(), args.verify_rows.end());
  BenchArgs sized = args;
  sized.steps = std::max(args.steps, max_rows);  // decode_runs' blocks cover context + steps
  std::vector<DecodeRun> runs = decode_runs(model, sized, kv_dtype);
  for (DecodeRun& run : runs) {
    ForwardOutput out;
    Batch prefill = run.batch;
    for (SequenceInput& seq : prefill.sequences) seq.tokens.resize(static_cast<size_t>(args.context));
    MNEMO_RETURN_IF_ERROR(model.forward(prefill, *run.kv, pool, out));
    // Round by round, one row then each row count, so the ratios pair steps of the same moment.
    std::vector<std::vector<double>> ratios(args.verify_rows.size());
    std::vector<double> one_row;
    for (int32_t r = 0; r < args.repeats; ++r) {
      MNEMO_ASSIGN_OR_RETURN(const double base, time_verify_step(model, pool, args, run, 1));
      one_row.push_back(base);
      for (size_t i = 0; i < args.verify_rows.size(); ++i) {
        MNEMO_ASSIGN_OR_RETURN(const double t, time_verify_step(model, pool, args, run, args.verify_rows[i]));
        ratios[i].push_back(t / base);
      }
    }
    std::printf("verify   batch %-3d ctx %-4d 1 row %7.2f ms per step\n", run.batch_size, args.context, 1e3 * median(one_row));
    for (size_t i = 0; i < args.verify_rows.size(); ++i) {
      const double ratio = median(ratios[i]);
      std::printf("verify   batch %-3d %2d rows     %7.2fx the step time (%.3f per extra row): break-even at %.2f tokens "
                  "per pass\n",
                  run.batch_size, args.verify_rows[i], ratio, args.verify_rows[i] > 1 ? (ratio - 1) / (args.verify_rows[i] - 1) : 0.0,
                  ratio);
    }
  }
  return ok_status();
}

int run_bench(const BenchArgs& args) {
  auto loaded = Model::load(args.model_path, args.model_flags.load_options());
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.error().message().c_str());
    return 1;
  }
  Model& model = **loaded;
  ThreadPool pool(args.threads);
  const DType kv_dtype = args.kv_type == "f32" ? DType::F32 : DType::F16;
  std::printf("model %s, %d threads, isa %s, kv %s, %zu matrices prepacked (%.1f MiB beyond the file)\n",
              args.model_path.c_str(), pool.size(), std::string(kernels::isa_name(kernels::detected_isa())).c_str(),
              args.kv_type.c_str(), model.weights().packed_tiles.size(),
              static_cast<double>(model.weights().prepacked_extra_bytes) / (1 << 20));
  if (const Status prefilled = bench_prefill(model, pool, args, kv_dtype); !prefilled.ok()) {
    std::fprintf(stderr, "error: %s\n", prefilled.error().message().c_str());
    return 1;
  }

  if (!args.verify_rows.empty()) {
    if (const Status verified = bench_verify(model, pool, args, kv_dtype); !verified.ok()) {
      std::fprintf(stderr, "error: %s\n", verified.error().message().c_str());
      return 1;
    }
    return 0;
  }
  std::vector<Sampler> samplers(static_cast<size_t>(pool.size()));
  // The compute side, for the largest batch above 1 (when the ISA has an int8 vector probe).
  const kernels::Int8Peak* int8_peak = kernels::int8_peak(kernels::detected_isa());
  const int32_t compute_batch = *std::max_element(args.batches.begin(), args.batches.end());
  std::vector<DecodeRun> runs = decode_runs(model, args, kv_dtype);
  std::unique_ptr<BandwidthProbe> probe;
  if (std::find(args.batches.begin(), args.batches.end(), 1) != args.batches.end()) probe = std::make_unique<BandwidthProbe>();
  std::unique_ptr<ComputeProbe> compute_probe;
  if (int8_peak != nullptr && compute_batch > 1) compute_probe = std::make_unique<ComputeProbe>(*int8_peak);
  ProbeFigures probes;
  for (int32_t r = 0; r < args.repeats; ++r) {
    for (DecodeRun& run : runs) {
      const bool probes_bandwidth = probe != nullptr && run.batch_size == 1;
      const bool probes_compute = compute_probe != nullptr && run.batch_size == compute_batch;
      if (probes_bandwidth) probes.bandwidths.push_back(probe->measure(pool));
      if (probes_compute) probes.peaks.push_back(compute_probe->measure(pool));
      const Result<double> rate = time_decode(model, pool, args, run, samplers);
      if (!rate.ok()) {
        std::fprintf(stderr, "error: %s\n", rate.error().message().c_str());
        return 1;
      }
      run.rates.push_back(*rate);
      if (probes_bandwidth) probes.roofline_fractions.push_back(decode_weight_bytes(model) * *rate / probes.bandwidths.back());
      // rates are tokens/s: one token per sequence per step, so MACs/s = per-token MACs x rate.
      if (probes_compute) probes.compute_fractions.push_back(decode_weight_macs(model) * *rate / probes.peaks.back());
    }
  }
  report_decode(runs, args);
  double batch1_rate = 0.0, compute_batch_rate = 0.0;
  for (const DecodeRun& run : runs) {
    if (run.batch_size == 1) batch1_rate = median(run.rates);
    if (compute_probe && run.batch_size == compute_batch) compute_batch_rate = median(run.rates);
  }
  report_probes(model, pool, probes, batch1_rate, compute_batch, compute_batch_rate);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<BenchArgs>();
  args->model_path = reference_model_path();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and batched decode speed of a model");
  cmd->add_option("-m,--model", args->model_path, "GGUF model file")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Worker threads (0: one per core)")->capture_default_str();
  cmd->add_option("-p,--prompt", args->prompt, "Prefill length")->capture_default_str()->check(CLI::Range(1, 65536));
  cmd->add_option("-c,--context", args->context, "Context per sequence before decoding")->capture_default_str()->check(CLI::Range(1, 65536));
  cmd->add_option("-n,--steps", args->steps, "Decode steps")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("-b,--batches", args->batches, "Decode batch sizes")->capture_default_str()->delimiter(',');
  cmd->add_option("-r,--repeats", args->repeats, "Repeats (the median is reported)")->capture_default_str()->check(CLI::Range(1, 100));
  args->model_flags.add_to(cmd);
  cmd->add_option("--kv-type", args->kv_type, "KV cache element type")->capture_default_str()->check(CLI::IsMember({"f16", "f32"}));
  cmd->add_flag("--full-logits", args->full_logits,
                "Decode with every logit computed and sampled from (the path of requests with logprobs or penalties) "
                "instead of the greedy path, where the output projection keeps only each row's largest logit");
  cmd->add_option("--verify-rows", args->verify_rows,
                  "Instead of decoding, time steps of each batch size whose sequences run this many query rows (a "
                  "speculative draft's verification), against one row")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  cmd->callback([&run, args] { run = [args] { return run_bench(*args); }; });
}

}  // namespace mnemo::cli
