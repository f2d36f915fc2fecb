#include "engine/engine.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstring>
#include <utility>

#include "util/check.h"
#include "util/thread_name.h"

namespace mnemo {

namespace {

KvPoolConfig pool_config(const EngineConfig& config, const ModelConfig& model) {
  KvPoolConfig c;
  if (model.sliding_window > 0) {
    std::vector<int32_t> global_layers;
    for (int32_t layer = 0; layer < model.n_layers; ++layer) {
      if (!model.is_local(layer)) global_layers.push_back(layer);
    }
    use_sliding_window(c, model.sliding_window, std::move(global_layers));
    c.host_compact_blocks = config.host_compact_blocks;
  }
  c.compact_on_device = config.compact_on_device;
  c.device_blocks = config.kv_blocks;
  c.host_blocks = config.host_swap_blocks;
  c.host_type = config.host_kv_type;
  c.disk_type = config.disk_kv_type;
  c.host_exact_blocks = config.host_exact_blocks;
  c.policy = config.cache_policy;
  c.ghosts_per_chunk = kGhostsPerChunk;
  c.cost = config.cost;
  c.swap_out_threshold = config.prefix_caching ? config.swap_out_threshold : 0.0f;
  c.disk = config.prefix_caching ? config.disk : nullptr;
  c.layerwise_swap_in = config.layerwise_swap_in;
  c.clock = config.cache_clock;
  c.remote_device = config.remote_device;
  return c;
}

// A per-choice seed: choices of one request must differ, yet each is reproducible.
uint64_t choice_seed(uint64_t seed, int32_t choice) {
  return choice == 0 ? seed : seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(choice));
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer& tokenizer, EngineConfig config)
    : model_(model),
      tokenizer_(tokenizer),
      config_(config),
      pool_(config.threads),
      kv_(model.kv_layout(config.block_size, config.kv_dtype), pool_config(config, model.config())),
      samplers_(static_cast<size_t>(pool_.size())) {
  kv_.restore_from_disk();
  metrics_.update([&](MetricsSnapshot& m) {
    m.kv_blocks_total = config_.kv_blocks;
    m.host_blocks_total = kv_.n_host_blocks() + kv_.n_host_exact_blocks();
    m.host_exact_blocks_total = kv_.n_host_exact_blocks();
    m.host_compact_blocks_total = kv_.n_host_compact_blocks();
  });
  publish_cache_metrics();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard lock(inbox_mutex_);
    stopping_ = true;
  }
  inbox_ready_.notify_all();
  // Callable from several threads at once (a signal handler's thread and main): one joins.
  std::lock_guard lock(shutdown_mutex_);
  if (thread_.joinable()) thread_.join();
}

