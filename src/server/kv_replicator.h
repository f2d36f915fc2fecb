// Replicas of requests in flight (SPEC D7, after DejaVu): while a request runs here, its KV goes,
// chunk by chunk as the chunks fill, to another instance's cache over the KV transport; when it
// ends, the rest of its conversation's KV follows. If this instance dies mid-reply, the router
// resumes the request on the replica holder, which finds the KV of the prompt and of the tokens
// generated so far in its cache and computes only the chunk that had not filled yet.
//
// Each increment carries only the chunks not yet acknowledged, named below their predecessor's
// key (PrefixIndex::chunk_key, the same on every instance): the receiver inserts them under the
// chunks it took before. An increment the receiver refuses (it evicted the earlier chunks, or had
// no room) makes the next one start again from the first chunk.
//
// A prompt's chunks do not wait for the prompt to end (SPEC D3): the engine hands each prefill
// step's newly completed chunks to the replica layer by layer as the forward pass writes them
// (PromptKvTap), and each layer leaves as its own message while the next layers run; the receiver
// inserts the chunks once their last layer arrives (KvReceiver). Only a step whose chunks follow
// the ones the receiver holds streams this way, to one replica per request (the one the request's
// ReplicaTap is bound to); other chunks are sent whole after their step.
//
// Traffic is bounded: one worker per instance sends one message at a time, and a request has at
// most one increment queued, which takes every chunk filled by the time it is sent. A replica
// whose transfers keep failing is given up (the request still runs; its failover recomputes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "transfer/kv_message.h"

namespace mnemo::transfer {
class KvTransport;
}

namespace mnemo::server {

struct ReplicationStats {
  uint64_t increments = 0;   // acknowledged
  uint64_t failures = 0;     // refused or lost
  uint64_t chunks = 0;       // acknowledged
  uint64_t bytes = 0;        // of KV acknowledged
  uint64_t given_up = 0;     // replicas abandoned after repeated failures
  uint64_t layer_messages = 0;  // acknowledged messages of one layer of a prompt's chunks (D3)
};

class ReplicaTap;

class KvReplicator {
 public:
  KvReplicator(Engine& engine, transfer::KvTransport& transport, uint64_t layout_fingerprint);
  ~KvReplicator();  // stops the worker; what was not sent is not sent
  KvReplicator(const KvReplicator&) = delete;
  KvReplicator& operator=(const KvReplicator&) = delete;

  class Replica;
  // Starts replicating the request streaming into `stream` (prompt `prompt`, plus any tokens it
  // resumed with) to the transport at `endpoint`. Feed it the request's tokens as they stream.
  // `known_chunks`: leading chunks the receiver is believed to hold already, not sent (if it
  // turns out not to, its refusal restarts the replica from the first chunk). `at_end`: send
  // nothing while the request runs, everything once it ends (a copy for the next turn, in one
  // message, rather than one to fail over to).
  // `tap`: the one the request was submitted with (GenerationRequest::prompt_tap), bound to this
  // replica so that the prompt's chunks stream layer by layer as they are computed (not for an
  // at_end replica).
  std::shared_ptr<Replica> open(std::string endpoint, uint64_t ns, std::shared_ptr<RequestStream> stream,
                                std::vector<TokenId> tokens, int32_t known_chunks = 0, bool at_end = false,
                                const std::shared_ptr<ReplicaTap>& tap = nullptr);
  ReplicationStats stats() const;

 private:
  void schedule(const std::shared_ptr<Replica>& replica);
  void work();
  void replicate(Replica& replica);
  // Sends the replica's queued layer slices, oldest first; false once one failed (the replica
  // then starts again from its first chunk).
  bool send_layer_slices(Replica& replica);
  // Under the replica's mutex, after a send: on success the receiver holds chunks up to
  // first_chunk + held_chunks (0 held: a layer that completes nothing yet); on failure the
  // replica starts again. Counts it in the stats.
  void record_send_locked(Replica& replica, const Status& sent, int32_t first_chunk, int32_t held_chunks, size_t bytes,
                          bool layer_message);

