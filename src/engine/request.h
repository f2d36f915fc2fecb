// What a client asks the engine for, and the stream of results it gets back. The stream is the
// only object shared between the engine thread and the caller's thread (an HTTP handler): the
// engine pushes events, the caller pops them and may cancel.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "engine/sampler.h"
#include "model/batch.h"

namespace mnemo {

// Receives a prompt's KV layer by layer as the forward pass writes it (SPEC D3), so that sending
// it overlaps the rest of the pass instead of following the prompt. Called on the engine thread,
// inside the pass: take the bytes and return.
class PromptKvTap {
 public:
  virtual ~PromptKvTap() = default;
  // The first chunk the tap still needs (the receiver holds or is being sent those before), asked
  // before each prefill step: chunks from there on whose KV the sequence holds (reused from the
  // cache, or computed by earlier steps) go with the step's own. INT32_MAX: none.
  virtual int32_t first_wanted_chunk() const = 0;
  // Chunks [first_chunk, first_chunk + chunks) of the request's tokens are complete once this
  // step ends (and are not the chunk of the prompt's last token, which no reuse can skip);
  // `slices` holds layer `layer` of each of them, chunk after chunk: layer `layer` of `n_layers`
  // of a KV block (kv/kv_layout.h), whose layers are contiguous.
  virtual void on_layer(int32_t first_chunk, int32_t chunks, int32_t layer, int32_t n_layers,
                        std::vector<uint8_t>&& slices) = 0;
};

enum class OutputFormat { kText, kJsonObject, kJsonSchema, kRegex, kGbnf };

// An embedding request's pooling of the prompt's final-normed hidden states: their mean (every
// token computed: a cached prefix is not reused) or the last token's (a cached prefix is).
enum class Pooling { kNone, kMean, kLast };

struct GenerationRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int32_t max_tokens = 16;
  int32_t n = 1;                   // parallel samples sharing the prompt's KV (SPEC V3)
  std::vector<std::string> stop;   // stop strings, matched across token boundaries
  bool ignore_eos = false;         // keep generating past end-of-generation tokens
  int32_t top_logprobs = -1;       // -1: no logprobs; else alternatives per token (0..20)
  // Cached KV is shared only within a namespace (a tenant: API key and/or cache_salt), so one
  // tenant's prompts never hit, nor time, another's.
  uint64_t cache_namespace = 0;
  // The client's end of its conversation (cache_control {"type": "end"}): once the request has
  // finished, the chunks it cached are ranked to leave first (KvCache::end_conversation).
  bool end_conversation = false;
  // The client's keep-alive (cache_control {"type": "ephemeral", "ttl": ...}): once the request
  // has finished, its conversation's chunks are pinned for this long (KvCache::pin_conversation);
  // 0: no pin.
  double cache_ttl_seconds = 0;
  // Failover (SPEC D7): the tokens this request already generated on an instance that failed,
  // all of them streamed to its client (n = 1 only). They follow the prompt (their KV found in
  // the cache where a replica put it, else computed), count towards max_tokens, and sampling
  // goes on at step resume_tokens.size(): what follows is what the failed instance would have
  // generated, token for token.
  std::vector<TokenId> resume_tokens;
  // A TokenDelta for every generated token, even one whose text is held back (for a stop string
  // or an incomplete character): whoever may resume the request must know every token the
  // client's text stands for.
  bool report_every_token = false;
  // Failover to a restart of this instance (SPEC D7's local disk replica): every chunk the
  // request fills goes to the cache at once, written through to the disk tier, rather than when
  // the request ends; a restart on the same state finds them and resumes without recompute.
  bool persist_running = false;
  // Gets the prompt's KV layer by layer as it is computed (a replica's, SPEC D3); none: no tap.
  std::shared_ptr<PromptKvTap> prompt_tap;
  // What the output must be: free text, a JSON object (response_format json_object), one that
  // `schema` allows (json_schema), or a text `regex` matches whole (the grammar extension); each
  // token sampled from those that keep it one (grammar/output_constraint.h).
  OutputFormat format = OutputFormat::kText;
  std::shared_ptr<const grammar::CompiledSchema> schema;
  std::shared_ptr<const grammar::Regex> regex;
  std::shared_ptr<const grammar::Gbnf> gbnf;  // kGbnf: the text its root derives
  // Not kNone: an embedding (/v1/embeddings). The prompt runs, nothing is generated, and the
  // stream gets one PooledEmbedding before the choice finishes. n = 1, text format, no resume.
  Pooling pooling = Pooling::kNone;
  int32_t embedding_index = 0;
  // Speculative decoding (engine/speculation.h) for this request when the engine has it on
  // (the "speculation" extension field; false opts out). It changes speed, never the tokens.
  bool speculation = true;  // echoed in its PooledEmbedding (inputs of one API request share a stream)
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);

struct RequestUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose KV was reused instead of computed
  // Where the reused KV came from, and dropped cached tokens computed again (SPEC P5).
  int32_t device_cached_tokens = 0;
  int32_t host_cached_tokens = 0;
  int32_t disk_cached_tokens = 0;
  int32_t recomputed_tokens = 0;
  // A resumed request: the tokens generated before the failover (counted in completion_tokens),
  // and how many of them had their KV here (replicated) rather than computed again.
  int32_t resumed_tokens = 0;
  int32_t resumed_cached_tokens = 0;
};

// New text (and the token that completed it) for one choice.
struct TokenDelta {
  int32_t choice = 0;
  std::string text;
  TokenId token = -1;
  std::optional<Logprobs> logprobs;
};
struct ChoiceFinished {
  int32_t choice = 0;
  FinishReason reason = FinishReason::kStop;
};
// The request is over: every choice finished (or it failed: `error` set).
struct RequestDone {
  RequestUsage usage;
  std::string error;
};
// An embedding request's result: the pooled hidden state (n_embd floats, not normalised).
struct PooledEmbedding {
  int32_t index = 0;  // GenerationRequest::embedding_index
  std::vector<float> values;
};
using StreamEvent = std::variant<TokenDelta, ChoiceFinished, RequestDone, PooledEmbedding>;


class RequestStream {
 public:
  // Caller side. Blocks until an event arrives or the timeout passes (nullopt; a zero timeout
  // never blocks).
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout);
  // A caller that does not block on next() (an HTTP connection waiting on its socket's thread)
  // is told of events instead: `waker` is called after each push, and at once if events are
  // waiting. It is called under the stream's lock, so it must only hand off (post), never call
  // back into the stream; an empty function detaches it, after which it is not called again.
  void set_waker(std::function<void()> waker);
  // Asks the engine to stop this request and free its KV at its next step.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }  // relaxed: polled once per step

  // Engine side.
  void push(StreamEvent event);
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;  // guarded by mutex_
  std::function<void()> waker_;     // guarded by mutex_
  std::atomic<bool> cancelled_{false};
};

}  // namespace mnemo
