// The requests a cluster simulation routes (sim/cluster_replay.h): when each arrives, its prompt
// and reply lengths, its session (the conversation, for session affinity) and its tokens, given
// as blocks so that requests sharing a prefix share tokens. Two sources:
//
//   - the Mooncake trace (data/mooncake_conversation_trace.jsonl): one hour of a production
//     chat service, each request's prompt as 512-token blocks named by hash ids, equal ids a
//     shared prefix. Token counts are divided by `scale` keeping the block structure (a block
//     becomes 512 / scale tokens), as data/README.md advises for this machine's sizes. The trace
//     names no conversation; a request's session is its first two blocks (the first is a prompt
//     most requests share; the second starts a conversation, which its later turns repeat).
//     `copies` > 1 replays that many copies of the hour, each with its own tokens and shifted by
//     a seeded offset within the hour, so that the load can grow with the cluster.
//   - conversations (sim/trace.h): each turn is a request whose prompt is the conversation so far.
//
// A request's tokens: its prompt's blocks, then its reply's (never shared: a reply's tokens
// reach the cache, but only a conversation trace's later turns contain them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/prefix_index.h"
#include "sim/trace.h"
#include "util/result.h"

namespace mnemo::sim {

struct ClusterRequest {
  double arrival_s = 0;
  int64_t prompt_tokens = 0;
  int64_t reply_tokens = 0;
  uint64_t session = 0;               // the conversation (session affinity's key)
  std::vector<uint64_t> blocks;       // the prompt's and reply's tokens, block_tokens each (the last partial)
  // The reply starts a block of its own (the Mooncake trace: a prompt's last block is partial, and
  // what follows it in another request is that request's prompt, not this reply); else the
  // blocks run on through the reply (a conversation: the next turn's prompt contains it).
  bool reply_apart = false;
};

struct ClusterTrace {
  int32_t block_tokens = 32;
  std::vector<ClusterRequest> requests;  // by arrival

  // Request r's first `n` tokens (n <= its prompt + reply).
  std::vector<TokenId> tokens(const ClusterRequest& r, int64_t n) const;
  double duration_s() const { return requests.empty() ? 0 : requests.back().arrival_s - requests.front().arrival_s; }
};

struct MooncakeOptions {
  int32_t scale = 16;      // token counts divided by this; 512 / scale tokens a block
  int32_t copies = 1;      // copies of the hour replayed together
  uint64_t seed = 1;       // their offsets
  size_t max_requests = 0;  // of the file, in order (0: all)
};

// An Error names the line that is malformed or out of range.
Result<ClusterTrace> load_mooncake_trace(const std::string& path, const MooncakeOptions& options);
// Each turn of each conversation a request (blocks of `block_tokens`, the chunk size).
ClusterTrace cluster_trace_of(const Trace& trace, int32_t block_tokens);

}  // namespace mnemo::sim