double Engine::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<std::shared_ptr<RequestStream>> Engine::submit(GenerationRequest request, std::shared_ptr<RequestStream> stream) {
  const int32_t context = model_.config().context_length;
  const int32_t n_prompt = static_cast<int32_t>(request.prompt.size());
  if (n_prompt == 0) return make_error("the prompt is empty");
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= model_.n_vocab()) return make_error("prompt token {} is outside the vocabulary", t);
  }
  if (request.pooling != Pooling::kNone) {
    if (request.n != 1 || request.format != OutputFormat::kText || !request.resume_tokens.empty() || request.top_logprobs >= 0) {
      return make_error("an embedding request has one choice, no output format, no resumed tokens and no logprobs");
    }
    request.max_tokens = 1;  // nothing is generated; one token's room keeps the accounting as for any request
  }
  if (request.max_tokens < 1) return make_error("max_tokens must be at least 1");
  if (request.n < 1 || request.n > 128) return make_error("n must be between 1 and 128");
  if (n_prompt >= context) {
    return make_error("the prompt has {} tokens; the model's context is {} tokens", n_prompt, context);
  }
  request.max_tokens = std::min(request.max_tokens, context - n_prompt);
  const auto n_resumed = static_cast<int32_t>(request.resume_tokens.size());
  if (n_resumed > 0) {
    if (request.n != 1) return make_error("only a request with n = 1 can be resumed");
    if (n_resumed >= request.max_tokens) {
      return make_error("{} resumed tokens leave nothing to generate within max_tokens {}", n_resumed, request.max_tokens);
    }
    for (TokenId t : request.resume_tokens) {
      if (t < 0 || t >= model_.n_vocab()) return make_error("resumed token {} is outside the vocabulary", t);
      if (!request.ignore_eos && tokenizer_.is_end_of_generation(t)) {
        return make_error("resumed token {} ends generation: the request was already over", t);
      }
    }
  }
  // The request must fit in the pool on its own, or it could never run.
  const int32_t bs = config_.block_size;
  const int64_t needed = (n_prompt + bs - 1) / bs + static_cast<int64_t>(request.n) * ((request.max_tokens + bs - 1) / bs + 1);
  if (needed > config_.kv_blocks) {
    return make_error("the request needs {} KV blocks of {} tokens; the pool has {}", needed, bs, config_.kv_blocks);
  }
  MNEMO_RETURN_IF_ERROR(validate(request.sampling));
  if (!request.sampling.logit_bias.empty() && request.sampling.logit_bias.back().first >= model_.n_vocab()) {
    return make_error("logit_bias names token {}, outside the vocabulary of {} tokens", request.sampling.logit_bias.back().first,
                      model_.n_vocab());
  }
  auto state = std::make_shared<RequestState>();
  state->request = std::move(request);
  state->stream = stream ? std::move(stream) : std::make_shared<RequestStream>();
  state->arrival_seconds = now();
  state->usage.prompt_tokens = n_prompt;
  state->usage.completion_tokens = n_resumed;
  state->usage.resumed_tokens = n_resumed;
  auto submitted = state->stream;
  {
    std::lock_guard lock(inbox_mutex_);
    if (stopping_) return make_error(ErrorCode::kUnavailable, "the engine is shutting down");
    inbox_.push_back(std::move(state));
  }
  inbox_ready_.notify_one();
  metrics_.update([&](MetricsSnapshot& m) {
    ++m.requests_total;
    m.prompt_tokens_total += static_cast<uint64_t>(n_prompt);
  });
  return submitted;
}

void Engine::loop() {
  name_this_thread("mnemo-engine");
  for (;;) {
    {
      std::unique_lock lock(inbox_mutex_);
      inbox_ready_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !tasks_.empty() || !running_.empty() || !waiting_.empty();
      });
      if (stopping_) break;
    }
    admit_new_requests();
    handle_cancellations();
    Step step;
    if (plan_step(step)) {
      run_step(step);
    } else {
      kv_.finish_loads();  // no pass to overlap with
    }
    if (step.items.empty() && running_.empty() && !waiting_.empty()) {
      // Nothing runs. Sequences waiting behind the head may hold device blocks the head needs
      // (a prefix they matched as the head before a preempted, earlier-arrived sequence was put
      // back ahead of them): they let them go, and the head tries again. A head that cannot fit
      // alone fails (submit() bounds requests by the pool: a defence, not a path).
      if (!release_tables_behind_head()) finish(*waiting_.front(), FinishReason::kError);
    }
    std::erase_if(running_, [](const auto& s) { return s->state == SequenceState::kFinished; });
    std::erase_if(waiting_, [](const auto& s) { return s->state == SequenceState::kFinished; });
    forget_drafts_the_cache_let_go();
    publish_cache_metrics();
  }
  // Shutdown: whatever is left ends as cancelled.
  admit_new_requests();
  for (auto* list : {&running_, &waiting_}) {
    for (auto& seq : *list) {
      if (seq->state != SequenceState::kFinished) finish(*seq, FinishReason::kCancelled);
    }
    list->clear();
  }
}

void Engine::admit_new_requests() {
  std::deque<std::shared_ptr<RequestState>> incoming;
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard lock(inbox_mutex_);
    incoming.swap(inbox_);
    tasks.swap(tasks_);
  }
  if (!tasks.empty()) {
    const auto started = std::chrono::steady_clock::now();
    for (auto& task : tasks) task();
    const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - started;
    metrics_.update([&](MetricsSnapshot& m) { m.engine_task_seconds += spent.count(); });
  }
  for (auto& state : incoming) {
    // Choice 0 runs the prompt; the other choices are forked from it once the prompt's KV
    // exists, sharing its blocks (SPEC V3).
    auto seq = std::make_unique<Sequence>(state, 0, next_arrival_++, tokenizer_, state->request.stop);
    seq->tokens = state->request.prompt;
    seq->n_prompt = static_cast<int32_t>(seq->tokens.size());
    seq->sampling = state->request.sampling;
    seq->constraint = constraint_for(state->request);
    // The resumed tokens' text reached the client already; replaying them brings the
    // detokenizer and the stop matcher to where the failed instance had them (the text they
    // held back is still to come).
    for (TokenId t : state->request.resume_tokens) {
      seq->tokens.push_back(t);
      (void)seq->stop_matcher.push(seq->detokenizer.push(t));
      if (seq->constraint) (void)seq->constraint->accept(t);
    }
    waiting_.push_back(std::move(seq));
  }
}

