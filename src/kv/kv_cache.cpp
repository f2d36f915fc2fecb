// KvCache: block tables (growth, copy-on-write, sharing, swapping) and the background copier.
// The cache side: kv_cache_match.cpp (prefixes), kv_cache_policy.cpp (retention and eviction),
// kv_cache_disk.cpp, kv_cache_transfer.cpp.
#include "kv/kv_cache.h"
#include "util/thread_name.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <sys/mman.h>

namespace mnemo {

// One persistent thread that runs block copies while the engine thread runs the forward pass
// (on a GPU machine: a copy stream). Started once; no thread per step.
class KvCache::BackgroundCopier {
 public:
  BackgroundCopier() : thread_([this] { run(); }) {}
  ~BackgroundCopier() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }

  void start(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
      done_ = false;
    }
    ready_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return done_; });
  }

 private:
  void run() {
    name_this_thread("mnemo-kv-copy");
    std::unique_lock lock(mutex_);
    while (true) {
      ready_.wait(lock, [&] { return stopping_ || !done_; });
      if (stopping_) return;
      lock.unlock();
      job_();
      lock.lock();
      done_ = true;
      finished_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable finished_;
  std::function<void()> job_;  // guarded by mutex_ (run by the copier while !done_)
  bool done_ = true;
  bool stopping_ = false;
  std::thread thread_;
};

namespace {

KvLayout compact_layout(KvLayout layout, const KvPoolConfig& config) {
  layout.n_layers = config.sliding_window > 0 ? static_cast<int32_t>(config.global_layers.size()) : 0;
  return layout;
}

// How many compact copies fit a device block (0: none are kept on the device).
int32_t slots_per_block(const KvLayout& layout, const KvPoolConfig& config) {
  const int32_t global = compact_layout(layout, config).n_layers;
  return config.compact_on_device && global > 0 ? layout.n_layers / global : 0;
}

ChunkGeometry geometry_of(const KvLayout& layout, const KvPoolConfig& config) {
  ChunkGeometry g;
  g.chunk_tokens = layout.block_size;
  g.n_layers = layout.n_layers;
  g.global_layers = compact_layout(layout, config).n_layers;
  g.sliding_window = config.sliding_window;
  g.chunk_bytes = layout.block_bytes();
  return g;
}

KvPoolConfig two_tier(int32_t device_blocks, int32_t host_blocks) {
  KvPoolConfig c;
  c.device_blocks = device_blocks;
  c.host_blocks = host_blocks;
  return c;
}

// A remote device's blocks come back whole at match time and never shrink into device slots:
// both would need the workers' bytes mid-pass (kv/remote_device.h).
KvPoolConfig for_device(KvPoolConfig config) {
  if (config.remote_device != nullptr) {
    config.layerwise_swap_in = false;
    config.compact_on_device = false;
  }
  return config;
}

// A remote device's staging bytes matter only while a copy runs (the cache pulls before every
// read): handing their pages back to the kernel keeps a coordinator's memory to its host tier's
// rather than a device pool's worth. The mapping is page-aligned (util/anonymous_memory.h).
void release_staging(KvStorage& staging) {
  if (staging.n_blocks() == 0) return;
  (void)::madvise(staging.block(0), staging.block_bytes() * static_cast<size_t>(staging.n_blocks()), MADV_DONTNEED);
}

KvCodec codec_for(const KvLayout& layout, std::optional<KvType> type) {
  if (!type) return KvCodec::identity(layout);
  auto codec = KvCodec::make(layout, *type);
  MNEMO_CHECK(codec.ok(), "KV pool: {} (KvCache::check_types first)", codec.ok() ? "" : codec.error().message());
  return *codec;
}

}  // namespace

void use_sliding_window(KvPoolConfig& config, int32_t window, std::vector<int32_t> global_layers) {
  config.sliding_window = window;
  config.global_layers = std::move(global_layers);
  config.retention = retention_options_for(/*bytes_depend_on_length=*/true);
}

Status KvCache::check_types(const KvLayout& layout, const KvPoolConfig& config) {
  for (const auto& type : {config.host_type, config.disk_type}) {
    if (!type) continue;
    if (auto codec = KvCodec::make(layout, *type); !codec.ok()) return codec.error();
  }
  return ok_status();
}

KvCache::DiskPayload KvCache::disk_payload(const KvLayout& layout, const KvPoolConfig& config) {
  const KvCodec disk = codec_for(layout, config.disk_type);
  const auto global = static_cast<size_t>(compact_layout(layout, config).n_layers);
  return {disk.block_bytes(), global * disk.layer_bytes()};
}

KvCache::KvCache(const KvLayout& layout, KvPoolConfig config)
    : config_(for_device(std::move(config))),
      device_codec_(KvCodec::identity(layout)),
      host_codec_(codec_for(layout, config_.host_type)),
      disk_codec_(codec_for(layout, config_.disk_type)),
      // Any other type than the device's gets exact blocks beside it: what must come back
      // unchanged is copied there as it is (an F32 host of an F16 device is exact, not the same bytes).
      lossy_host_(!host_codec_.is_identity()),
      device_(layout, config_.device_blocks),
      device_alloc_(config_.device_blocks),
      host_(layout, config_.host_blocks, host_codec_.block_bytes()),
      host_alloc_(config_.host_blocks),
      exact_(layout, lossy_host_ ? config_.host_exact_blocks : 0),
      exact_alloc_(lossy_host_ ? config_.host_exact_blocks : 0),
      compact_(compact_layout(layout, config_), compact_layout(layout, config_).n_layers > 0 ? config_.host_compact_blocks : 0,
               host_codec_.layer_bytes() * static_cast<size_t>(compact_layout(layout, config_).n_layers)),
      compact_alloc_(compact_layout(layout, config_).n_layers > 0 ? config_.host_compact_blocks : 0),
      slabs_(slots_per_block(layout, config_)),
      compact_buffer_(compact_layout(layout, config_).block_bytes()),
      disk_buffer_(disk_codec_.is_identity() ? 0 : disk_codec_.block_bytes()),
      index_(layout.block_size),
      eviction_(config_.policy, config_.cost, config_.retention, geometry_of(layout, config_), config_.next_use),
      copier_(std::make_unique<BackgroundCopier>()) {
  if (config_.disk) {
    const DiskPayload payload = disk_payload(layout, config_);
    MNEMO_CHECK(config_.disk->payload_bytes() == payload.whole, "the disk tier holds {}-byte extents, the disk's type {}",
                config_.disk->payload_bytes(), payload.whole);
  }
  index_.set_observer([events = events_.get()](uint64_t key, ChunkHold hold) { events->record(key, hold); });
  eviction_.rank(index_);
  if (config_.ghosts_per_chunk > 0) {
    index_.keep_ghosts(static_cast<size_t>(std::max<int64_t>(1, capacity_chunks() * config_.ghosts_per_chunk)));
    eviction_.observe_ghosts();
  }
  index_.set_forget_listener([this, ghosts = config_.ghosts_per_chunk > 0](const PrefixIndex::Chunk& c) {
    if (ghosts) eviction_.observe_drop(c, now());
    // Bounded for an owner that never takes them (the simulator); the engine takes them every step.
    constexpr size_t kMaxForgottenConversations = size_t{1} << 16;
    if (c.position == 0 && forgotten_conversations_.size() < kMaxForgottenConversations) {
      forgotten_conversations_.emplace_back(index_.chunk_namespace(c.node), c.key);
    }
  });
  if (!config_.clock) {
    config_.clock = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
  }
}

KvCache::KvCache(const KvLayout& layout, int32_t device_blocks, int32_t host_blocks)
    : KvCache(layout, two_tier(device_blocks, host_blocks)) {}

KvCache::~KvCache() {
  finish_loads();
  end_background_work();
  if (config_.disk) config_.disk->flush();
}

double KvCache::now() const { return config_.clock(); }

int64_t KvCache::capacity_chunks() const {
  int64_t chunks = int64_t{device_alloc_.n_blocks()} + host_alloc_.n_blocks() + exact_alloc_.n_blocks() + compact_alloc_.n_blocks();
  if (config_.disk) {
    chunks += config_.disk->capacity_bytes() / static_cast<int64_t>(config_.disk->extent_bytes(static_cast<size_t>(block_size())));
  }
  return chunks;
}

bool KvCache::pull_device(std::span<const BlockId> blocks) {
  if (config_.remote_device == nullptr || blocks.empty()) return true;
  if (!config_.remote_device->pull(blocks, device_).ok()) {
    ++counters_.remote_failures;
    return false;
  }
  counters_.remote_pulled_blocks += static_cast<int64_t>(blocks.size());
  return true;
}

bool KvCache::push_device(std::span<const BlockId> blocks) {
  if (config_.remote_device == nullptr || blocks.empty()) return true;
  if (!config_.remote_device->push(blocks, device_).ok()) {
    ++counters_.remote_failures;
    return false;
  }
  counters_.remote_pushed_blocks += static_cast<int64_t>(blocks.size());
  return true;
}

int32_t KvCache::blocks_needed(const KvTable& table, int32_t begin, int32_t end) const {
  if (end <= begin) return 0;
  const int32_t bs = block_size();
  // A swapped-out table holds no device block yet: every block of the range is needed.
  const auto on_device = table.on_host_ ? 0 : static_cast<int32_t>(table.size());
  int32_t needed = 0;
  for (int32_t b = begin / bs; b <= (end - 1) / bs; ++b) {
    if (b >= on_device || device_alloc_.ref_count(table[static_cast<size_t>(b)]) > 1) ++needed;
  }
  return needed;
}

bool KvCache::prepare_write(KvTable& table, int32_t begin, int32_t end) {
  MNEMO_CHECK(!table.on_host_, "prepare_write on a swapped-out table");
  const int32_t needed = blocks_needed(table, begin, end);
  if (!make_room(needed)) return false;
  auto fresh = device_alloc_.allocate(needed);
  if (!fresh) return false;
  if (end <= begin) return true;
  const int32_t bs = block_size();
  std::vector<BlockId>& ids = table.ids_;
  // Copy-on-write: this sequence gets its own copy of each shared block. Planned first, so that
  // copies a remote device cannot make leave the table as it was.
  std::vector<std::pair<BlockId, BlockId>> copies;  // (shared, its copy)
  size_t next = 0;
  for (int32_t b = begin / bs; b <= (end - 1) / bs; ++b) {
    const auto chunk = static_cast<size_t>(b);
    if (chunk >= ids.size()) {
      ++next;
    } else if (device_alloc_.ref_count(ids[chunk]) > 1) {
      copies.emplace_back(ids[chunk], (*fresh)[next++]);
    }
  }
  if (config_.remote_device != nullptr && !copies.empty() && !config_.remote_device->copy(copies).ok()) {
    ++counters_.remote_failures;
    for (BlockId id : *fresh) device_alloc_.release(id);
    return false;
  }
  next = 0;
  for (int32_t b = begin / bs; b <= (end - 1) / bs; ++b) {
    const auto chunk = static_cast<size_t>(b);
    if (chunk >= ids.size()) {
      ids.push_back((*fresh)[next++]);
    } else if (device_alloc_.ref_count(ids[chunk]) > 1) {
      const BlockId copy = (*fresh)[next++];
      if (config_.remote_device == nullptr) std::memcpy(device_.block(copy), device_.block(ids[chunk]), chunk_bytes());
      device_alloc_.release(ids[chunk]);
      ids[chunk] = copy;
    }
  }
  return true;
}

void KvCache::truncate(KvTable& table, int32_t n_positions) {
  MNEMO_CHECK(!table.on_host_, "truncating a swapped-out table");
  const auto keep = static_cast<size_t>((std::max(n_positions, 0) + block_size() - 1) / block_size());
  while (table.ids_.size() > keep) {
    device_alloc_.release(table.ids_.back());
    table.ids_.pop_back();
  }
}

KvTable KvCache::share(const KvTable& table) {
  MNEMO_CHECK(!table.on_host_, "sharing a swapped-out table");
  for (BlockId id : table) device_alloc_.add_ref(id);
  KvTable copy;
  copy.ids_ = table.ids_;
  return copy;
}

void KvCache::release(KvTable& table) {
  for (BlockId id : table) {
    if (table.on_host_) {
      release_host(id);
    } else {
      device_alloc_.release(id);
    }
  }
  table.ids_.clear();
  table.on_host_ = false;
}

KvCache::HostCopy KvCache::host_copy(BlockId host, bool compact) {
  if (compact) return {&compact_alloc_, host, compact_.block(host), &host_codec_};
  if (in_exact_pool(host, false)) {
    const BlockId local = host - host_alloc_.n_blocks();
    return {&exact_alloc_, local, exact_.block(local), &device_codec_};
  }
  return {&host_alloc_, host, host_.block(host), &host_codec_};
}

int32_t KvCache::host_ref_count(const PrefixIndex::Chunk& c) const {
  if (c.host_compact) return compact_alloc_.ref_count(c.host);
  if (in_exact_pool(c.host, false)) return exact_alloc_.ref_count(c.host - host_alloc_.n_blocks());
  return host_alloc_.ref_count(c.host);
}

std::optional<std::vector<BlockId>> KvCache::allocate_exact_host(int32_t n) {
  if (!make_host_room(n, /*exact=*/true)) return std::nullopt;
  if (!lossy_host_) return host_alloc_.allocate(n);
  auto blocks = exact_alloc_.allocate(n);
  if (blocks) {
    for (BlockId& b : *blocks) b += host_alloc_.n_blocks();
  }
  return blocks;
}

bool KvCache::swap_out(KvTable& table) {
  MNEMO_CHECK(!table.on_host_, "swapping out a table already on the host");
  const auto n = static_cast<int32_t>(table.size());
  // Into blocks of the device's type: a preempted sequence resumes exactly as it would have run.
  auto host = allocate_exact_host(n);
  if (!host) return false;
  if (!pull_device(table.blocks())) {
    for (BlockId b : *host) release_host(b);
    return false;
  }
  for (size_t i = 0; i < table.size(); ++i) std::memcpy(host_copy((*host)[i], false).bytes, device_.block(table[i]), chunk_bytes());
  swapped_out_blocks_ += n;
  counters_.bytes_device_to_host += static_cast<int64_t>(chunk_bytes()) * n;
  release(table);
  table.ids_ = std::move(*host);
  table.on_host_ = true;
  return true;
}

bool KvCache::swap_in(KvTable& table) {
  MNEMO_CHECK(table.on_host_, "swapping in a table already on the device");
  const auto n = static_cast<int32_t>(table.size());
  if (!make_room(n)) return false;
  auto device = device_alloc_.allocate(n);
  if (!device) return false;
  for (size_t i = 0; i < table.size(); ++i) std::memcpy(device_.block((*device)[i]), host_copy(table[i], false).bytes, chunk_bytes());
  if (!push_device(*device)) {
    for (BlockId b : *device) device_alloc_.release(b);
    return false;
  }
  counters_.bytes_host_to_device += static_cast<int64_t>(chunk_bytes()) * n;
  release(table);
  table.ids_ = std::move(*device);
  return true;
}

void KvCache::begin_background_work() {
  take_disk_completions();
  plan_ahead_copies();
  if (pending_loads_.empty() && pending_copies_.empty()) return;
  // One job, swap-ins first (the forward pass waits for them layer by layer, SPEC P8), then the
  // copies ahead of need: swap-outs never compete with a swap-in in flight.
  layers_loaded_.store(0);
  struct Load {
    const uint8_t* from;
    uint8_t* to;
    const KvCodec* codec;  // how `from` is held
  };
  std::vector<Load> loads;
  for (const PendingLoad& l : pending_loads_) {
    const HostCopy copy = host_copy(l.host, false);
    loads.push_back({copy.bytes, device_.block(l.device), copy.codec});
  }
  std::vector<std::pair<const uint8_t*, uint8_t*>> copies;
  for (const PendingCopy& c : pending_copies_) copies.emplace_back(device_.block(c.device), host_.block(c.host));
  const size_t device_layer_bytes = device_codec_.layer_bytes();
  const int32_t n_layers = layout().n_layers;
  // Conversions run here too, beside the forward pass: decoding a compressed copy costs the
  // engine thread nothing unless the pass reaches the layer first.
  copier_->start([this, loads = std::move(loads), copies = std::move(copies), device_layer_bytes, n_layers] {
    for (int32_t layer = 0; layer < n_layers; ++layer) {
      for (const Load& l : loads) {
        l.codec->decode(l.from + static_cast<size_t>(layer) * l.codec->layer_bytes(),
                        l.to + static_cast<size_t>(layer) * device_layer_bytes, 1);
      }
      layers_loaded_.store(layer + 1, std::memory_order_release);
      layers_loaded_.notify_all();
    }
    for (const auto& [from, to] : copies) host_codec_.encode(from, to, n_layers);
  });
  loads_started_ = true;
}

void KvCache::wait_for_layer(int32_t layer) {
  if (!loads_started_ || pending_loads_.empty()) return;
  int32_t loaded = layers_loaded_.load(std::memory_order_acquire);
  while (loaded <= layer) {
    layers_loaded_.wait(loaded, std::memory_order_acquire);
    loaded = layers_loaded_.load(std::memory_order_acquire);
  }
}

void KvCache::finish_loads() {
  if (pending_loads_.empty()) return;
  if (!loads_started_) begin_background_work();
  end_background_work();
}

void KvCache::plan_ahead_copies() {
  if (config_.swap_out_threshold <= 0 || host_alloc_.n_blocks() == 0) return;
  const auto target = static_cast<int32_t>(config_.swap_out_threshold * static_cast<float>(n_blocks()));
  // Every step: free blocks alone usually suffice, and then the index is not scanned.
  if (device_alloc_.n_free() >= target) return;
  // Device blocks an allocation could get without a copy: free ones, and cached chunks the
  // index alone holds that already have a copy below.
  int32_t reclaimable = device_alloc_.n_free();
  std::vector<PrefixIndex::Chunk> dirty;
  index_.for_each_in(Tier::kDevice, [&](const PrefixIndex::Chunk& c) {
    if (!index_only_device(c)) return;
    if (leaves_device_cheaply(c)) {  // no copy, or a slot's worth: nothing to do ahead of need
      ++reclaimable;
    } else {
      dirty.push_back(c);
    }
  });
  if (reclaimable >= target || dirty.empty()) return;
  const double t = now();
  std::sort(dirty.begin(), dirty.end(), [&](const PrefixIndex::Chunk& a, const PrefixIndex::Chunk& b) {
    return eviction_.leaves_before(eviction_.score(a, t), a, eviction_.score(b, t), b);
  });
  const int32_t wanted = std::min({target - reclaimable, config_.max_background_copies,
                                   static_cast<int32_t>(dirty.size()), host_alloc_.n_free()});
  if (wanted <= 0) return;  // ahead-of-need copies never evict the host tier
  auto host = host_alloc_.allocate(wanted);
  if (!host) return;
  std::vector<BlockId> pulled;
  const size_t first_new = pending_copies_.size();
  for (int32_t i = 0; i < wanted; ++i) {
    const PrefixIndex::Chunk& c = dirty[static_cast<size_t>(i)];
    device_alloc_.add_ref(c.device);  // pinned until the copy is committed
    pending_copies_.push_back({c.node, c.device, (*host)[static_cast<size_t>(i)]});
    pulled.push_back(c.device);
  }
  // A remote device's blocks are read here, before the pass (which does not write them: only
  // the index holds them), so the copies run beside it as they do on one instance.
  if (!pull_device(pulled)) {
    for (size_t i = first_new; i < pending_copies_.size(); ++i) {
      device_alloc_.release(pending_copies_[i].device);
      host_alloc_.release(pending_copies_[i].host);
    }
    pending_copies_.resize(first_new);
  }
}

void KvCache::end_background_work() {
  if (!loads_started_) {
    if (config_.remote_device != nullptr) release_staging(device_);
    return;
  }
  copier_->wait();
  loads_started_ = false;
  for (const PendingLoad& l : pending_loads_) release_host(l.host);  // the pins
  pending_loads_.clear();
  for (const PendingCopy& p : pending_copies_) {
    device_alloc_.release(p.device);
    if (index_.live(p.node) && index_.chunk(p.node).device == p.device && !index_.chunk(p.node).has(Tier::kHost)) {
      index_.set_host(p.node, p.host);
      ++counters_.ahead_copied_chunks;
      counters_.bytes_device_to_host += static_cast<int64_t>(host_codec_.block_bytes());
    } else {
      host_alloc_.release(p.host);
    }
  }
  pending_copies_.clear();
  if (config_.remote_device != nullptr) release_staging(device_);
}

}  // namespace mnemo
