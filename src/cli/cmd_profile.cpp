// `mnemo profile`: measures the cost model (src/kv/cost_model.h) of a model on this machine and
// stores it beside the model file, where the cache's retention policy and the engine's
// preemption choice read it.
//   compute: seconds per token of a C-token chunk at context positions l = 0, 256, 512, ...
//            (up to --max-context) with [0, l) already cached: the cost of recomputing dropped
//            KV. A least-squares line a + b * position gives per_token_seconds (the layer
//            matrices) and per_context_token_seconds (attention over the earlier positions).
//   copy:    single-threaded memcpy of whole KV blocks between two separate pools, as the
//            engine's tier moves do (src/kv/kv_cache.cpp).
//   disk:    reads of a temporary file in the profile's directory, block by block, after
//            dropping it from the page cache (posix_fadvise DONTNEED after fsync; mincore tells
//            whether that worked, and the profile records it).
// Each figure is the median of --repeats runs.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "kernels/cpu/type_kernels.h"
#include "kv/cost_model.h"
#include "model/model.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

struct ProfileArgs {
  std::string model_path;
  std::string output;  // empty: cost_model_path_for(model_path)
  int32_t threads = 0;
  int32_t chunk = 32;
  int32_t max_context = 4096;
  int32_t repeats = 5;
};

constexpr int32_t kBlock = 16;                       // the engine's default block size
constexpr int64_t kPrefillPiece = 512;               // fill the context in pieces: bounded activations
constexpr size_t kProbeBytes = size_t{64} << 20;     // per pool / file: beyond the CPU caches

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// 0, 256, 512, 1024, ... up to max_context, keeping every chunk inside the model's context.
std::vector<int64_t> context_grid(int64_t max_context, int64_t chunk, int64_t context_length) {
  std::vector<int64_t> grid;
  for (int64_t l = 0; l <= max_context && l + chunk <= context_length; l = l == 0 ? 256 : 2 * l) grid.push_back(l);
  return grid;
}

Result<std::vector<CostPoint>> measure_compute(Model& model, ThreadPool& pool, const std::vector<int64_t>& starts,
                                               int32_t chunk, int32_t repeats) {
  const int64_t total = starts.back() + chunk;
  KvStorage kv(model.kv_layout(kBlock), static_cast<int32_t>((total + kBlock - 1) / kBlock));
  std::vector<TokenId> tokens(static_cast<size_t>(total));
  std::mt19937 rng(1);
  std::uniform_int_distribution<TokenId> dist(100, std::min(model.n_vocab(), 20000) - 1);
  for (TokenId& t : tokens) t = dist(rng);
  std::vector<BlockId> table(static_cast<size_t>(kv.n_blocks()));
  std::iota(table.begin(), table.end(), 0);

  // The input that computes positions [start, start + n): the chunk's own tokens, so a timed
  // run rewrites exactly the KV that was there and every later chunk keeps its context.
  const auto input = [&](int64_t start, int64_t n) {
    SequenceInput seq;
    seq.tokens.assign(tokens.begin() + start, tokens.begin() + start + n);
    seq.ranges = {{static_cast<int32_t>(start), static_cast<int32_t>(n)}};
    seq.block_table = table;
    seq.logits = LogitsFor::kNone;  // recomputing KV needs no logits
    Batch batch;
    batch.sequences.push_back(std::move(seq));
    return batch;
  };
  ForwardOutput out;
  for (int64_t start = 0; start < total; start += kPrefillPiece) {
    MNEMO_RETURN_IF_ERROR(model.forward(input(start, std::min(kPrefillPiece, total - start)), kv, pool, out));
  }
  MNEMO_RETURN_IF_ERROR(model.forward(input(starts.front(), chunk), kv, pool, out));  // warm-up, untimed

  // Repeats go round the whole grid, so a slow spell of a shared machine spreads over every
  // position instead of bending the line.
  std::vector<std::vector<double>> samples(starts.size());
  for (int32_t r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < starts.size(); ++i) {
      const Batch batch = input(starts[i], chunk);
      const auto begin = std::chrono::steady_clock::now();
      MNEMO_RETURN_IF_ERROR(model.forward(batch, kv, pool, out));
      samples[i].push_back(seconds_since(begin) / chunk);
    }
  }
  std::vector<CostPoint> points;
  for (size_t i = 0; i < starts.size(); ++i) points.push_back({starts[i], chunk, median(samples[i])});
  return points;
}