void Engine::handle_cancellations() {
  for (auto* list : {&running_, &waiting_}) {
    for (auto& seq : *list) {
      if (seq->state != SequenceState::kFinished && seq->request->stream->cancelled()) {
        finish(*seq, FinishReason::kCancelled);
      }
    }
  }
  std::erase_if(running_, [](const auto& s) { return s->state == SequenceState::kFinished; });
  std::erase_if(waiting_, [](const auto& s) { return s->state == SequenceState::kFinished; });
}

void Engine::cache_chunks(Sequence& seq) {
  if (!config_.prefix_caching || seq.kv.on_host()) return;
  kv_.cache_prefix(seq.request->request.cache_namespace, seq.tokens, seq.n_valid(), seq.kv, seq.partial_chunks);
}

void Engine::persist_filled_chunks(Sequence& seq) {
  if (!config_.prefix_caching || kv_.disk() == nullptr) return;
  const int32_t filled = seq.n_valid() / config_.block_size;
  if (filled <= seq.persisted_chunks) return;
  cache_chunks(seq);
  metrics_.update([&](MetricsSnapshot& m) { m.persisted_running_chunks += static_cast<uint64_t>(filled - seq.persisted_chunks); });
  seq.persisted_chunks = filled;
}

Batch Engine::batch_of(const Step& step) {
  masked_.clear();
  for (const Step::Item& item : step.items) {
    if (item.sample && item.seq->constraint && !item.seq->allowed_current) masked_.push_back(item.seq);
  }
  compute_masks();
  Batch batch;
  batch.sequences.reserve(step.items.size());
  for (const Step::Item& item : step.items) {
    SequenceInput in;
    for (const QueryRange& r : item.ranges) {
      // A draft follows the sequence's last token in the last range, past its tokens.
      const int32_t end = std::min(r.end(), static_cast<int32_t>(item.seq->tokens.size()));
      in.tokens.insert(in.tokens.end(), item.seq->tokens.begin() + r.start, item.seq->tokens.begin() + end);
    }
    in.tokens.insert(in.tokens.end(), item.draft.begin(), item.draft.end());
    in.ranges = item.ranges;
    in.block_table.assign(item.seq->kv.begin(), item.seq->kv.end());
    const bool argmax = wants_argmax_only(*item.seq);
    in.logits = item.seq->request->request.pooling != Pooling::kNone ? hidden_wanted(item)
                : !item.sample                                      ? LogitsFor::kNone
                : !item.draft.empty()                               ? (argmax && !item.seq->constraint ? LogitsFor::kArgmaxAll : LogitsFor::kAll)
                : argmax                                            ? LogitsFor::kArgmax
                                                                    : LogitsFor::kLast;
    if (in.logits == LogitsFor::kArgmax && item.seq->constraint) in.allowed_tokens = item.seq->allowed.words();
    batch.sequences.push_back(std::move(in));
  }
  return batch;
}

