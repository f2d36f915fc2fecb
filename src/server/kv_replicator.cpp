#include "server/kv_replicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "kv/prefix_index.h"
#include "server/kv_messages.h"
#include "transfer/kv_transport.h"
#include "util/thread_name.h"

namespace mnemo::server {
namespace {

constexpr auto kEngineWait = std::chrono::seconds(20);  // a step of the engine, with margin
constexpr double kAckTimeoutSeconds = 30;
constexpr int kFailuresBeforeGivingUp = 3;

}  // namespace

KvReplicator::KvReplicator(Engine& engine, transfer::KvTransport& transport, uint64_t layout_fingerprint)
    : engine_(engine), transport_(transport), layout_fingerprint_(layout_fingerprint), worker_([this] { work(); }) {}

KvReplicator::~KvReplicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

std::shared_ptr<KvReplicator::Replica> KvReplicator::open(std::string endpoint, uint64_t ns,
                                                          std::shared_ptr<RequestStream> stream,
                                                          std::vector<TokenId> tokens, int32_t known_chunks,
                                                          bool at_end, const std::shared_ptr<ReplicaTap>& tap) {
  auto replica = std::make_shared<Replica>(*this, std::move(endpoint), ns, std::move(stream), std::move(tokens),
                                          known_chunks, at_end);
  if (tap && !at_end) tap->bind(replica);
  return replica;
}

void ReplicaTap::bind(const std::shared_ptr<KvReplicator::Replica>& replica) {
  std::lock_guard lock(mutex_);
  replica_ = replica;
}

int32_t ReplicaTap::first_wanted_chunk() const {
  std::shared_ptr<KvReplicator::Replica> replica;
  {
    std::lock_guard lock(mutex_);
    replica = replica_.lock();
  }
  return replica ? replica->first_unsent_chunk() : std::numeric_limits<int32_t>::max();
}

void ReplicaTap::on_layer(int32_t first_chunk, int32_t chunks, int32_t layer, int32_t n_layers,
                          std::vector<uint8_t>&& slices) {
  std::shared_ptr<KvReplicator::Replica> replica;
  {
    std::lock_guard lock(mutex_);
    replica = replica_.lock();
  }
  if (replica) replica->on_layer(first_chunk, chunks, layer, n_layers, std::move(slices));
}

ReplicationStats KvReplicator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void KvReplicator::schedule(const std::shared_ptr<Replica>& replica) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    queue_.push_back(replica);
  }
  wake_.notify_one();
}

void KvReplicator::work() {
  name_this_thread("mnemo-replica");
  for (;;) {
    std::shared_ptr<Replica> next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    replicate(*next);
  }
}

void KvReplicator::replicate(Replica& r) {
  const auto bs = engine_.config().block_size;
  send_layer_slices(r);
  int32_t first = 0;
  bool finished = false;
  bool export_now = false;
  bool again = false;
  std::vector<TokenId> tokens;
  {
    std::lock_guard lock(r.mutex_);
    // Layers that came meanwhile go first (their chunks precede any an export would take); an
    // export follows tokens and the end, not layers.
    export_now = r.slices_.empty() && r.export_due_locked();
    if (export_now) {
      r.export_due_ = false;
      first = std::max(r.acknowledged_, r.streamed_end_);
      finished = r.finished_;
      tokens = r.tokens_;
    } else {
      again = r.has_work_locked();
      r.queued_ = again;
    }
  }
  if (!export_now) {
    r.settled_.notify_all();
    if (again) schedule(r.shared_from_this());
    return;
  }
  // A request still running: from its blocks. One that ended: from the cache, which took its
  // blocks (the chunks filled after the last increment).
  std::future<Result<KvCache::ExportedPrefix>> future =
      finished ? engine_.export_prefix(r.ns_, std::vector<TokenId>(tokens.begin(), tokens.end() - 1), first,
                                       std::move(staging_))
               : engine_.export_running(r.stream_, first, std::move(staging_));
  staging_ = {};
  KvCache::ExportedPrefix exported;
  bool exported_ok = future.wait_for(kEngineWait) == std::future_status::ready;
  if (exported_ok) {
    Result<KvCache::ExportedPrefix> got = future.get();
    exported_ok = got.ok();  // not: the engine is shutting down
    if (exported_ok) exported = std::move(*got);
  }
  if (!exported_ok || exported.chunks == 0) {
    // Nothing to send now (the request waits, was swapped out, or its chunks left the cache):
    // its next token or its end schedules it again; if one came meanwhile (and found this job
    // queued), it is looked at now.
    {
      std::lock_guard lock(r.mutex_);
      again = exported_ok && r.has_work_locked();
      r.queued_ = again;
    }
    r.settled_.notify_all();
    if (again) schedule(r.shared_from_this());
    return;
  }
  const int32_t chunks = exported.chunks;
  const size_t bytes = exported.payload.size();
  transfer::KvMessage message = kv_message_of(r.ns_, layout_fingerprint_, bs, std::move(exported));
  const Status sent = transport_.send(r.endpoint_, message, kAckTimeoutSeconds);
  staging_ = std::move(message.payload);  // the next increment gathers into it
  {
    std::lock_guard lock(r.mutex_);
    record_send_locked(r, sent, first, chunks, bytes, /*layer_message=*/false);
    again = r.has_work_locked();
    r.queued_ = again;
  }
  r.settled_.notify_all();
  if (!sent.ok()) std::fprintf(stderr, "mnemo: KV replica to %s: %s\n", r.endpoint_.c_str(), sent.error().message().c_str());
  if (again) schedule(r.shared_from_this());
}

