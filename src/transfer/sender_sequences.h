// Replay protection for signed KV transfers: per sender id, which sequence numbers were accepted.
// A sender numbers its messages 1, 2, 3, ... in the order it sends them; every (sender, sequence)
// is accepted at most once.
//
// Why a window and not "above the highest only": UCX does not promise that one connection's
// active messages arrive in the order they were sent, and they do not always (with several
// send() calls in flight while a connection is being wired up, sequence 4 was seen before 1 and
// 2). So, like IPsec's and DTLS's anti-replay windows, a sequence up to `window` below the highest
// one accepted is still accepted once (a bitmap remembers which); anything older, or seen before,
// is refused. window 0: strictly increasing. Gaps are fine (a message dropped before it was sent,
// or sent to another receiver).
//
// The table is bounded: at most `max_senders` entries, the sender heard from least recently
// forgotten first. Sender ids are random per transport instance, so a receiver that lives through
// many restarts of its peers would otherwise grow without end; a forgotten sender's old messages
// could be accepted once more, which needs more than max_senders live signed senders (members
// holding the cluster secret) in between.
//
// Not thread-safe: the transport's progress thread owns it.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>

#include "util/result.h"

namespace mnemo::transfer {

inline constexpr uint32_t kMaxReplayWindow = 1024;

class SenderSequences {
 public:
  // `window` is capped at kMaxReplayWindow.
  explicit SenderSequences(size_t max_senders = 4096, uint32_t window = kMaxReplayWindow);

  // OK and recorded when `sequence` (> 0) was not accepted from `sender` before and is above,
  // or less than the window below, the highest one accepted from it; otherwise an error naming
  // the numbers, and nothing changes.
  Status accept(uint64_t sender, uint64_t sequence);

  size_t size() const { return senders_.size(); }
  size_t forgotten() const { return forgotten_; }  // senders dropped to stay within the bound

 private:
  struct Entry {
    uint64_t highest = 0;
    std::bitset<kMaxReplayWindow> seen;  // bit i: sequence highest - i was accepted
    std::list<uint64_t>::iterator at;    // in recent_
  };
  size_t max_senders_;
  uint32_t window_;
  std::list<uint64_t> recent_;  // sender ids, the most recently accepted first
  std::unordered_map<uint64_t, Entry> senders_;
  size_t forgotten_ = 0;
};

}  // namespace mnemo::transfer
