#include "engine/tenant_drafter.h"

#include <algorithm>

#include <xxhash.h>

namespace mnemo {

namespace {
constexpr size_t kConversationTokens = 64;
}

uint64_t TenantHistoryDrafter::hash(std::span<const TokenId> ngram) {
  return XXH3_64bits(ngram.data(), ngram.size_bytes());
}

uint64_t TenantHistoryDrafter::conversation_of(std::span<const TokenId> tokens) {
  return hash(tokens.first(std::min(tokens.size(), kConversationTokens)));
}

const TenantHistoryDrafter::Stream* TenantHistoryDrafter::stream(const Tenant& tenant, uint64_t serial) const {
  // Serials ascend along the deque, with gaps where a conversation was forgotten.
  const auto it = std::lower_bound(tenant.streams.begin(), tenant.streams.end(), serial,
                                   [](const Stream& s, uint64_t wanted) { return s.serial < wanted; });
  return it != tenant.streams.end() && it->serial == serial ? &*it : nullptr;
}

int32_t TenantHistoryDrafter::draft(uint64_t ns, std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out) {
  const auto found = tenants_.find(ns);
  if (found == tenants_.end() || max_tokens <= 0) return 0;
  Tenant& tenant = found->second;
  touch(tenant);
  for (int32_t n = std::min<int32_t>(kMaxNgram, static_cast<int32_t>(context.size())); n >= kMinNgram; --n) {
    const std::span<const TokenId> suffix = context.last(static_cast<size_t>(n));
    const auto& index = tenant.index[static_cast<size_t>(n - kMinNgram)];
    const auto hit = index.find(hash(suffix));
    if (hit == index.end()) continue;
    const Stream* s = stream(tenant, hit->second.serial);
    const uint32_t offset = hit->second.offset;
    // A stale place (its stream left) or a hash collision: no draft from this length.
    if (s == nullptr || offset < static_cast<uint32_t>(n) || offset > s->tokens.size() ||
        !std::equal(suffix.begin(), suffix.end(), s->tokens.begin() + (offset - static_cast<uint32_t>(n)))) {
      continue;
    }
    const auto count = static_cast<int32_t>(std::min<size_t>(static_cast<size_t>(max_tokens), s->tokens.size() - offset));
    if (count == 0) continue;
    out.insert(out.end(), s->tokens.begin() + offset, s->tokens.begin() + offset + count);
    return count;
  }
  return 0;
}

void TenantHistoryDrafter::index_stream(Tenant& tenant, const Stream& s) {
  for (int32_t n = kMinNgram; n <= kMaxNgram; ++n) {
    auto& index = tenant.index[static_cast<size_t>(n - kMinNgram)];
    // Every n-gram followed by at least one token: later ones overwrite earlier (latest wins).
    for (size_t end = static_cast<size_t>(n); end < s.tokens.size(); ++end) {
      index[hash(std::span<const TokenId>(s.tokens).subspan(end - static_cast<size_t>(n), static_cast<size_t>(n)))] =
          Place{s.serial, static_cast<uint32_t>(end)};
    }
  }
}

void TenantHistoryDrafter::rebuild(Tenant& tenant) {
  for (auto& index : tenant.index) index.clear();
  for (const Stream& s : tenant.streams) index_stream(tenant, s);
}

void TenantHistoryDrafter::remember(uint64_t ns, uint64_t conversation, std::span<const TokenId> tokens) {
  if (tokens.size() <= static_cast<size_t>(kMinNgram)) return;
  // A stream longer than a tenant's share keeps its end (what follows comes after it).
  if (static_cast<int64_t>(tokens.size()) > limits_.tokens_per_tenant) {
    tokens = tokens.last(static_cast<size_t>(limits_.tokens_per_tenant));
  }
  auto [it, inserted] = tenants_.try_emplace(ns);
  Tenant& tenant = it->second;
  if (inserted) {
    lru_.push_front(ns);
    tenant.lru = lru_.begin();
  } else {
    touch(tenant);
  }
  tenant.streams.push_back(Stream{tenant.next_serial++, conversation, {tokens.begin(), tokens.end()}});
  tenant.tokens += static_cast<int64_t>(tokens.size());
  total_tokens_ += static_cast<int64_t>(tokens.size());
  index_stream(tenant, tenant.streams.back());
  while (tenant.tokens > limits_.tokens_per_tenant) drop_oldest(tenant);
  // Stale places beyond twice what the streams hold are rebuilt away.
  size_t places = 0;
  for (const auto& index : tenant.index) places += index.size();
  if (static_cast<int64_t>(places) > 2 * (kMaxNgram - kMinNgram + 1) * std::max<int64_t>(tenant.tokens, 1024)) rebuild(tenant);
  while (total_tokens_ > limits_.total_tokens && !lru_.empty()) drop_tenant(lru_.back());
}

void TenantHistoryDrafter::forget(uint64_t ns, uint64_t conversation) {
  const auto it = tenants_.find(ns);
  if (it == tenants_.end()) return;
  Tenant& tenant = it->second;
  const auto gone = std::remove_if(tenant.streams.begin(), tenant.streams.end(),
                                   [&](const Stream& s) { return s.conversation == conversation; });
  if (gone == tenant.streams.end()) return;
  for (auto s = gone; s != tenant.streams.end(); ++s) {
    tenant.tokens -= static_cast<int64_t>(s->tokens.size());
    total_tokens_ -= static_cast<int64_t>(s->tokens.size());
  }
  tenant.streams.erase(gone, tenant.streams.end());
  // Its n-grams may have overwritten older places of other streams: rebuilt, they come back.
  rebuild(tenant);
  if (tenant.streams.empty()) drop_tenant(ns);
}

void TenantHistoryDrafter::drop_oldest(Tenant& tenant) {
  const auto n = static_cast<int64_t>(tenant.streams.front().tokens.size());
  tenant.tokens -= n;
  total_tokens_ -= n;
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
