// A set of tokens as bits: which tokens a constraint allows next. Bit t of word t / 64; one zero
// word past the end, so that a reader may take any 16 bits at once (bits16) without a bound
// check. 32 KiB for a 262,144-token vocabulary, where a byte per token was 256 KiB to write and
// read at every step of every constrained sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mnemo {

class TokenMask {
 public:
  // Empty over a vocabulary of n tokens.
  void clear(int32_t n_tokens) {
    size_ = n_tokens;
    words_.assign(static_cast<size_t>(n_tokens) / 64 + 2, 0);
  }
  void set(int32_t t) { words_[static_cast<size_t>(t) / 64] |= uint64_t{1} << (static_cast<uint64_t>(t) % 64); }
  bool test(int32_t t) const {
    return t >= 0 && t < size_ && ((words_[static_cast<size_t>(t) / 64] >> (static_cast<uint64_t>(t) % 64)) & 1) != 0;
  }
  int32_t size() const { return size_; }
  int32_t count() const {
    int32_t n = 0;
    for (const uint64_t w : words_) n += __builtin_popcountll(w);
    return n;
  }
  // Every word, the padding included (bits at and past size() are zero).
  std::span<const uint64_t> words() const { return words_; }
  uint64_t* data() { return words_.data(); }

 private:
  std::vector<uint64_t> words_;
  int32_t size_ = 0;
};

// Bits first..first+15 of a TokenMask's words (its padding word makes any first < size() safe).
inline uint32_t mask_bits16(const uint64_t* words, int64_t first) {
  const auto word = static_cast<size_t>(first / 64);
  const auto shift = static_cast<unsigned>(first % 64);
  uint64_t bits = words[word] >> shift;
  if (shift > 48) bits |= words[word + 1] << (64 - shift);
  return static_cast<uint32_t>(bits & 0xffff);
}

}  // namespace mnemo
