#include "transfer/sender_sequences.h"

#include <algorithm>

namespace mnemo::transfer {

SenderSequences::SenderSequences(size_t max_senders, uint32_t window)
    : max_senders_(std::max<size_t>(max_senders, 1)), window_(std::min(window, kMaxReplayWindow)) {}

Status SenderSequences::accept(uint64_t sender, uint64_t sequence) {
  if (sequence == 0) return make_error("sequence 0 from sender {:016x}: senders count from 1", sender);
  auto it = senders_.find(sender);
  if (it == senders_.end()) {
    if (senders_.size() >= max_senders_) {
      senders_.erase(recent_.back());
      recent_.pop_back();
      ++forgotten_;
    }
    recent_.push_front(sender);
    it = senders_.emplace(sender, Entry{0, {}, recent_.begin()}).first;
  }
  Entry& entry = it->second;
  if (sequence > entry.highest) {
    const uint64_t ahead = sequence - entry.highest;
    entry.seen = ahead >= kMaxReplayWindow ? std::bitset<kMaxReplayWindow>() : entry.seen << ahead;
    entry.seen.set(0);
    entry.highest = sequence;
  } else {
    const uint64_t behind = entry.highest - sequence;
    if (behind >= window_) {
      return make_error(ErrorCode::kPermissionDenied, "sequence {} from sender {:016x}, {} below the highest accepted ({}), beyond the replay "
                        "window of {} (a replay)",
                        sequence, sender, behind, entry.highest, window_);
    }
    if (entry.seen.test(behind)) {
      return make_error(ErrorCode::kPermissionDenied, "sequence {} from sender {:016x} was accepted before (a replay)", sequence, sender);
    }
    entry.seen.set(behind);
  }
  recent_.splice(recent_.begin(), recent_, entry.at);
  return ok_status();
}

}  // namespace mnemo::transfer
