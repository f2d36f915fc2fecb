// Speculative drafts from a tenant's history (issue 26): what its earlier requests were given
// and generated, so that a request drafts from another's output (agents that call the same
// tools and repeat each other's results, a system prompt's boilerplate, code two sessions edit).
// Suffix decoding's idea without its tree: the longest n-gram (max_ngram down to min_ngram)
// ending the context is looked up in per-length hash indexes of the tenant's recent token
// streams, and the draft is what followed its latest occurrence.
//
// Per tenant (a cache namespace) and never across: a tenant's index is reached only with its
// own namespace. Memory is bounded (tokens per tenant, tokens in all), the oldest streams of a
// tenant leave first and the least recently used tenants leave whole. A conversation the client
// deletes (forget) leaves with its cached KV. Engine thread only.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/batch.h"

namespace mnemo {

struct TenantHistoryLimits {
  int64_t tokens_per_tenant = int64_t{1} << 16;
  int64_t total_tokens = int64_t{1} << 21;
};

class TenantHistoryDrafter {
 public:
  static constexpr int32_t kMinNgram = 2;
  static constexpr int32_t kMaxNgram = 4;
  using Limits = TenantHistoryLimits;
  explicit TenantHistoryDrafter(Limits limits = {}) : limits_(limits) {}

  std::string_view name() const { return "tenant_history"; }
  // As Drafter::draft, from tenant `ns`'s history.
  int32_t draft(uint64_t ns, std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out);
  // Adds a token stream (a finished request's new prompt tokens and its output) to the tenant's
  // history, tagged with its conversation (conversation_of its tokens).
  void remember(uint64_t ns, uint64_t conversation, std::span<const TokenId> tokens);
  // Removes the conversation's streams from the tenant's history.
  void forget(uint64_t ns, uint64_t conversation);

  // The conversation a request's tokens belong to, for remember and forget: its first tokens.
  static uint64_t conversation_of(std::span<const TokenId> tokens);

  int64_t tokens() const { return total_tokens_; }
  int64_t tenants() const { return static_cast<int64_t>(tenants_.size()); }

 private:
  struct Stream {
    uint64_t serial;
    uint64_t conversation;
    std::vector<TokenId> tokens;
  };
  // Where an n-gram ended (the draft starts there): a stream by serial, and an offset in it.
  struct Place {
    uint64_t serial;
    uint32_t offset;
  };
  struct Tenant {
    std::deque<Stream> streams;  // oldest first; serials ascending
    uint64_t next_serial = 0;
    int64_t tokens = 0;
    // Per n-gram length (index n - kMinNgram): its hash -> latest place. Places of streams that
    // left stay until a rebuild and are skipped.
    std::array<std::unordered_map<uint64_t, Place>, kMaxNgram - kMinNgram + 1> index;
    std::list<uint64_t>::iterator lru;  // in lru_
  };
  static uint64_t hash(std::span<const TokenId> ngram);
  const Stream* stream(const Tenant& tenant, uint64_t serial) const;
  void index_stream(Tenant& tenant, const Stream& stream);
  void rebuild(Tenant& tenant);
  void drop_oldest(Tenant& tenant);
  void drop_tenant(uint64_t ns);
  void touch(Tenant& tenant);

  Limits limits_;
  std::unordered_map<uint64_t, Tenant> tenants_;
  std::list<uint64_t> lru_;  // namespaces, most recently used first
  int64_t total_tokens_ = 0;
};

}  // namespace mnemo