// Bytes per second of block-by-block memcpy between two pools, both directions.
double measure_copy(const KvLayout& layout, int32_t repeats) {
  const int32_t n_blocks = static_cast<int32_t>(std::max<size_t>(1, kProbeBytes / layout.block_bytes()));
  KvStorage device(layout, n_blocks), host(layout, n_blocks);
  // Anonymous pages are only backed when first written: fault them all in before timing.
  std::memset(device.block(0), 1, static_cast<size_t>(n_blocks) * layout.block_bytes());
  std::memset(host.block(0), 2, static_cast<size_t>(n_blocks) * layout.block_bytes());
  const double bytes = static_cast<double>(n_blocks) * static_cast<double>(layout.block_bytes());
  std::vector<double> rates;
  for (int32_t r = 0; r < std::max(repeats, 3); ++r) {
    for (const bool to_host : {true, false}) {
      KvStorage& from = to_host ? device : host;
      KvStorage& to = to_host ? host : device;
      const auto begin = std::chrono::steady_clock::now();
      for (BlockId b = 0; b < n_blocks; ++b) std::memcpy(to.block(b), from.block(b), layout.block_bytes());
      rates.push_back(bytes / seconds_since(begin));
    }
  }
  return median(rates);
}

struct DiskRead {
  double bytes_per_second = 0;
  bool cache_dropped = false;  // every timed read started with (almost) none of the file cached
  double worst_resident = 0;   // the largest fraction of the file still cached before a read
};

// Fraction of the file's pages in the page cache.
double resident_fraction(int fd, size_t bytes) {
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 1.0;  // unknown: assume cached, so the figure is not overclaimed
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> pages((bytes + page - 1) / page);
  double fraction = 1.0;
  if (mincore(map, bytes, pages.data()) == 0) {
    fraction = static_cast<double>(std::count_if(pages.begin(), pages.end(), [](unsigned char p) { return p & 1; })) /
               static_cast<double>(pages.size());
  }
  munmap(map, bytes);
  return fraction;
}

// The disk probe's file: closed and removed however the measurement ends.
struct ProbeFile {
  std::string path;
  int fd = -1;
  explicit ProbeFile(std::string p) : path(std::move(p)) {}
  ProbeFile(const ProbeFile&) = delete;
  ProbeFile& operator=(const ProbeFile&) = delete;
  ~ProbeFile() {
    if (fd < 0) return;
    close(fd);
    std::remove(path.c_str());
  }
};

Result<DiskRead> measure_disk_read(const std::string& dir, size_t read_bytes, int32_t repeats) {
  ProbeFile file(dir + "/.mnemo-profile-probe." + std::to_string(getpid()) + ".tmp");
  const std::string& path = file.path;
  file.fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int fd = file.fd;
  if (fd < 0) return make_error("{}: cannot create the disk probe file: {}", path, std::strerror(errno));

  const size_t n_reads = std::max<size_t>(1, kProbeBytes / read_bytes);
  const size_t bytes = n_reads * read_bytes;
  std::vector<uint8_t> buffer(read_bytes);
  std::mt19937 rng(2);
  for (uint8_t& b : buffer) b = static_cast<uint8_t>(rng());  // incompressible, not sparse
  for (size_t i = 0; i < n_reads; ++i) {
    if (pwrite(fd, buffer.data(), read_bytes, static_cast<off_t>(i * read_bytes)) != static_cast<ssize_t>(read_bytes)) {
      return make_error("{}: write failed: {}", path, std::strerror(errno));
    }
  }
  if (fsync(fd) != 0) return make_error("{}: fsync failed: {}", path, std::strerror(errno));

  DiskRead result;
  result.cache_dropped = true;
  std::vector<double> rates;
  for (int32_t r = 0; r < std::max(repeats, 3); ++r) {
    posix_fadvise(fd, 0, static_cast<off_t>(bytes), POSIX_FADV_DONTNEED);  // clean pages: dropped if the kernel can
    const double resident = resident_fraction(fd, bytes);
    result.worst_resident = std::max(result.worst_resident, resident);
    if (resident > 0.05) result.cache_dropped = false;
    const auto begin = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n_reads; ++i) {
      if (pread(fd, buffer.data(), read_bytes, static_cast<off_t>(i * read_bytes)) != static_cast<ssize_t>(read_bytes)) {
        return make_error("{}: read failed: {}", path, std::strerror(errno));
      }
    }
    rates.push_back(static_cast<double>(bytes) / seconds_since(begin));
  }
  result.bytes_per_second = median(rates);
  return result;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void print_points(const std::vector<CostPoint>& points, const CostLine& fit) {
  std::printf("%-18s %12s %12s %9s\n", "compute positions", "ms/token", "fit", "residual");
  for (const CostPoint& p : points) {
    const double fitted = fit.per_token_seconds + fit.per_context_token_seconds * p.mean_position();
    const std::string range = std::to_string(p.start) + ".." + std::to_string(p.start + p.tokens - 1);
    std::printf("%-18s %12.4f %12.4f %8.1f%%\n", range.c_str(), p.seconds_per_token * 1e3, fitted * 1e3,
                100.0 * (p.seconds_per_token - fitted) / fitted);
  }
  std::printf("fit: per token %.4f ms + %.3g ms x position (a token at 4096 costs %.2fx one at 0)\n",
              fit.per_token_seconds * 1e3, fit.per_context_token_seconds * 1e3,
              1.0 + fit.per_context_token_seconds * 4096 / fit.per_token_seconds);
}

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message().c_str());
  return 1;
}

