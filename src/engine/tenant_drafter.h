// Speculative drafts from a tenant's history (issue 26): what its earlier requests were given
// and generated, so that a request drafts from another's output (agents that call the same
// tools and repeat each other's results, a system prompt's boilerplate, code two sessions edit).
// Suffix decoding: each tenant's recent token streams are held in a bounded-depth suffix tree
// with counts (engine/suffix_tree.h); a draft follows the most frequent continuation of the
// longest suffix of the context that the tree holds.
//
// Per tenant (a cache namespace) and never across: a tenant's tree is reached only with its own
// namespace. Memory is bounded (tokens per tenant and in all, times the tree's depth in nodes):
// the oldest streams of a tenant leave first and the least recently used tenants leave whole. A
// conversation leaves with its cached KV: when the client deletes it, and when the cache
// forgets its first chunk (nothing of it left in any tier). Engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/suffix_tree.h"
#include "model/batch.h"

namespace mnemo {

// At the tree's default depth (12) a token of history costs at most 12 nodes of ~60 bytes
// (node and edge): ~190 MiB when every tenant's history is full and never repeats itself.
struct TenantHistoryLimits {
  int64_t tokens_per_tenant = int64_t{1} << 15;
  int64_t total_tokens = int64_t{1} << 18;
};

class TenantHistoryDrafter {
 public:
  using Limits = TenantHistoryLimits;
  explicit TenantHistoryDrafter(Limits limits = {}, SuffixTreeOptions tree = {}) : limits_(limits), tree_options_(tree) {}

  std::string_view name() const { return "tenant_history"; }
  // As Drafter::draft, from tenant `ns`'s history.
  int32_t draft(uint64_t ns, std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out);
  // Adds a token stream (a finished request's new prompt tokens and its output) to the tenant's
  // history, tagged with its conversation (conversation_of its tokens).
  void remember(uint64_t ns, uint64_t conversation, std::span<const TokenId> tokens);
  // Removes the conversation's streams from the tenant's history.
  void forget(uint64_t ns, uint64_t conversation);

  // The conversation a request's tokens belong to, for remember and forget: the KV cache's key
  // for its first chunk (PrefixIndex::chunk_key(0, ns, first block_size tokens)), so that the
  // cache names it when it lets the conversation go (KvCache::take_forgotten_conversations);
  // tokens shorter than a chunk, never cached, a hash of them.
  static uint64_t conversation_of(uint64_t ns, std::span<const TokenId> tokens, int32_t block_size);

  int64_t tokens() const { return total_tokens_; }
  int64_t tenants() const { return static_cast<int64_t>(tenants_.size()); }
  // The nodes of every tenant's tree.
  size_t nodes() const;

 private:
  struct Stream {
    uint64_t conversation;
    std::vector<TokenId> tokens;
  };
  struct Tenant {
    explicit Tenant(SuffixTreeOptions options) : tree(options) {}
    std::deque<Stream> streams;  // oldest first
    SuffixTree tree;             // of the streams
    uint32_t next_stamp = 0;
    int64_t tokens = 0;
    std::list<uint64_t>::iterator lru;  // in lru_
  };
  void drop_oldest(Tenant& tenant);
  void drop_tenant(uint64_t ns);
  void touch(Tenant& tenant);

  Limits limits_;
  SuffixTreeOptions tree_options_;
  std::unordered_map<uint64_t, Tenant> tenants_;
  std::list<uint64_t> lru_;  // namespaces, most recently used first
  int64_t total_tokens_ = 0;
};

}  // namespace mnemo
