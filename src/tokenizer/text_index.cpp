#include "tokenizer/text_index.h"

#include <algorithm>
#include <bit>

namespace mnemo::tokenizer {
namespace {

// FNV-1a, fed incrementally so that a joined key hashes like its concatenation.
constexpr uint64_t kFnvOffset = 14695981039346656037ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

uint64_t hash_bytes(uint64_t hash, std::string_view bytes) {
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= kFnvPrime;
  }
  return hash;
}

// FNV's low bits mix poorly for short keys; fold the high half in before masking.
uint64_t finish(uint64_t hash) { return hash ^ (hash >> 29) ^ (hash >> 41); }

uint32_t tag_of(uint64_t hash) { return static_cast<uint32_t>(hash >> 32); }

}  // namespace

template <class Equal>
int32_t TextIndex::probe(uint64_t hash, Equal&& equal) const {
  if (slots_.empty()) return kNotFound;
  const uint32_t tag = tag_of(hash);
  for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.value == kNotFound) return kNotFound;
    if (slot.hash_tag == tag && equal(keys_[static_cast<size_t>(slot.value)])) return slot.value;
  }
}

void TextIndex::build(std::span<const std::string_view> keys) {
  keys_ = keys;
  duplicates_.clear();
  const uint64_t capacity = std::bit_ceil(std::max<uint64_t>(16, keys.size() * 2));
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (size_t index = 0; index < keys.size(); ++index) {
    const std::string_view key = keys[index];
    const uint64_t hash = finish(hash_bytes(kFnvOffset, key));
    const uint32_t tag = tag_of(hash);
    for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.value == kNotFound) {
        slot = Slot{tag, static_cast<int32_t>(index)};
        break;
      }
      if (slot.hash_tag == tag && keys_[static_cast<size_t>(slot.value)] == key) {
        duplicates_.push_back({slot.value, static_cast<int32_t>(index)});
        break;
      }
    }
  }
}

int32_t TextIndex::find(std::string_view key) const {
  return probe(finish(hash_bytes(kFnvOffset, key)), [&](std::string_view candidate) { return candidate == key; });
}

int32_t TextIndex::find_joined(std::string_view left, char separator, std::string_view right) const {
  uint64_t hash = hash_bytes(kFnvOffset, left);
  hash = hash_bytes(hash, std::string_view(&separator, 1));
  hash = finish(hash_bytes(hash, right));
  return probe(hash, [&](std::string_view candidate) {
    return candidate.size() == left.size() + 1 + right.size() && candidate[left.size()] == separator &&
           candidate.substr(0, left.size()) == left && candidate.substr(left.size() + 1) == right;
  });
}

}  // namespace mnemo::tokenizer
