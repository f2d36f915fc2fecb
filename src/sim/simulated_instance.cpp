#include "sim/simulated_instance.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace mnemo::sim {
namespace {

// Per layer and token, K and V of this many F16 elements each: a block's bytes dwarf a disk
// extent's header, as the real model's do, while a tier of a million chunks stays in memory.
constexpr int32_t kHeadDim = 8;

KvLayout small_layout(const SimConfig& config) {
  KvLayout layout;
  layout.n_layers = config.sliding_window > 0 ? config.layers : 1;
  layout.n_kv_heads = 1;
  layout.head_dim_k = kHeadDim;
  layout.head_dim_v = kHeadDim;
  layout.block_size = config.chunk_tokens;
  layout.dtype = DType::F16;
  return layout;
}

KvLayout compact_layout(const SimConfig& config) {
  KvLayout layout = small_layout(config);
  layout.n_layers = config.sliding_window > 0 ? config.global_layers : 0;
  return layout;
}

// The disk tier's extents live in memory where the system has a memory file system (its syncs
// then cost nothing).
Result<std::string> make_scratch_directory() {
  std::error_code ec;
  const std::filesystem::path base =
      std::filesystem::is_directory("/dev/shm", ec) ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path(ec);
  std::string pattern = (base / "mnemo-simulate-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) return make_error("cannot make a scratch folder for the disk tier in {}", base.string());
  return pattern;
}

// The disk tier as `serve` opens it, holding as many extents as the real model's chunks would
// fill (a header is a larger share of the small layout's extents than of the model's: counted
// per extent, not per byte).
Result<std::shared_ptr<DiskTier>> open_disk(const SimConfig& config, const std::string& dir) {
  const KvLayout layout = small_layout(config);
  const auto extent_bytes =
      static_cast<int64_t>(DiskTier::header_bytes(static_cast<size_t>(config.chunk_tokens)) + layout.block_bytes());
  MNEMO_ASSIGN_OR_RETURN(auto disk, DiskTier::open(dir, 1, layout.block_bytes(), config.capacity_chunks()[2] * extent_bytes,
                                                   compact_layout(config).block_bytes()));
  disk->wait_for_each_write();  // the cache sees every write completed: a replay is reproducible
  return std::shared_ptr<DiskTier>(std::move(disk));
}

}  // namespace

Status check_sim_config(const SimConfig& config) {
  if (config.chunk_tokens <= 0) return make_error("chunk size must be positive, got {}", config.chunk_tokens);
  if (config.kv_bytes_per_token <= 0) return make_error("KV bytes per token must be positive, got {}", config.kv_bytes_per_token);
  if (config.sliding_window < 0 ||
      (config.sliding_window > 0 && (config.layers < 1 || config.layers > 1024 || config.global_layers < 1 ||
                                     config.global_layers > config.layers || config.chunk_bytes() % config.layers != 0))) {
    return make_error("sliding window {} over {} layers, {} global: a window needs 1 <= global layers <= layers, "
                      "and a chunk's bytes divisible by its layers",
                      config.sliding_window, config.layers, config.global_layers);
  }
  for (const int64_t b : config.capacity_bytes) {
    if (b < 0) return make_error("a tier capacity is negative ({} bytes)", b);
  }
  if (!(config.host_compact_share >= 0 && config.host_compact_share <= 1)) {
    return make_error("the host's compact share must be within [0, 1], got {}", config.host_compact_share);
  }
  if (config.capacity_chunks()[0] < 1) {
    return make_error("the device tier ({} bytes) holds no chunk of {} bytes", config.capacity_bytes[0], config.chunk_bytes());
  }
  for (const int64_t n : config.capacity_chunks()) {
    if (n > (int64_t{1} << 28)) return make_error("a tier of {} chunks is beyond the replay's range", n);
  }
  return ok_status();
}

SimulatedInstance::SimulatedInstance(const SimConfig& config, const double* clock)
    : config_(config), clock_(clock), layout_(small_layout(config)) {}

SimulatedInstance::~SimulatedInstance() {
  kv_.reset();
  disk_.reset();
  std::error_code ec;
  if (!scratch_.empty()) std::filesystem::remove_all(scratch_, ec);
}

Result<std::unique_ptr<SimulatedInstance>> SimulatedInstance::make(const SimConfig& config, RetentionPolicy policy,
                                                                   const double* clock, NextUse next_use) {
  MNEMO_RETURN_IF_ERROR(check_sim_config(config));
  std::unique_ptr<SimulatedInstance> instance(new SimulatedInstance(config, clock));
  if (config.capacity_chunks()[2] > 0) {
    MNEMO_ASSIGN_OR_RETURN(instance->scratch_, make_scratch_directory());
    MNEMO_ASSIGN_OR_RETURN(instance->disk_, open_disk(config, instance->scratch_));
  }
  instance->kv_ = std::make_unique<KvCache>(instance->layout_, instance->pool_config(policy, instance->disk_, std::move(next_use)));
  return instance;
}

KvPoolConfig SimulatedInstance::pool_config(RetentionPolicy policy, std::shared_ptr<DiskTier> disk, NextUse next_use) const {
  KvPoolConfig c;
  c.disk = std::move(disk);
  const std::array<int64_t, kTierCount> chunks = config_.capacity_chunks();
  c.device_blocks = static_cast<int32_t>(chunks[0]);
  c.host_blocks = static_cast<int32_t>(chunks[1]);
  if (config_.sliding_window > 0) {
    std::vector<int32_t> global(static_cast<size_t>(config_.global_layers));
    for (int32_t l = 0; l < config_.global_layers; ++l) global[static_cast<size_t>(l)] = l;
    use_sliding_window(c, config_.sliding_window, std::move(global));
    // The host's bytes split between whole and compact copies as `serve`'s pools are. Both hold
    // the host's type: more of each at equal bytes. `serve` takes its exact blocks from the whole
    // pool's share.
    const auto host = static_cast<double>(config_.capacity_bytes[1]);
    const double compact_bytes = host * config_.host_compact_share;
    const double ratio = config_.host_bytes_ratio;
    c.host_blocks = static_cast<int32_t>((host - compact_bytes) * (1.0 - config_.host_exact_share) /
                                         (static_cast<double>(config_.chunk_bytes()) * ratio));
    c.host_compact_blocks =
        static_cast<int32_t>(compact_bytes / (static_cast<double>(config_.unit_bytes() * config_.global_layers) * ratio));
  }
  c.policy = policy;
  c.ghosts_per_chunk = kGhostsPerChunk;  // as `serve`
  c.next_use = std::move(next_use);
  c.cost = config_.cost;
  c.layerwise_swap_in = true;
  c.swap_out_threshold = config_.swap_out_threshold;
  c.clock = [clock = clock_] { return *clock; };
  return c;
}

bool SimulatedInstance::has_room_for(int64_t total_tokens) const {
  if (running_.empty()) return true;
  // Every block of the sequence: a device chunk it matches is one n_available() counts (no other
  // request holds it: conversations share no chunk).
  const int64_t c = config_.chunk_tokens;
  return kv_->n_available() - reserved_blocks_ >= (total_tokens + c - 1) / c;
}

SimulatedInstance::Started SimulatedInstance::start(int64_t id, std::span<const TokenId> prompt, int32_t max_chunks,
                                                    int64_t total_tokens) {
  PrefixMatch match = kv_->match_prefix(/*ns=*/0, prompt, max_chunks);
  Started out;
  out.device_chunks = match.device_chunks;
  out.host_chunks = match.host_chunks;
  out.disk_chunks = match.disk_chunks;
  out.matched_chunks = static_cast<int32_t>(match.table.size());
  out.recompute = match.recompute;
  Running& r = running_[id];
  r.table = std::move(match.table);
  r.partial = std::move(match.partial);
  const auto c = static_cast<int32_t>(config_.chunk_tokens);
  r.cached = kv_->prepare_write(r.table, static_cast<int32_t>(r.table.size()) * c, static_cast<int32_t>(prompt.size()));
  if (!r.cached) {
    overcommit(r, static_cast<int64_t>(prompt.size()));
    return out;
  }
  r.reply_blocks = std::max<int64_t>(0, (total_tokens + c - 1) / c - static_cast<int64_t>(r.table.size()));
  reserved_blocks_ += r.reply_blocks;
  return out;
}

void SimulatedInstance::end(int64_t id, std::span<const TokenId> tokens, int64_t prompt_tokens, bool ends_conversation,
                            double keep_alive_s) {
  const auto it = running_.find(id);
  MNEMO_CHECK(it != running_.end(), "request {} ends without having started", id);
  Running& r = it->second;
  reserved_blocks_ -= r.reply_blocks;
  const auto end = static_cast<int64_t>(tokens.size());
  if (r.cached && !kv_->prepare_write(r.table, static_cast<int32_t>(prompt_tokens), static_cast<int32_t>(end))) {
    overcommit(r, end);
  }
  if (r.cached) kv_->cache_prefix(/*ns=*/0, tokens, static_cast<int32_t>(end), r.table, r.partial);
  if (ends_conversation) kv_->end_conversation(/*ns=*/0, tokens);
  if (keep_alive_s > 0) kv_->pin_conversation(/*ns=*/0, tokens, keep_alive_s);
  kv_->release(r.table);
  running_.erase(it);
}

// The request cannot have the blocks it needs: it runs without caching anything.
void SimulatedInstance::overcommit(Running& r, int64_t tokens) {
  const int64_t c = config_.chunk_tokens;
  device_overcommits_ += (tokens + c - 1) / c - static_cast<int64_t>(r.table.size());
  kv_->release(r.table);
  r.partial.clear();
  r.cached = false;
}

void SimulatedInstance::step() {
  kv_->begin_background_work();
  kv_->end_background_work();
  if (disk_) disk_->flush();
  peak_device_chunks_ = std::max<int64_t>(peak_device_chunks_, kv_->n_blocks() - kv_->n_free());
}

CacheCounters SimulatedInstance::counters() const {
  const KvCache::Counters& k = kv_->counters();
  CacheCounters c;
  const auto units = [&](int64_t small_bytes) {
    return small_bytes / static_cast<int64_t>(layout_.block_bytes() / static_cast<size_t>(layout_.n_layers));
  };
  const auto d = static_cast<size_t>(tier_index(Tier::kDevice));
  const auto h = static_cast<size_t>(tier_index(Tier::kHost));
  const auto s = static_cast<size_t>(tier_index(Tier::kDisk));
  c.moved_units[d][h] = units(k.bytes_device_to_host);
  c.moved_units[h][d] = units(k.bytes_host_to_device);
  c.moved_units[h][s] = units(k.bytes_to_disk);  // written through, or on leaving the host
  c.moved_units[s][d] = units(k.bytes_disk_to_device);
  const auto chunks = [&](int64_t u) { return u / layout_.n_layers; };
  c.moved_chunks[d][h] = chunks(c.moved_units[d][h]);
  c.moved_chunks[h][d] = chunks(c.moved_units[h][d]);
  c.moved_chunks[h][s] = chunks(c.moved_units[h][s]);
  c.moved_chunks[s][d] = chunks(c.moved_units[s][d]);
  c.evicted_chunks[d] = k.evicted_device_copies;
  c.evicted_chunks[h] = k.evicted_host_copies;
  c.evicted_chunks[s] = k.evicted_disk_copies;
  c.dropped_chunks = k.dropped_chunks;
  c.device_overcommits = device_overcommits_;
  c.peak_device_chunks = peak_device_chunks_;
  c.peak_device_units = peak_device_chunks_ * layout_.n_layers;
  return c;
}

}  // namespace mnemo::sim