void Engine::run_step(Step& step) {
  Batch batch = batch_of(step);
  kv_.begin_background_work();  // swap-ins layer by layer, then copies ahead of need, beside the pass
  const std::vector<TappedChunks> taps = prompt_taps(step);
  const bool loads = kv_.has_pending_loads();
  if (loads || !taps.empty()) {
    batch.before_attention = [this, loads, &taps](int32_t layer) {
      if (loads) kv_.wait_for_layer(layer);
      // The layer's KV of this step's tokens is in the pool now: it can leave while the rest runs.
      for (const TappedChunks& t : taps) t.tap->on_layer(t.first_chunk, t.chunks, layer, kv_.device().layout().n_layers,
                                                         kv_.layer_slices(t.table->blocks(), t.first_chunk, t.chunks, layer));
    };
  }
  const auto pass_started = std::chrono::steady_clock::now();
  const Status status = model_.forward(batch, kv_.device(), pool_, output_);
  learn_row_cost(step, std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_started).count());
  kv_.end_background_work();
  metrics_.update([&](MetricsSnapshot& m) {
    ++m.steps_total;
    m.batch_tokens.observe(step.tokens);
    // Counted before the tokens go out: whoever sees a request end sees its passes.
    for (const Step::Item& item : step.items) m.decode_passes_total += item.sample ? 1 : 0;
  });
  if (!status.ok()) {
    // A batch the model refuses is an engine bug; fail its requests rather than loop on it.
    for (const Step::Item& item : step.items) finish(*item.seq, FinishReason::kError);
    return;
  }
  for (size_t i = 0; i < step.items.size(); ++i) {
    const Step::Item& item = step.items[i];
    Sequence& seq = *item.seq;
    int32_t done = item.hole_tokens;
    while (done > 0) {  // the holes taken are consumed from the front
      QueryRange& h = seq.holes.front();
      const int32_t n = std::min(done, h.length);
      h.start += n;
      h.length -= n;
      done -= n;
      if (h.length == 0) seq.holes.erase(seq.holes.begin());
    }
    if (!item.draft.empty()) continue;  // verify_drafts, after the other draws: its rows in order
    seq.n_computed += item.new_tokens;
    if (seq.request->request.persist_running && seq.choice == 0 && seq.state != SequenceState::kFinished) {
      persist_filled_chunks(seq);
    }
    if (seq.request->request.pooling != Pooling::kNone) {
      pool_hidden(seq, item, i);
      continue;
    }
    if (!item.sample || seq.state == SequenceState::kFinished) continue;
    RequestState& state = *seq.request;
    if (output_.argmax[i] >= 0) {  // LogitsFor::kArgmax: the model found the greedy token
      draws_.push_back({&seq, nullptr, static_cast<uint64_t>(seq.n_generated()), output_.argmax[i]});
      continue;
    }
    const float* logits = output_.last_row(i);
    if (seq.choice == 0 && state.request.n > 1 && !state.forked) fork_choices(seq);
    if (seq.choice == 0 && state.forked && seq.n_generated() == 0) {
      // Every choice samples its first token from the shared prompt's logits.
      for (auto& other : running_) {
        if (other->request.get() == &state && other->choice != 0 && other->n_generated() == 0) {
          draws_.push_back({other.get(), logits, 0, 0});
        }
      }
    }
    draws_.push_back({&seq, logits, static_cast<uint64_t>(seq.n_generated()), 0});
  }
  sample_draws();
  for (const Draw& d : draws_) emit_token(*d.seq, d.token, d.logits);
  draws_.clear();  // kept for its capacity; no pointer outlives the step
  verify_drafts(step);
}

std::vector<Engine::TappedChunks> Engine::prompt_taps(const Step& step) const {
  std::vector<TappedChunks> taps;
  const int32_t bs = config_.block_size;
  for (const Step::Item& item : step.items) {
    const Sequence& seq = *item.seq;
    // A prompt's new tokens (not recomputed holes, not a later choice's, not decode steps).
    if (seq.choice != 0 || item.hole_tokens != 0 || item.ranges.size() != 1) continue;
    const QueryRange& range = item.ranges.front();
    if (range.start >= seq.n_prompt) continue;
    const std::shared_ptr<PromptKvTap>& tap = seq.request->request.prompt_tap;
    if (!tap) continue;
    // From the first chunk the tap lacks: those before this step's are in the sequence's blocks
    // (reused, or computed earlier), or arrive in them layer by layer during this pass.
    const int32_t first = std::max(0, tap->first_wanted_chunk());
    const int32_t end = std::min(range.end() / bs, (static_cast<int32_t>(seq.tokens.size()) - 1) / bs);
    const bool partial = std::any_of(seq.partial_chunks.begin(), seq.partial_chunks.end(),
                                     [&](int32_t chunk) { return chunk >= first && chunk < end; });
    if (end > first && !partial) taps.push_back({tap, &seq.kv, first, end - first});
  }
  return taps;
}

