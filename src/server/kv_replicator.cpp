#include "server/kv_replicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

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
                                                          bool at_end) {
  return std::make_shared<Replica>(*this, std::move(endpoint), ns, std::move(stream), std::move(tokens), known_chunks,
                                   at_end);
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
  int32_t first = 0;
  bool finished = false;
  uint64_t seen = 0;
  std::vector<TokenId> tokens;
  {
    std::lock_guard lock(r.mutex_);
    first = r.acknowledged_;
    finished = r.finished_;
    seen = r.events_;
    tokens = r.tokens_;
  }
  // A request still running: from its blocks. One that ended: from the cache, which took its
  // blocks (the chunks filled after the last increment).
  std::future<KvManager::ExportedPrefix> future =
      finished ? engine_.export_prefix(r.ns_, std::vector<TokenId>(tokens.begin(), tokens.end() - 1), first,
                                       std::move(staging_))
               : engine_.export_running(r.stream_, first, std::move(staging_));
  staging_ = {};
  KvManager::ExportedPrefix exported;
  bool exported_ok = future.wait_for(kEngineWait) == std::future_status::ready;
  if (exported_ok) {
    try {
      exported = future.get();
    } catch (const std::future_error&) {  // the engine is shutting down
      exported_ok = false;
    }
  }
  if (!exported_ok || exported.chunks == 0) {
    // Nothing to send now (the request waits, was swapped out, or its chunks left the cache):
    // its next token or its end schedules it again; if one came meanwhile (and found this job
    // queued), it is looked at now.
    bool again = false;
    {
      std::lock_guard lock(r.mutex_);
      again = exported_ok && r.events_ != seen && r.has_work_locked();
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
  bool again = false;
  {
    std::lock_guard lock(r.mutex_);
    bool gave_up = false;
    if (sent.ok()) {
      r.acknowledged_ = std::max(r.acknowledged_, first + chunks);
      r.failures_ = 0;
    } else {
      // The receiver may hold none of this request's chunks now: start again from the first.
      r.acknowledged_ = 0;
      if (++r.failures_ >= kFailuresBeforeGivingUp) r.abandoned_ = gave_up = true;
    }
    // Counted before the replica can look settled, so that whoever waits on it sees the figures
    // (lock order: a replica's mutex, then the replicator's).
    {
      std::lock_guard stats_lock(mutex_);
      if (sent.ok()) {
        ++stats_.increments;
        stats_.chunks += static_cast<uint64_t>(chunks);
        stats_.bytes += bytes;
      } else {
        ++stats_.failures;
      }
      stats_.given_up += gave_up ? 1 : 0;
    }
    again = r.has_work_locked();
    r.queued_ = again;
  }
  r.settled_.notify_all();
  if (!sent.ok()) std::fprintf(stderr, "mnemo: KV replica to %s: %s\n", r.endpoint_.c_str(), sent.error().message().c_str());
  if (again) schedule(r.shared_from_this());
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

bool KvReplicator::Replica::has_work_locked() const {
  return !abandoned_ && (finished_ || !at_end_) && filled_chunks_locked() > acknowledged_;
}

void KvReplicator::Replica::on_token(TokenId token) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    tokens_.push_back(token);
    ++events_;
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
    ++events_;
    if (queued_ || !has_work_locked()) return;
    queued_ = true;
  }
  owner_.schedule(shared_from_this());
}

bool KvReplicator::Replica::wait_settled(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return settled_.wait_for(lock, timeout, [&] { return finished_ && !queued_; });
}

int32_t KvReplicator::Replica::acknowledged_chunks() const {
  std::lock_guard lock(mutex_);
  return acknowledged_;
}

}  // namespace mnemo::server
