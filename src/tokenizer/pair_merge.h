// The merge loop shared by SentencePiece and BPE: split text into UTF-8 characters, then keep
// merging the adjacent pair with the best priority (ties: the leftmost pair) until no adjacent
// pair has one. SentencePiece ranks a pair by the score of the token it forms, BPE by the rank of
// the merge rule. A priority queue of candidate pairs makes this O(n log n); entries made stale
// by an earlier merge are recognised by their length and skipped.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/utf8.h"

namespace mnemo::tokenizer {

// Reusable between calls (its buffers stay allocated); not thread-safe, make one per encode.
template <class Priority>
class PairMerger {
 public:
  // `pair_priority(left, right)` returns std::optional<Priority>; larger is better. Appends the
  // final symbols of `text` to `out` in text order; they partition `text`.
  template <class PairPriority>
  void merge(std::string_view text, PairPriority&& pair_priority, std::vector<std::string_view>& out) {
    symbols_.clear();
    for (size_t offset = 0; offset < text.size();) {
      const size_t length = std::min(utf8_sequence_length(text[offset]), text.size() - offset);
      const auto index = static_cast<std::ptrdiff_t>(symbols_.size());
      symbols_.push_back(Symbol{index - 1, offset + length == text.size() ? -1 : index + 1, offset, length});
      offset += length;
    }
    // Indices are 32-bit; a text beyond 4 GiB stays unmerged characters rather than overflow.
    if (text.size() <= std::numeric_limits<uint32_t>::max()) run(text, pair_priority);
    for (std::ptrdiff_t i = symbols_.empty() ? -1 : 0; i >= 0; i = symbols_[static_cast<size_t>(i)].next) {
      const Symbol& symbol = symbols_[static_cast<size_t>(i)];
      out.push_back(text.substr(symbol.begin, symbol.length));
    }
  }

 private:
  struct Symbol {
    std::ptrdiff_t prev;
    std::ptrdiff_t next;
    size_t begin;
    size_t length;  // 0 once merged into its left neighbour
  };
  // Kept small: for long texts the queue is megabytes, and sifting it is bound by cache misses.
  // The right symbol is the left one's `next`: had either changed since, their total length
  // would differ from `length`.
  struct Candidate {
    Priority priority;
    uint32_t left;
    uint32_t length;
  };
  static bool worse(const Candidate& a, const Candidate& b) {
    return a.priority < b.priority || (!(b.priority < a.priority) && a.left > b.left);
  }

  template <class PairPriority>
  void run(std::string_view text, PairPriority& pair_priority) {
    heap_.clear();
    auto consider = [&](std::ptrdiff_t left, std::ptrdiff_t right) {
      if (left < 0 || right < 0) return;
      const Symbol& l = symbols_[static_cast<size_t>(left)];
      const Symbol& r = symbols_[static_cast<size_t>(right)];
      const std::optional<Priority> priority =
          pair_priority(text.substr(l.begin, l.length), text.substr(r.begin, r.length));
      if (!priority) return;
      heap_.push_back(Candidate{*priority, static_cast<uint32_t>(left), static_cast<uint32_t>(l.length + r.length)});
      std::push_heap(heap_.begin(), heap_.end(), worse);
    };
    for (size_t i = 1; i < symbols_.size(); ++i) {
      consider(static_cast<std::ptrdiff_t>(i - 1), static_cast<std::ptrdiff_t>(i));
    }
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), worse);
      const Candidate best = heap_.back();
      heap_.pop_back();
      Symbol& left = symbols_[best.left];
      if (left.length == 0 || left.next < 0) continue;
      Symbol& right = symbols_[static_cast<size_t>(left.next)];
      if (left.length + right.length != best.length) continue;
      const auto left_index = static_cast<std::ptrdiff_t>(best.left);
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[static_cast<size_t>(right.next)].prev = left_index;
      consider(left.prev, left_index);
      consider(left_index, left.next);
    }
  }

  std::vector<Symbol> symbols_;
  std::vector<Candidate> heap_;
};

}  // namespace mnemo::tokenizer
