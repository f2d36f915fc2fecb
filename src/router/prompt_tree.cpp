#include "router/prompt_tree.h"

#include <algorithm>

#include <xxhash.h>

#include "util/check.h"

namespace mnemo::router {

PromptTree::PromptTree(size_t chunk_bytes, double ttl_seconds) : chunk_bytes_(chunk_bytes), ttl_seconds_(ttl_seconds) {
  MNEMO_CHECK(chunk_bytes_ > 0, "prompt tree chunk of 0 bytes");
  MNEMO_CHECK(ttl_seconds_ > 0, "prompt tree TTL of {} s", ttl_seconds_);
}

std::vector<uint64_t> PromptTree::chunk_keys(std::string_view text) const {
  std::vector<uint64_t> keys;
  uint64_t key = 0;
  for (size_t at = 0; at + chunk_bytes_ <= text.size(); at += chunk_bytes_) {
    key = XXH3_64bits_withSeed(text.data() + at, chunk_bytes_, key);
    keys.push_back(key);
  }
  return keys;
}

void PromptTree::record(const std::string& instance, std::string_view text, double now) {
  auto& held = entries_[instance];
  for (uint64_t key : chunk_keys(text)) held[key] = now;
}

size_t PromptTree::matched_bytes(const std::string& instance, std::string_view text, double now) const {
  const auto it = entries_.find(instance);
  if (it == entries_.end()) return 0;
  size_t chunks = 0;
  for (uint64_t key : chunk_keys(text)) {
    const auto entry = it->second.find(key);
    if (entry == it->second.end() || now - entry->second > ttl_seconds_) break;
    ++chunks;
  }
  return chunks * chunk_bytes_;
}

void PromptTree::forget_instance(const std::string& instance) { entries_.erase(instance); }

void PromptTree::expire(double now) {
  for (auto& [instance, held] : entries_) {
    std::erase_if(held, [&](const auto& entry) { return now - entry.second > ttl_seconds_; });
  }
  std::erase_if(entries_, [](const auto& entry) { return entry.second.empty(); });
}

size_t PromptTree::size(const std::string& instance) const {
  const auto it = entries_.find(instance);
  return it == entries_.end() ? 0 : it->second.size();
}

std::vector<std::string> PromptTree::instances() const {
  std::vector<std::string> out;
  for (const auto& [instance, held] : entries_) out.push_back(instance);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mnemo::router
