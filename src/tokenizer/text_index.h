// Open-addressing hash table from byte strings to int32 values, built once and then read-only
// (safe to share between threads). Keys are views into storage the owner keeps alive. Used for
// token text -> id (262k entries for Gemma: a node-based map costs several times the build time
// and memory) and for BPE merge "left right" -> rank.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace mnemo::tokenizer {

class TextIndex {
 public:
  static constexpr int32_t kNotFound = -1;

  // Indexes keys[i] -> i. On a duplicate key the first index stays; duplicates() lists the later
  // ones so that the owner can decide whether that is an error.
  void build(std::span<const std::string_view> keys);

  int32_t find(std::string_view key) const;
  // Finds the key `left + separator + right` without concatenating.
  int32_t find_joined(std::string_view left, char separator, std::string_view right) const;

  struct Duplicate {
    int32_t first;
    int32_t again;
  };
  const std::vector<Duplicate>& duplicates() const { return duplicates_; }

 private:
  struct Slot {
    uint32_t hash_tag = 0;  // upper hash bits, to skip most key comparisons
    int32_t value = kNotFound;
  };

  template <class Equal>
  int32_t probe(uint64_t hash, Equal&& equal) const;

  std::span<const std::string_view> keys_;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  std::vector<Duplicate> duplicates_;
};

}  // namespace mnemo::tokenizer