void Engine::fork_choices(Sequence& parent) {
  RequestState& state = *parent.request;
  state.forked = true;
  for (int32_t c = 1; c < state.request.n; ++c) {
    auto child = std::make_unique<Sequence>(parent.request, c, parent.arrival, tokenizer_, state.request.stop);
    child->tokens = parent.tokens;
    child->n_prompt = parent.n_prompt;
    child->n_computed = parent.n_computed;
    child->kv = kv_.share(parent.kv);
    child->partial_chunks = parent.partial_chunks;
    child->sampling = state.request.sampling;
    child->sampling.seed = choice_seed(state.request.sampling.seed, c);
    child->constraint = constraint_for(state.request);
    child->state = SequenceState::kRunning;
    insert_in_order(running_, std::move(child));
  }
}

void Engine::emit_token(Sequence& seq, TokenId token, const float* logits) {
  RequestState& state = *seq.request;
  const GenerationRequest& req = state.request;
  const double t = now();
  if (state.first_token_seconds < 0) {
    state.first_token_seconds = t;
    metrics_.update([&](MetricsSnapshot& m) { m.ttft_seconds.observe(t - state.arrival_seconds); });
  } else if (seq.last_token_seconds >= 0) {
    metrics_.update([&](MetricsSnapshot& m) { m.tpot_seconds.observe(t - seq.last_token_seconds); });
  }
  seq.last_token_seconds = t;
  seq.tokens.push_back(token);
  if (seq.constraint) {
    (void)seq.constraint->accept(token);  // sampled from its allowed tokens
    seq.allowed_current = false;
  }
  ++state.usage.completion_tokens;
  metrics_.update([&](MetricsSnapshot& m) { ++m.generation_tokens_total; });

  std::optional<Logprobs> logprobs;
  if (req.top_logprobs >= 0) {
    assert(logits != nullptr);  // wants_argmax_only() is false with logprobs
    logprobs = sampler_.logprobs({logits, static_cast<size_t>(output_.n_vocab)}, token, req.top_logprobs);
  }
  if (!req.ignore_eos && tokenizer_.is_end_of_generation(token)) {
    if (logprobs || req.report_every_token) state.stream->push(TokenDelta{seq.choice, seq.stop_matcher.flush(), token, logprobs});
    finish(seq, FinishReason::kStop);
    return;
  }
  const StopMatcher::Output out = seq.stop_matcher.push(seq.detokenizer.push(token));
  if (!out.text.empty() || logprobs || req.report_every_token) state.stream->push(TokenDelta{seq.choice, out.text, token, logprobs});
  if (out.stopped) {
    finish(seq, FinishReason::kStop);
  } else if (seq.n_generated() >= req.max_tokens ||
             static_cast<int32_t>(seq.tokens.size()) >= model_.config().context_length) {
    finish(seq, FinishReason::kLength);
  }
}

void Engine::finish(Sequence& seq, FinishReason reason) {
  if (seq.state == SequenceState::kFinished) return;
  RequestState& state = *seq.request;
  if (reason == FinishReason::kLength) {
    // Text held back for a possible stop string or an incomplete character is output now.
    std::string rest = seq.stop_matcher.push(seq.detokenizer.flush()).text + seq.stop_matcher.flush();
    if (!rest.empty()) state.stream->push(TokenDelta{seq.choice, std::move(rest), -1, std::nullopt});
  }
  if (reason != FinishReason::kError) {
    cache_chunks(seq);
    remember_for_drafts(seq);
    if (state.request.end_conversation && config_.prefix_caching) {
      kv_.end_conversation(state.request.cache_namespace, seq.tokens);
    }
    if (state.request.cache_ttl_seconds > 0 && config_.prefix_caching) {
      kv_.pin_conversation(state.request.cache_namespace, seq.tokens, state.request.cache_ttl_seconds);
    }
  }
  kv_.release(seq.kv);
  seq.state = SequenceState::kFinished;
  state.stream->push(ChoiceFinished{seq.choice, reason});
  ++state.choices_finished;
  // Before the fork only choice 0 exists; a request that ends then ends with it.
  const bool all_done = !state.forked || state.choices_finished == state.request.n;
  if (all_done) {
    // Counted and published first: whoever sees the request end sees the figures it changed.
    metrics_.update([&](MetricsSnapshot& m) {
      ++m.requests_finished;
      m.requests_cancelled += reason == FinishReason::kCancelled ? 1 : 0;
    });
    publish_cache_metrics();
    RequestDone done{state.usage, reason == FinishReason::kError ? "the engine could not run this request" : ""};
    state.stream->push(std::move(done));
  }
}

}  // namespace mnemo