void KvReplicator::record_send_locked(Replica& r, const Status& sent, int32_t first_chunk, int32_t held_chunks,
                                      size_t bytes, bool layer_message) {
  bool gave_up = false;
  if (sent.ok()) {
    r.acknowledged_ = std::max(r.acknowledged_, first_chunk + held_chunks);
    r.failures_ = 0;
  } else {
    gave_up = r.restart_locked();
  }
  // Counted before the replica can look settled, so that whoever waits on it sees the figures
  // (lock order: a replica's mutex, then the replicator's).
  std::lock_guard stats_lock(mutex_);
  if (sent.ok()) {
    stats_.bytes += bytes;
    stats_.layer_messages += layer_message ? 1 : 0;
    if (held_chunks > 0) {
      ++stats_.increments;
      stats_.chunks += static_cast<uint64_t>(held_chunks);
    }
  } else {
    ++stats_.failures;
  }
  stats_.given_up += gave_up ? 1 : 0;
}

bool KvReplicator::send_layer_slices(Replica& r) {
  const auto bs = static_cast<size_t>(engine_.config().block_size);
  for (;;) {
    Replica::LayerSlice slice;
    KvCache::ExportedPrefix part;
    {
      std::lock_guard lock(r.mutex_);
      if (r.slices_.empty() || r.abandoned_) return true;
      slice = std::move(r.slices_.front());
      r.slices_.pop_front();
      const auto begin = r.tokens_.begin();
      part.first_chunk = slice.first_chunk;
      part.chunks = slice.chunks;
      part.parent_key = r.parent_key_locked(slice.first_chunk);
      part.tokens.assign(begin + static_cast<ptrdiff_t>(static_cast<size_t>(slice.first_chunk) * bs),
                         begin + static_cast<ptrdiff_t>(static_cast<size_t>(slice.first_chunk + slice.chunks) * bs));
      part.payload = std::move(slice.bytes);
    }
    const size_t bytes = part.payload.size();
    const transfer::KvMessage message =
        kv_message_of(r.ns_, layout_fingerprint_, static_cast<int32_t>(bs), std::move(part),
                      static_cast<uint32_t>(slice.n_layers), static_cast<uint32_t>(slice.layer),
                      static_cast<uint32_t>(slice.layer + 1));
    const Status sent = transport_.send(r.endpoint_, message, kAckTimeoutSeconds);
    {
      // The receiver holds the chunks once their last layer is in.
      const bool last_layer = slice.layer + 1 == slice.n_layers;
      std::lock_guard lock(r.mutex_);
      record_send_locked(r, sent, slice.first_chunk, last_layer ? slice.chunks : 0, bytes, /*layer_message=*/true);
    }
    if (!sent.ok()) {
      std::fprintf(stderr, "mnemo: KV replica to %s: %s\n", r.endpoint_.c_str(), sent.error().message().c_str());
      return false;
    }
  }
}

