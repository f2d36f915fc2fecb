// The serving engine (SPEC V5, V6, P7): one thread owns every sequence. Each step it fills a
// token budget with the decode tokens of running sequences and chunks of waiting prompts
// (chunked prefill, FCFS admission), runs one forward pass over the ragged batch, samples, and
// streams results. When the KV pool runs out, the latest-arrived sequences are preempted: swapped
// to host memory when it has room, else dropped and recomputed later; either way their output
// does not change (the forward pass is batch-invariant and sampling depends only on the seed,
// the token's index and the logits).
//
// Other threads talk to it only through submit() and the RequestStream it returns.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <type_traits>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/drafter.h"
#include "engine/engine_metrics.h"
#include "kv/kv_cache.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/speculation.h"
#include "engine/tenant_drafter.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/result.h"
#include "util/thread_pool.h"

namespace mnemo {

struct EngineConfig {
  int32_t threads = 0;             // kernel worker threads (0: one per core)
  int32_t block_size = 16;
  int32_t kv_blocks = 4096;        // device pool size in blocks
  int32_t host_swap_blocks = 4096;  // host pool for preempted sequences (0: recompute only)
  int32_t max_batch_tokens = 512;  // tokens per forward pass
  int32_t max_running = 32;        // sequences in the running set
  // Admission of new prompts stops while free blocks would fall below this share of the pool,
  // so running decodes keep room to grow (SPEC P9).
  float decode_reserve = 0.10f;
  DType kv_dtype = DType::F16;
  bool prefix_caching = true;  // reuse cached KV of any earlier request with the same prefix
  RetentionPolicy cache_policy = RetentionPolicy::kMnemo;
  CostModel cost;                   // `mnemo profile`'s measurements, or the defaults
  float swap_out_threshold = 0.25f;  // copy cached chunks to host ahead of need below this free share
  std::shared_ptr<DiskTier> disk;   // optional third tier; its extents are restored at start-up
  // Host blocks of global layers only, for a sliding-window model's history a window before its
  // conversation's end (0: none; every host copy is whole).
  int32_t host_compact_blocks = 0;
  // Such history shrinks in place on the device (slots of shared device blocks) before it leaves.
  bool compact_on_device = true;
  // The element types of the host and disk tiers (kv/kv_codec.h; nullopt: kv_dtype), and the
  // host blocks of kv_dtype a lossy host keeps for preempted sequences and imported chunks.
  std::optional<KvType> host_kv_type;
  std::optional<KvType> disk_kv_type;
  int32_t host_exact_blocks = 0;
  SpeculationConfig speculation;
  // Seconds, for the KV cache's idle times (the learnt retention policy's think times); default:
  // a steady clock. Tests that replay a trace set their own.
  std::function<double()> cache_clock;
  // Host chunks a match brings back are copied layer by layer beside the forward pass (SPEC P8);
  // false: at match time (what a remote device does in any case).
  bool layerwise_swap_in = true;
  // The KV cache's device tier is these workers' (model parallelism; kv/remote_device.h): it
  // pulls and pushes the blocks its tiers move. Null: this process's own pool.
  RemoteDevice* remote_device = nullptr;
};

class Engine {
 public:
  Engine(Model& model, const Tokenizer& tokenizer, EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request against the model and the pool (an Error names the problem) and
  // queues it. Thread-safe. `stream`: the one to push its events to, made by the caller (who
  // may hand it to others first); none: a new one.
  Result<std::shared_ptr<RequestStream>> submit(GenerationRequest request, std::shared_ptr<RequestStream> stream = nullptr);

  // Deletes a finished conversation's cached KV from every tier (KvCache::forget), on the
  // engine thread, soon after; `keep_tokens` leading tokens stay (an earlier turn still stored).
  // Thread-safe.
  void forget_prefix(uint64_t ns, std::vector<TokenId> tokens, int32_t keep_tokens);
  // KV transfer between instances (KvCache::export_prefix / import_prefix) on the engine
  // thread, between steps. Thread-safe; the futures are ready within a step, with an
  // ErrorCode::kUnavailable Error if the engine shuts down first. Exports gather into
  // `staging`'s storage when it is large enough (a sender's reused buffer).
  std::future<Result<KvCache::ExportedPrefix>> export_prefix(uint64_t ns, std::vector<TokenId> tokens, int32_t first_chunk = 0,
                                                       std::vector<uint8_t> staging = {});
  // What the cache holds, as events for a router's prompt trees (thread-safe).
  CacheEventLog& cache_events() const { return kv_.cache_events(); }
  std::future<Result<int32_t>> import_prefix(uint64_t ns, std::vector<TokenId> tokens, std::vector<uint8_t> payload,
                                             uint64_t parent_key = 0, int32_t first_position = 0);
  // The same, answering through `done` on the engine thread (with an error, wherever the task is
  // dropped, if the engine shuts down first): for callers that must not block while the engine
  // finishes a step.
  void import_prefix_then(uint64_t ns, std::vector<TokenId> tokens, std::vector<uint8_t> payload, uint64_t parent_key,
                          int32_t first_position, std::function<void(Result<int32_t>)> done);
  // The computed whole chunks from `first_chunk` on of the request streaming into `stream`
  // while it runs (its choice 0), for a replica (SPEC D7). None once it is no longer running on
  // the device (finished: its chunks are in the cache, export_prefix finds them; swapped out or
  // waiting: later). Chunks whose blocks hold only some layers end the export.
  std::future<Result<KvCache::ExportedPrefix>> export_running(std::shared_ptr<RequestStream> stream, int32_t first_chunk,
                                                        std::vector<uint8_t> staging = {});

  // Stops the engine thread: running requests are cancelled (finish reason "cancelled").
  void shutdown();

  const EngineConfig& config() const { return config_; }
  // Tokens every tier of the KV cache can hold (fixed at construction, so any thread may ask):
  // what an instance publishes for the router's cache-pressure term.
  int64_t cache_capacity_tokens() const { return kv_.capacity_chunks() * config_.block_size; }
  const Model& model() const { return model_; }
  // The engine's last published figures, with the disk tier's queue and usage read live (its
  // writes finish while the engine idles).
  MetricsSnapshot metrics() const;

 private:
  // One step's plan.
  struct Step {
    struct Item {
      Sequence* seq;
      std::vector<QueryRange> ranges;  // holes taken (SPEC P5), then new tokens from n_computed
      int32_t hole_tokens = 0;
      int32_t new_tokens = 0;
      bool sample = false;  // the run reaches the end of the sequence's tokens: sample the next one
      // Tokens drafted to follow the sequence's (engine_speculation.cpp): run after its last
      // token as extra query positions (counted in new_tokens) and verified by the samples.
      std::vector<TokenId> draft;
      size_t drafter = kPromptLookupDrafter;  // whose draft (metrics)
    };
    std::vector<Item> items;
    int32_t tokens = 0;
  };

  void loop();
  void admit_new_requests();
  void handle_cancellations();
  bool plan_step(Step& step);
  // The work a sequence can do within `budget` tokens: its holes first, then new tokens.
  // False when the pool has no room for the new tokens' blocks.
  bool plan_work(Sequence& seq, int32_t budget, Step& step);
  bool grow(Sequence& seq, int32_t n_tokens);
  // Speculative decoding (engine_speculation.cpp). Drafts for the step's decoding sequences,
  // within `budget` tokens and the step's row cap, where the pool has free blocks for them.
  void plan_drafts(Step& step, int32_t& budget);
  bool may_draft(const Sequence& seq, const Step::Item& item) const;
  // After the pass: samples the item's rows in order, emitting each token, while the drafted
  // token matches what was sampled; the rejected positions' blocks are given back.
  void verify_draft(const Step::Item& item, size_t index);
  void verify_drafts(const Step& step);  // the step's items with drafts, in order
  // A pass's time, for the row cost (decode-only passes).
  void learn_row_cost(const Step& step, double seconds);
  // A finished sequence's new tokens join its tenant's history for later drafts.
  void remember_for_drafts(const Sequence& seq);
  // The tenant histories of the conversations the cache has let go leave with them.
  void forget_drafts_the_cache_let_go();
  bool preempt_latest(const Sequence* keep);
  void preempt(std::list<std::unique_ptr<Sequence>>::iterator it);
  // Waiting sequences other than the head give back the device blocks they hold (their KV stays
  // cached; they recompute what is gone when their turn comes). False when none held any.
  bool release_tables_behind_head();
  // A sequence lets its device blocks go (offered to the cache first) and waits to recompute
  // whatever of its KV is gone when it is admitted again.
  void release_to_recompute(Sequence& seq);
  // The step's pass: each item's ranges, block table and output wanted (its mask computed first).
  Batch batch_of(const Step& step);
  void run_step(Step& step);
  // The chunks a step completes of prompts whose KV streams out layer by layer (SPEC D3).
  struct TappedChunks {
    std::shared_ptr<PromptKvTap> tap;
    const KvTable* table;
    int32_t first_chunk = 0;
    int32_t chunks = 0;
  };
  std::vector<TappedChunks> prompt_taps(const Step& step) const;
  void fork_choices(Sequence& parent);
  std::unique_ptr<grammar::OutputConstraint> constraint_for(const GenerationRequest& request);
  // The sequence's mask of allowed tokens for its next token, computed if it is not yet.
  static std::span<const uint64_t> ensure_mask(Sequence& seq);
  // Embeddings (GenerationRequest::pooling, engine_pooling.cpp): what an item's pass must
  // output, and after it the item's hidden states pooled into its sequence (`index`: its place
  // in the step), which finishes once its prompt has run.
  static LogitsFor hidden_wanted(const Step::Item& item);
  void pool_hidden(Sequence& seq, const Step::Item& item, size_t index);
  // Before a step's pass, in parallel: the masks of its constrained sequences that sample
  // (masked_), so that a greedy one's argmax is found inside the output product
  // (LogitsFor::kArgmax).
  void compute_masks();
  void reuse_cached_prefix(Sequence& seq);
  void cache_chunks(Sequence& seq);
  // GenerationRequest::persist_running: the chunks `seq` filled since the last call, to the cache
  // and the disk tier.
  void persist_filled_chunks(Sequence& seq);
  void emit_token(Sequence& seq, TokenId token, const float* logits);
  // Samples every draw_ of the step, in parallel over the pool: each thread has its own sampler
  // and a draw depends only on its sequence and logits, so the tokens are those of a serial pass.
  void sample_draws();
  // Whether the sequence's next token is the argmax of its logits and nothing else of them is
  // needed (no logprobs), so the model need only find that index.
  static bool wants_argmax_only(const Sequence& seq);
  void finish(Sequence& seq, FinishReason reason);
  double now() const;
  void publish_cache_metrics();

  Model& model_;
  const Tokenizer& tokenizer_;
  EngineConfig config_;
  ThreadPool pool_;
  KvCache kv_;
  Sampler sampler_;                // the engine thread's (logprobs, verification)
  PromptLookupDrafter prompt_lookup_;
  RowCostEstimator row_cost_;  // from the decode steps' times
  TenantHistoryDrafter tenant_drafter_;
  std::vector<Sampler> samplers_;  // one per pool thread (sample_draws)
  // Constrained decoding (GenerationRequest::format): the vocabulary's bytes, built on first use.
  std::shared_ptr<const grammar::TokenBytes> token_bytes_;
  std::vector<Sequence*> masked_;  // compute_masks's scratch
  // One token to sample: the sequence, its logits row (null when the model found the token:
  // LogitsFor::kArgmax), its step in the request.
  struct Draw {
    Sequence* seq;
    const float* logits;
    uint64_t step;
    TokenId token;
  };
  std::vector<Draw> draws_;  // the step's, in the order their tokens are emitted
  EngineMetrics metrics_;

  // Engine thread only.
  std::list<std::unique_ptr<Sequence>> running_;  // in arrival order
  std::list<std::unique_ptr<Sequence>> waiting_;  // in arrival order (preempted ones return here)
  uint64_t next_arrival_ = 0;
  ForwardOutput output_;

  std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  std::deque<std::shared_ptr<RequestState>> inbox_;  // guarded by inbox_mutex_
  // Work on the KV pool from other threads, run by the engine thread between steps.
  void post(std::function<void()> task);
  // post() with a result: the future is ready once the task ran, or with an Error once the
  // engine has dropped it (stopped first). A task's Result is passed on as it is.
  template <class T>
  struct AsResult {
    using type = Result<T>;
  };
  template <class T>
  struct AsResult<Result<T>> {
    using type = Result<T>;
  };
  template <class Task>
  auto on_engine_thread(Task task) -> std::future<typename AsResult<std::invoke_result_t<Task&>>::type> {
    using Value = typename AsResult<std::invoke_result_t<Task&>>::type;
    // Answers exactly once: with the task's value, or, when the engine drops the task unrun (it
    // is shutting down), with an Error as the task goes.
    struct Answer {
      std::promise<Value> promise;
      bool answered = false;
      ~Answer() {
        if (!answered) promise.set_value(make_error(ErrorCode::kUnavailable, "the engine is shutting down"));
      }
    };
    auto answer = std::make_shared<Answer>();
    auto result = answer->promise.get_future();
    post([answer, task = std::move(task)]() mutable {
      answer->promise.set_value(Value(task()));
      answer->answered = true;
    });
    return result;
  }
  std::deque<std::function<void()>> tasks_;  // guarded by inbox_mutex_
  bool stopping_ = false;                             // guarded by inbox_mutex_
  std::mutex shutdown_mutex_;                         // one shutdown() joins the thread
  std::thread thread_;
};

}  // namespace mnemo
