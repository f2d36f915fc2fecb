// Engine, speculative decoding (issue 26): a decoding sequence's step runs its last token and a
// draft after it as one query range; each row's logits are sampled in order, with the draw of
// the step it stands for, and the drafted tokens kept while they equal what was sampled. Every
// kept token is the one decoding without a draft would have produced (the pass is batch- and
// range-invariant, and a draw depends only on the seed, the step and the logits), so the output
// does not change; only fewer passes produce it.
#include <algorithm>

#include "engine/engine.h"

namespace mnemo {

bool Engine::may_draft(const Sequence& seq, const Step::Item& item) const {
  const GenerationRequest& request = seq.request->request;
  // A decode step: one new token (the last sampled one), nothing recomputed, and a token
  // generated already (a prompt's end forks n > 1 choices and starts a constraint).
  return config_.speculation.enabled && request.speculation && request.pooling == Pooling::kNone && item.sample &&
         item.hole_tokens == 0 && item.new_tokens == 1 && seq.n_generated() > 0 &&
         seq.state != SequenceState::kFinished;
}

void Engine::plan_drafts(Step& step, int32_t& budget) {
  const SpeculationConfig& spec = config_.speculation;
  if (!spec.enabled) return;
  int32_t rows = config_.max_batch_tokens - budget;
  const int32_t context = model_.config().context_length;
  const double row_cost = shared_row_cost(row_cost_.row_cost(spec.row_cost), static_cast<int32_t>(std::count_if(
                                                             step.items.begin(), step.items.end(),
                                                             [](const Step::Item& item) { return item.sample; })));
  for (Step::Item& item : step.items) {
    const int32_t cap = std::min(spec.max_step_tokens - rows, budget);
    if (cap <= 0) break;
    Sequence& seq = *item.seq;
    if (!may_draft(seq, item)) continue;
    const GenerationRequest& request = seq.request->request;
    // The step emits up to 1 + k tokens: within max_tokens, and k's positions within the context.
    const int32_t room = std::min(request.max_tokens - seq.n_generated() - 1, context - 1 - seq.n_computed);
    int32_t k = std::min({seq.acceptance.draft_length(spec.max_draft, row_cost), room, cap});
    if (k <= 0 && room > 0 && seq.acceptance.should_probe()) k = 1;
    if (k <= 0) {
      seq.acceptance.idle();
      continue;
    }
    std::vector<TokenId> draft;
    // The request's own context first (its history, its earlier replies); else its tenant's.
    size_t drafter = kPromptLookupDrafter;
    const int32_t wanted = k;
    k = prompt_lookup_.draft(seq.tokens, wanted, draft);
    if (k == 0) {
      drafter = kTenantHistoryDrafter;
      k = tenant_drafter_.draft(request.cache_namespace, seq.tokens, wanted, draft);
    }
    // A constrained sequence's first drafted token must be one its format allows now (the rest
    // are checked as verification samples each row under its own mask).
    if (k > 0 && seq.constraint && seq.allowed_current && !seq.allowed.test(draft.front())) k = 0;
    if (k <= 0) continue;
    draft.resize(static_cast<size_t>(k));
    // Drafts take free blocks only: nothing cached is evicted, nothing preempted, for a guess.
    if (kv_.blocks_needed(seq.kv, seq.n_computed, seq.n_computed + 1 + k) > kv_.n_free() ||
        !kv_.prepare_write(seq.kv, seq.n_computed, seq.n_computed + 1 + k)) {
      continue;
    }
    item.ranges.back().length += k;
    item.new_tokens += k;
    item.draft = std::move(draft);
    item.drafter = drafter;
    budget -= k;
    rows += k;
  }
}

void Engine::learn_row_cost(const Step& step, double seconds) {
  // Decode-only passes (every item samples after its one token, or verifies a draft) teach the
  // policy what a row costs; prefill chunks would blur it.
  if (!config_.speculation.learn_row_cost) return;
  const bool decode_only = std::all_of(step.items.begin(), step.items.end(), [](const Step::Item& item) {
    return item.sample && item.hole_tokens == 0 && item.new_tokens == 1 + static_cast<int32_t>(item.draft.size());
  });
  if (decode_only) row_cost_.observe(step.tokens, seconds);
}

void Engine::verify_drafts(const Step& step) {
  for (size_t i = 0; i < step.items.size(); ++i) {
    if (step.items[i].draft.empty()) continue;
    Sequence& seq = *step.items[i].seq;
    seq.n_computed += 1;  // the last sampled token's KV; the draft's as its tokens are kept
    verify_draft(step.items[i], i);
    if (seq.request->request.persist_running && seq.choice == 0 && seq.state != SequenceState::kFinished) {
      persist_filled_chunks(seq);
    }
  }
}

void Engine::verify_draft(const Step::Item& item, size_t index) {
  Sequence& seq = *item.seq;
  const auto k = static_cast<int32_t>(item.draft.size());
  const bool argmax_rows = output_.row_argmax[static_cast<size_t>(output_.first_row[index])] >= 0;
  int32_t kept = 0;
  for (int32_t i = 0; i <= k; ++i) {
    TokenId token;
    const float* logits = nullptr;
    if (argmax_rows) {
      token = output_.argmax_of(index, i);
    } else {
      logits = output_.row(index, i);
      const std::span<const uint64_t> allowed = seq.constraint ? ensure_mask(seq) : std::span<const uint64_t>{};
      token = sampler_.sample(seq.sampling, {logits, static_cast<size_t>(output_.n_vocab)}, seq.tokens,
                              static_cast<uint64_t>(seq.n_generated()), allowed);
    }
    emit_token(seq, token, logits);
    if (seq.state == SequenceState::kFinished || i == k || token != item.draft[static_cast<size_t>(i)]) break;
    ++seq.n_computed;  // the drafted token's KV, computed in this pass, is the kept token's
    ++kept;
  }
  seq.acceptance.observe(k, kept);
  if (seq.state != SequenceState::kFinished) kv_.truncate(seq.kv, seq.n_computed);
  metrics_.update([&](MetricsSnapshot& m) {
    m.spec_draft_tokens[item.drafter] += static_cast<uint64_t>(k);
    m.spec_accepted_tokens[item.drafter] += static_cast<uint64_t>(kept);
  });
}

void Engine::remember_for_drafts(const Sequence& seq) {
  if (!config_.speculation.enabled || seq.request->request.pooling != Pooling::kNone) return;
  // What the tenant's history lacks: the prompt past its cached prefix (earlier turns are there
  // already), and the output.
  const auto from = static_cast<size_t>(std::clamp(seq.request->usage.cached_tokens, 0, seq.n_prompt));
  const std::span<const TokenId> tokens(seq.tokens);
  const uint64_t ns = seq.request->request.cache_namespace;
  tenant_drafter_.remember(ns, TenantHistoryDrafter::conversation_of(ns, tokens, kv_.block_size()),
                           tokens.subspan(from));
}

void Engine::forget_drafts_the_cache_let_go() {
  for (const auto& [ns, conversation] : kv_.take_forgotten_conversations()) tenant_drafter_.forget(ns, conversation);
}

}  // namespace mnemo