  Engine& engine_;
  transfer::KvTransport& transport_;
  uint64_t layout_fingerprint_;
  // Worker thread only: the buffer increments are gathered into, reused (SPEC D2).
  std::vector<uint8_t> staging_;
  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Replica>> queue_;
  bool stopping_ = false;
  ReplicationStats stats_;
  std::thread worker_;
};

class KvReplicator::Replica : public std::enable_shared_from_this<Replica> {
 public:
  Replica(KvReplicator& owner, std::string endpoint, uint64_t ns, std::shared_ptr<RequestStream> stream,
          std::vector<TokenId> tokens, int32_t known_chunks, bool at_end);
  // From the thread relaying the request's stream: a token it generated; the request ended.
  void on_token(TokenId token);
  void on_finished();
  int32_t acknowledged_chunks() const;
  // The first chunk neither held by the receiver nor on its way (INT32_MAX if none is wanted).
  int32_t first_unsent_chunk() const;
  // From the engine thread (through the stream's PromptKvTap): layer `layer` of chunks a prefill
  // step completes.
  void on_layer(int32_t first_chunk, int32_t chunks, int32_t layer, int32_t n_layers, std::vector<uint8_t>&& slices);
  // Waits until the request ended and nothing more is being sent (everything acknowledged, or
  // nothing left that can be, or the replica given up). False on timeout.
  bool wait_settled(std::chrono::milliseconds timeout);

 private:
  friend class KvReplicator;
  // Chunks whose KV exists: all but the last token's (it has not been run through the model yet).
  int32_t filled_chunks_locked() const;
  bool has_work_locked() const;
  // Chunks filled past what was sent, and a token or the end came since the last export.
  bool export_due_locked() const;
  // After a failed send: everything again from the first chunk. True when given up.
  bool restart_locked();
  // The key of chunk first_chunk - 1 (0 for the first chunk).
  uint64_t parent_key_locked(int32_t first_chunk);

  KvReplicator& owner_;
  const std::string endpoint_;
  const uint64_t ns_;
  const std::shared_ptr<RequestStream> stream_;
  const bool at_end_;
  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable settled_;
  std::vector<TokenId> tokens_;
  int32_t acknowledged_ = 0;  // chunks the replica holds
  // Layers of a prompt's chunks waiting to be sent, oldest first, and the end of the chunks they
  // (and the layers already sent) cover: the next step's chunks must start there to stream.
  struct LayerSlice {
    int32_t first_chunk = 0;
    int32_t chunks = 0;
    int32_t layer = 0;
    int32_t n_layers = 0;
    std::vector<uint8_t> bytes;
  };
  std::deque<LayerSlice> slices_;
  int32_t streamed_end_ = 0;
  bool queued_ = false;
  bool finished_ = false;
  bool export_due_ = false;  // a token or the end came since the last export was taken
  int32_t keyed_chunks_ = 0;  // parent_key_locked's memo: the chunks hashed so far,
  uint64_t last_key_ = 0;     // and the key of the last of them
  int failures_ = 0;  // in a row
  bool abandoned_ = false;
};

// The tap a request is submitted with before the replica that takes its prompt's layers exists
// (the replica needs the request's stream): layers computed before open() binds it are dropped,
// and their chunks go whole after the step.
class ReplicaTap : public PromptKvTap {
 public:
  void bind(const std::shared_ptr<KvReplicator::Replica>& replica);
  int32_t first_wanted_chunk() const override;
  void on_layer(int32_t first_chunk, int32_t chunks, int32_t layer, int32_t n_layers,
                std::vector<uint8_t>&& slices) override;

 private:
  mutable std::mutex mutex_;
  std::weak_ptr<KvReplicator::Replica> replica_;  // guarded by mutex_
};

}  // namespace mnemo::server
