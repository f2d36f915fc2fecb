// Engine, work from other threads: KV tasks (deletes, exports, imports) posted to the engine
// thread, which runs them between steps; their callers wait on a future that answers a Result
// (unavailable if the engine stops first), or get a callback.
#include "engine/engine.h"

#include <algorithm>
#include <utility>

namespace mnemo {

void Engine::post(std::function<void()> task) {
  {
    std::lock_guard lock(inbox_mutex_);
    if (stopping_) return;  // the task is dropped: what it holds answers its caller (on_engine_thread)
    tasks_.push_back(std::move(task));
  }
  inbox_ready_.notify_one();
}

void Engine::forget_prefix(uint64_t ns, std::vector<TokenId> tokens, int32_t keep_tokens) {
  post([this, ns, tokens = std::move(tokens), keep_tokens] {
    kv_.forget(ns, tokens, keep_tokens / kv_.block_size());
    // The conversation's streams leave the tenant's drafts with its KV (all of them, even where
    // an earlier turn stays stored: a stream is not cut by turns).
    tenant_drafter_.forget(ns, TenantHistoryDrafter::conversation_of(ns, tokens, kv_.block_size()));
  });
}

std::future<Result<KvCache::ExportedPrefix>> Engine::export_prefix(uint64_t ns, std::vector<TokenId> tokens, int32_t first_chunk,
                                                             std::vector<uint8_t> staging) {
  return on_engine_thread([this, ns, tokens = std::move(tokens), first_chunk, staging = std::move(staging)]() mutable {
    return kv_.export_prefix(ns, tokens, static_cast<int32_t>(tokens.size()) / kv_.block_size(), first_chunk,
                             std::move(staging));
  });
}

std::future<Result<int32_t>> Engine::import_prefix(uint64_t ns, std::vector<TokenId> tokens, std::vector<uint8_t> payload,
                                                   uint64_t parent_key, int32_t first_position) {
  return on_engine_thread([this, ns, tokens = std::move(tokens), payload = std::move(payload), parent_key, first_position] {
    return kv_.import_prefix(ns, tokens, payload, parent_key, first_position);
  });
}

void Engine::import_prefix_then(uint64_t ns, std::vector<TokenId> tokens, std::vector<uint8_t> payload, uint64_t parent_key,
                                int32_t first_position, std::function<void(Result<int32_t>)> done) {
  // Answers exactly once: with the import's outcome, or, if the engine drops the task unrun (it
  // is shutting down), with an error when the task goes, so the sender need not wait it out.
  struct Answer {
    std::function<void(Result<int32_t>)> done;
    ~Answer() {
      if (done) done(make_error(ErrorCode::kUnavailable, "the engine shut down before importing the KV"));
    }
  };
  auto answer = std::make_shared<Answer>();  // built in place: a copy's destructor would answer too
  answer->done = std::move(done);
  post([this, ns, tokens = std::move(tokens), payload = std::move(payload), parent_key, first_position, answer] {
    auto reply = std::exchange(answer->done, nullptr);
    reply(kv_.import_prefix(ns, tokens, payload, parent_key, first_position));
  });
}

std::future<Result<KvCache::ExportedPrefix>> Engine::export_running(std::shared_ptr<RequestStream> stream, int32_t first_chunk,
                                                              std::vector<uint8_t> staging) {
  return on_engine_thread([this, stream = std::move(stream), first_chunk,
                           staging = std::move(staging)]() mutable -> KvCache::ExportedPrefix {
    for (const auto& seq : running_) {
      if (seq->request->stream != stream || seq->choice != 0 || seq->state != SequenceState::kRunning) continue;
      int32_t end = seq->n_valid() / config_.block_size;
      for (int32_t partial : seq->partial_chunks) end = std::min(end, partial);
      return kv_.export_blocks(seq->request->request.cache_namespace, seq->tokens, seq->kv, first_chunk, end,
                               std::move(staging));
    }
    return KvCache::ExportedPrefix{};
  });
}

}  // namespace mnemo
