#include "transfer/kv_gate.h"

#include <cstdio>
#include <utility>

namespace mnemo::transfer {
namespace {

const char* name_of(KvGate::Refusal kind) {
  switch (kind) {
    case KvGate::Refusal::kMalformed: return "malformed or damaged";
    case KvGate::Refusal::kUnauthenticated: return "unauthenticated";
    case KvGate::Refusal::kReplayed: return "replayed";
    case KvGate::Refusal::kOversized: return "oversized";
  }
  return "refused";
}

}  // namespace

KvGate::KvGate(std::string secret, KvLimits limits, size_t max_senders, uint32_t replay_window)
    : secret_(std::move(secret)),
      limits_(limits),
      sequences_(max_senders, replay_window),
      log_(kRefusalKinds, kLogInterval) {}

Result<KvHeader> KvGate::admit(std::span<const uint8_t> header, uint64_t body_bytes, uint64_t envelope_transfer_id) {
  if (Status intact = check_header_integrity(header); !intact.ok()) return refuse(Refusal::kMalformed, intact.error());
  if (Status signed_ok = authenticate_header(header, secret_); !signed_ok.ok()) {
    return refuse(Refusal::kUnauthenticated, signed_ok.error());
  }
  auto parsed = parse_header(header);
  if (!parsed.ok()) return refuse(Refusal::kMalformed, parsed.error());
  if (Status sized = check_limits(*parsed, limits_); !sized.ok()) return refuse(Refusal::kOversized, sized.error());
  if (body_bytes != parsed->body_bytes()) {
    return refuse(Refusal::kMalformed,
                  make_error("kv message: {}: {} bytes follow the header, which declares {}",
                             body_bytes < parsed->body_bytes() ? "truncated" : "trailing bytes", body_bytes,
                             parsed->body_bytes()));
  }
  if (parsed->transfer_id != envelope_transfer_id) {
    return refuse(Refusal::kMalformed, make_error("kv message: transfer id {} in the message, {} in its envelope",
                                                  parsed->transfer_id, envelope_transfer_id));
  }
  if (has_secret()) {
    if (Status fresh = sequences_.accept(parsed->seal.sender, parsed->seal.sequence); !fresh.ok()) {
      return refuse(Refusal::kReplayed, fresh.error().with_context("kv message"));
    }
  }
  return parsed;
}

Result<KvMessage> KvGate::open(const KvHeader& header, std::span<const uint8_t> header_bytes,
                               std::span<const uint8_t> body) {
  if (Status intact = check_body(header, body); !intact.ok()) return refuse(Refusal::kMalformed, intact.error());
  if (Status signed_ok = authenticate_body(header_bytes, body, secret_); !signed_ok.ok()) {
    return refuse(Refusal::kUnauthenticated, signed_ok.error());
  }
  auto message = decode_body(header, body);
  if (!message.ok()) return refuse(Refusal::kMalformed, message.error());
  return message;
}

Error KvGate::refuse(Refusal kind, const Error& error) {
  counts_[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  const std::string text = fmt::format("mnemo: kv transport{}{}: refused a transfer ({}): {}", name_.empty() ? "" : " ",
                                       name_, name_of(kind), error.message());
  if (auto line = log_.line(static_cast<size_t>(kind), text, RefusalLog::Clock::now())) {
    std::fprintf(stderr, "%s\n", line->c_str());
  }
  return error;
}

}  // namespace mnemo::transfer
