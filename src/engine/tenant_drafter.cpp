#include "engine/tenant_drafter.h"

#include <algorithm>

#include <xxhash.h>

#include "kv/prefix_index.h"

namespace mnemo {

uint64_t TenantHistoryDrafter::conversation_of(uint64_t ns, std::span<const TokenId> tokens, int32_t block_size) {
  const auto block = static_cast<size_t>(block_size);
  if (block > 0 && tokens.size() >= block) return PrefixIndex::chunk_key(0, ns, tokens.first(block));
  return XXH3_64bits(tokens.data(), tokens.size_bytes());
}

int32_t TenantHistoryDrafter::draft(uint64_t ns, std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out) {
  const auto found = tenants_.find(ns);
  if (found == tenants_.end() || max_tokens <= 0) return 0;
  touch(found->second);
  return found->second.tree.draft(context, max_tokens, out);
}

void TenantHistoryDrafter::remember(uint64_t ns, uint64_t conversation, std::span<const TokenId> tokens) {
  if (tokens.size() < 2) return;
  // A stream longer than a tenant's share keeps its end (what follows comes after it).
  if (static_cast<int64_t>(tokens.size()) > limits_.tokens_per_tenant) {
    tokens = tokens.last(static_cast<size_t>(limits_.tokens_per_tenant));
  }
  auto [it, inserted] = tenants_.try_emplace(ns, tree_options_);
  Tenant& tenant = it->second;
  if (inserted) {
    lru_.push_front(ns);
    tenant.lru = lru_.begin();
  } else {
    touch(tenant);
  }
  tenant.streams.push_back(Stream{conversation, {tokens.begin(), tokens.end()}});
  tenant.tree.insert(tokens, tenant.next_stamp++);
  tenant.tokens += static_cast<int64_t>(tokens.size());
  total_tokens_ += static_cast<int64_t>(tokens.size());
  while (tenant.tokens > limits_.tokens_per_tenant) drop_oldest(tenant);
  while (total_tokens_ > limits_.total_tokens && !lru_.empty()) drop_tenant(lru_.back());
}

void TenantHistoryDrafter::forget(uint64_t ns, uint64_t conversation) {
  const auto it = tenants_.find(ns);
  if (it == tenants_.end()) return;
  Tenant& tenant = it->second;
  const auto gone = std::stable_partition(tenant.streams.begin(), tenant.streams.end(),
                                          [&](const Stream& s) { return s.conversation != conversation; });
  for (auto s = gone; s != tenant.streams.end(); ++s) {
    tenant.tree.erase(s->tokens);
    tenant.tokens -= static_cast<int64_t>(s->tokens.size());
    total_tokens_ -= static_cast<int64_t>(s->tokens.size());
  }
  tenant.streams.erase(gone, tenant.streams.end());
  if (tenant.streams.empty()) drop_tenant(ns);
}

size_t TenantHistoryDrafter::nodes() const {
  size_t n = 0;
  for (const auto& [ns, tenant] : tenants_) n += tenant.tree.nodes();
  return n;
}

void TenantHistoryDrafter::drop_oldest(Tenant& tenant) {
  const Stream& oldest = tenant.streams.front();
  tenant.tree.erase(oldest.tokens);
  tenant.tokens -= static_cast<int64_t>(oldest.tokens.size());
  total_tokens_ -= static_cast<int64_t>(oldest.tokens.size());
  tenant.streams.pop_front();
}

void TenantHistoryDrafter::drop_tenant(uint64_t ns) {
  const auto it = tenants_.find(ns);
  if (it == tenants_.end()) return;
  total_tokens_ -= it->second.tokens;
  lru_.erase(it->second.lru);
  tenants_.erase(it);
}

void TenantHistoryDrafter::touch(Tenant& tenant) { lru_.splice(lru_.begin(), lru_, tenant.lru); }

}  // namespace mnemo
