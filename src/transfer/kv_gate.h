// What a receiving KvTransport checks of each incoming message, in the order it can afford the
// checks, and what it counts and logs of the refusals (kv_transport.h's Stats).
//
//  1. admit(): the fixed header, which arrives apart from the body (in UCX's active-message
//     header; for a rendezvous before any body byte has moved): damage
//     (check_header_integrity), the MAC under this receiver's secret (authenticate_header),
//     nonsense (parse_header), the declared sizes against this receiver's limits and layout
//     (check_limits), the body length UCX announces against the declared one, the envelope's
//     transfer id, and with a secret the sender's sequence (SenderSequences). Nothing sized by the header is allocated before this
//     passes; afterwards at most KvLimits::max_record_bytes + max_payload_bytes.
//  2. open(): the received body: its length and checksum (check_body), the message MAC
//     (authenticate_body), then its records (decode_body). Only then does the handler see it.
//
// A sequence is recorded in step 1, once the header's MAC proved the sender chose it: that its
// body is later refused does not make the number usable again (the sender never reuses one).
//
// Without a secret (the loopback-only insecure mode) only unsigned messages pass and sequences
// are not tracked: nothing proves who chose them.
//
// Not thread-safe except refused(): the transport's progress thread owns it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "transfer/kv_message.h"
#include "transfer/refusal_log.h"
#include "transfer/sender_sequences.h"
#include "util/result.h"

namespace mnemo::transfer {

class KvGate {
 public:
  enum class Refusal : size_t { kMalformed, kUnauthenticated, kReplayed, kOversized };
  static constexpr size_t kRefusalKinds = 4;
  static constexpr auto kLogInterval = std::chrono::seconds(60);

  KvGate(std::string secret, KvLimits limits, size_t max_senders, uint32_t replay_window = kMaxReplayWindow);
  void set_name(std::string name) { name_ = std::move(name); }  // who logs: the endpoint

  // `header`: the fixed header as received; `body_bytes`: the length of the body that follows.
  Result<KvHeader> admit(std::span<const uint8_t> header, uint64_t body_bytes, uint64_t envelope_transfer_id);
  // `header_bytes`: the same bytes admit() took.
  Result<KvMessage> open(const KvHeader& header, std::span<const uint8_t> header_bytes, std::span<const uint8_t> body);

  bool has_secret() const { return !secret_.empty(); }
  uint64_t refused(Refusal kind) const { return counts_[static_cast<size_t>(kind)].load(std::memory_order_relaxed); }

 private:
  Error refuse(Refusal kind, const Error& error);

  const std::string secret_;
  const KvLimits limits_;
  SenderSequences sequences_;
  RefusalLog log_;
  std::string name_;
  std::array<std::atomic<uint64_t>, kRefusalKinds> counts_{};
};

}  // namespace mnemo::transfer