KvReplicator::Replica::Replica(KvReplicator& owner, std::string endpoint, uint64_t ns,
                               std::shared_ptr<RequestStream> stream, std::vector<TokenId> tokens, int32_t known_chunks,
                               bool at_end)
    : owner_(owner),
      endpoint_(std::move(endpoint)),
      ns_(ns),
      stream_(std::move(stream)),
      at_end_(at_end),
      tokens_(std::move(tokens)) {
  // Never past the chunks the request starts with: beyond them nothing is known.
  acknowledged_ = std::clamp(known_chunks, 0, filled_chunks_locked());
}

int32_t KvReplicator::Replica::filled_chunks_locked() const {
  if (tokens_.empty()) return 0;
  return static_cast<int32_t>((tokens_.size() - 1) / static_cast<size_t>(owner_.engine_.config().block_size));
}

uint64_t KvReplicator::Replica::parent_key_locked(int32_t first_chunk) {
  // The chunks are named by key, below their predecessor's: the hash of the path so far, extended
  // from the last one computed (a prompt's steps and layers ask for the same or later chunks).
  const auto bs = static_cast<size_t>(owner_.engine_.config().block_size);
  if (keyed_chunks_ > first_chunk) {
    keyed_chunks_ = 0;
    last_key_ = 0;
  }
  for (; keyed_chunks_ < first_chunk; ++keyed_chunks_) {
    last_key_ = PrefixIndex::chunk_key(last_key_, ns_,
                                       std::span<const TokenId>(tokens_).subspan(static_cast<size_t>(keyed_chunks_) * bs, bs));
  }
  return last_key_;
}

bool KvReplicator::Replica::export_due_locked() const {
  return export_due_ && (finished_ || !at_end_) && filled_chunks_locked() > std::max(acknowledged_, streamed_end_);
}

bool KvReplicator::Replica::has_work_locked() const { return !abandoned_ && (!slices_.empty() || export_due_locked()); }

bool KvReplicator::Replica::restart_locked() {
  // The receiver may hold none of this request's chunks now: start again from the first.
  acknowledged_ = 0;
  streamed_end_ = 0;
  slices_.clear();
  export_due_ = true;
  if (++failures_ >= kFailuresBeforeGivingUp) abandoned_ = true;
  return abandoned_;
}

void KvReplicator::Replica::on_token(TokenId token) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    tokens_.push_back(token);
    export_due_ = true;
    if (queued_ || !has_work_locked()) return;
    queued_ = true;
  }
  owner_.schedule(shared_from_this());
}

void KvReplicator::Replica::on_finished() {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    export_due_ = true;
    if (queued_ || !has_work_locked()) return;
    queued_ = true;
  }
  owner_.schedule(shared_from_this());
}

void KvReplicator::Replica::on_layer(int32_t first_chunk, int32_t chunks, int32_t layer, int32_t n_layers,
                                     std::vector<uint8_t>&& slices) {
  {
    std::lock_guard lock(mutex_);
    if (abandoned_ || finished_ || at_end_ || n_layers <= 0) return;
    if (layer == 0) {
      // A step's chunks stream only if they follow what the receiver holds or is being sent.
      if (first_chunk != std::max(acknowledged_, streamed_end_)) return;
      streamed_end_ = first_chunk + chunks;
    } else if (slices_.empty() ? streamed_end_ != first_chunk + chunks
                               : slices_.back().first_chunk != first_chunk || slices_.back().layer != layer - 1) {
      return;  // its layer 0 was not taken (or a failure dropped the step's layers)
    }
    slices_.push_back({first_chunk, chunks, layer, n_layers, std::move(slices)});
    if (queued_) return;
    queued_ = true;
  }
  owner_.schedule(shared_from_this());
}

bool KvReplicator::Replica::wait_settled(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return settled_.wait_for(lock, timeout, [&] { return finished_ && !queued_; });
}

int32_t KvReplicator::Replica::first_unsent_chunk() const {
  std::lock_guard lock(mutex_);
  if (abandoned_ || finished_ || at_end_) return std::numeric_limits<int32_t>::max();
  return std::max(acknowledged_, streamed_end_);
}

int32_t KvReplicator::Replica::acknowledged_chunks() const {
  std::lock_guard lock(mutex_);
  return acknowledged_;
}

}  // namespace mnemo::server
