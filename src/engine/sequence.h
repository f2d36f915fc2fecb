// One sequence the engine runs: a request's prompt plus what it generated so far. Owned by the
// engine thread alone.
//
//   tokens:  [ prompt ............ | generated ...... ]
//   KV:      [ computed (n_computed) ........ | to run ]
//
// Every step runs some of the tokens after n_computed (a prefill chunk, a single decode token,
// or a recompute after preemption: one rule). When the run reaches the end of `tokens`, the
// logits of the last token are sampled and the new token appended.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "engine/speculation.h"
#include "engine/stop_matcher.h"
#include "grammar/output_constraint.h"
#include "util/token_mask.h"
#include "kv/kv_table.h"
#include "model/batch.h"
#include "tokenizer/tokenizer.h"

namespace mnemo {

struct RequestState;

enum class SequenceState { kWaiting, kRunning, kSwapped, kFinished };

struct Sequence {
  Sequence(std::shared_ptr<RequestState> request_state, int32_t choice_index, uint64_t arrival_order,
           const Tokenizer& tokenizer, std::vector<std::string> stops);

  std::shared_ptr<RequestState> request;
  int32_t choice = 0;
  uint64_t arrival = 0;  // FCFS order; the latest arrivals are preempted first (SPEC V5)
  SequenceState state = SequenceState::kWaiting;

  std::vector<TokenId> tokens;
  int32_t n_prompt = 0;
  int32_t n_computed = 0;
  int32_t persisted_chunks = 0;  // chunks cached while running (GenerationRequest::persist_running)
  // The blocks covering [0, n_computed): the device's while it runs or waits, the host's while
  // swapped out. Only the KV cache changes them.
  KvTable kv;
  // Ranges inside [0, n_computed) whose cached KV had been dropped: their blocks are fresh and
  // they run (SPEC P5) before any token past n_computed does. Ascending.
  std::vector<QueryRange> holes;
  // Chunks whose blocks hold only a sliding-window model's global layers (history a window
  // before any position this sequence computes); never offered back to the cache.
  std::vector<int32_t> partial_chunks;
  SamplingParams sampling;           // seeded per choice
  // The request's output format, followed token by token (none: free text).
  std::unique_ptr<grammar::OutputConstraint> constraint;
  // The tokens the constraint allows for the next token, once computed for it (Engine::
  // ensure_mask); stale again once a token is accepted.
  TokenMask allowed;
  bool allowed_current = false;
  // An embedding (GenerationRequest::pooling): the sum (mean pooling) or the last (last-token
  // pooling) of the hidden states of positions [0, pooled_through); positions run again after
  // a preemption are not counted twice.
  std::vector<double> pooled;
  int32_t pooled_through = 0;

  AcceptanceTracker acceptance;  // of its speculative drafts: how long the next one is

  StreamingDetokenizer detokenizer;
  StopMatcher stop_matcher;
  double last_token_seconds = -1;  // for time-per-output-token

  int32_t n_generated() const { return static_cast<int32_t>(tokens.size()) - n_prompt; }
  int32_t n_hole_tokens() const {
    int32_t n = 0;
    for (const QueryRange& h : holes) n += h.length;
    return n;
  }
  // Positions before the first hole: their KV is valid.
  int32_t n_valid() const { return holes.empty() ? n_computed : holes.front().start; }
  int32_t n_pending() const { return static_cast<int32_t>(tokens.size()) - n_computed + n_hole_tokens(); }
};

// What the engine keeps per request, shared by its sequences (n > 1 samples).
struct RequestState {
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;
  RequestUsage usage;
  int32_t choices_finished = 0;
  bool forked = false;  // choices 1..n-1 created (after the shared prompt was computed)
  double arrival_seconds = 0;
  double first_token_seconds = -1;
};

// The text a request streamed for its first generated `tokens` (through the detokenizer and the
// stop matcher, as emit_token streams it): what the client of a resumed request already has,
// and what a reply held back whole (tool calls) must start with.
std::string streamed_text(const Tokenizer& tokenizer, const std::vector<std::string>& stops, const std::vector<TokenId>& tokens);

// Puts `seq` into `list`, which is in FCFS order of (arrival, choice), at its place.
void insert_in_order(std::list<std::unique_ptr<Sequence>>& list, std::unique_ptr<Sequence> seq);

}  // namespace mnemo