int run_profile(const ProfileArgs& args) {
  const std::string output = args.output.empty() ? cost_model_path_for(args.model_path) : args.output;
  auto loaded = Model::load(args.model_path);
  if (!loaded.ok()) return fail(loaded.error());
  std::string dir = std::filesystem::path(output).parent_path().string();
  if (dir.empty()) dir = ".";
  if (access(dir.c_str(), W_OK) != 0) {  // found out now, not after minutes of measuring
    return fail(make_error("{}: cannot write the profile here: {}", dir, std::strerror(errno)));
  }
  Model& model = **loaded;
  ThreadPool pool(args.threads);
  const std::vector<int64_t> starts = context_grid(args.max_context, args.chunk, model.config().context_length);
  if (starts.empty()) {
    return fail(make_error("a chunk of {} tokens does not fit the model's context of {}", args.chunk,
                           model.config().context_length));
  }
  CostModel cost;
  CostProvenance& p = cost.measured;
  p.model_file = std::filesystem::path(args.model_path).filename().string();
  p.measured_at = utc_now();
  p.threads = pool.size();
  p.isa = std::string(kernels::isa_name(kernels::detected_isa()));
  std::printf("model %s, %d threads, isa %s, chunks of %d tokens, kv f16 in blocks of %d, median of %d repeats\n",
              p.model_file.c_str(), p.threads, p.isa.c_str(), args.chunk, kBlock, args.repeats);
  std::fflush(stdout);

  auto points = measure_compute(model, pool, starts, args.chunk, args.repeats);
  if (!points.ok()) return fail(points.error().with_context(args.model_path));
  const auto fit = fit_cost_line(*points);
  if (!fit.ok()) return fail(fit.error());
  print_points(*points, *fit);
  cost.per_token_seconds = fit->per_token_seconds;
  cost.per_context_token_seconds = fit->per_context_token_seconds;
  p.points = *points;

  const KvLayout layout = model.kv_layout(kBlock);
  cost.copy_bytes_per_second = measure_copy(layout, args.repeats);
  std::printf("copy: %.2f GB/s (memcpy of %zu KiB KV blocks between two %zu MiB pools, both ways)\n",
              cost.copy_bytes_per_second / 1e9, layout.block_bytes() >> 10, kProbeBytes >> 20);

  const auto disk = measure_disk_read(dir, layout.block_bytes(), args.repeats);
  if (!disk.ok()) return fail(disk.error());
  cost.disk_read_bytes_per_second = disk->bytes_per_second;
  p.disk_cache_dropped = disk->cache_dropped;
  std::printf("disk read: %.2f GB/s (%zu MiB in %zu KiB reads in %s; %s)\n", disk->bytes_per_second / 1e9,
              kProbeBytes >> 20, layout.block_bytes() >> 10, dir.c_str(),
              disk->cache_dropped ? "page cache dropped before each read" : "NOT dropped from the page cache");
  if (!disk->cache_dropped) {
    std::printf("warning: up to %.0f%% of the probe file stayed cached (tmpfs?): the disk figure is the page cache's\n",
                100.0 * disk->worst_resident);
  }

  const Status saved = save_cost_model(cost, output);
  if (!saved.ok()) return fail(saved.error());
  std::printf("wrote %s\n", output.c_str());
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<ProfileArgs>();
  args->model_path = reference_model_path();
  CLI::App* cmd = app.add_subcommand("profile", "Measure a model's recompute cost and the copy and disk bandwidths, "
                                                "and store them beside the model");
  cmd->add_option("-m,--model", args->model_path, "GGUF model file")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Worker threads (0: one per core)")->capture_default_str();
  cmd->add_option("-c,--chunk", args->chunk, "Tokens per timed chunk")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--max-context", args->max_context, "Largest context position measured")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-r,--repeats", args->repeats, "Repeats (the median is used)")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_option("-o,--output", args->output, "Profile file (default: <model>.profile.json beside the model)");
  cmd->callback([&run, args] { run = [args] { return run_profile(*args); }; });
}

}  // namespace mnemo::cli
