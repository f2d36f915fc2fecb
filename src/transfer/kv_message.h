// The wire format of one KV transfer between instances (SPEC M5): a request's chunks, gathered
// into ONE contiguous message, not one small message per layer and per K/V.
//
//   offset  size
//   0       4     magic "MNKV"
//   4       4     version (3)
//   8       8     sender: random per sending transport (0 from encode() without a seal)
//   16      8     sequence: per sender, increasing from 1 (replay protection)
//   24      8     transfer_id
//   32      8     ns
//   40      8     layout_fingerprint
//   48      4     block_bytes
//   52      4     chunk count n
//   56      8     payload bytes (== n * slice bytes)
//   64      4     n_layers: a chunk's KV splits into this many equal slices (its layers)
//   68      4     layer_begin \  the message carries slices [layer_begin, layer_end) of every
//   72      4     layer_end   /  chunk; whole chunks: 1, 0, 1
//   76      4     record bytes: the size of the n chunk records
//   80      8     body checksum: XXH3-64 of the records and the payload
//   88      16    header MAC: HMAC-SHA-256(secret, "mnemo-kv-header-v3" | bytes [0, 80)), its first
//                 16 bytes; zero without a secret
//   104     16    message MAC: HMAC-SHA-256(secret, "mnemo-kv-message-v3" | bytes [0, 80) |
//                 SHA-256(records | payload)), its first 16 bytes; zero without a secret
//   120     8     header checksum: XXH3-64 of bytes [0, 120)
//   128           body: n chunk records: key 8, parent_key 8, position 4, token count 4, tokens 4 each
//   ...           then the payload: chunk i's slices at i * slice bytes,
//                 slice bytes = block_bytes / n_layers * (layer_end - layer_begin)
//
// The header is fixed-size and self-contained, so a receiver can verify it (checksum, MAC, sizes
// against its own limits) before it allocates anything the header sizes: the transport carries
// it apart from the body (kv_transport_impl.h). The header MAC proves who sent which sizes; the
// message MAC covers the whole message, the body through its SHA-256 (so a sender computes the
// expensive digest before it knows its sequence number, and seals the header cheaply in send
// order). MACs are HMAC-SHA-256 truncated to 128 bits; checksums find damage, MACs forgery.
//
// Layer slices let a prompt's KV leave while the prompt is still computed (SPEC D3): the layers
// [0, i] of a prefill step's chunks are sent while layer i + 1 runs.
//
// All integers little-endian. Each check says precisely what failed; the checks come in the
// order a receiver can afford them: the header (no allocation), then the body.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::transfer {

inline constexpr uint32_t kKvMessageVersion = 3;
// Bounds of the format itself; a receiver's own KvLimits are usually much tighter.
inline constexpr size_t kMaxChunksPerMessage = size_t{1} << 20;
inline constexpr size_t kMaxTokensPerChunk = 4096;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{16} << 30;  // 16 GiB
inline constexpr uint64_t kMaxRecordBytes = UINT32_MAX;           // the field's width
inline constexpr uint32_t kMaxLayers = 4096;
// Fixed parts of the encoding (see the table above).
inline constexpr size_t kKvMessageHeaderBytes = 128;
inline constexpr size_t kKvChunkRecordBytes = 24;
inline constexpr size_t kKvMacBytes = 16;

struct KvChunkMeta {
  uint64_t key = 0;
  uint64_t parent_key = 0;
  int32_t position = 0;
  std::vector<int32_t> tokens;
  bool operator==(const KvChunkMeta&) const = default;
};

struct KvMessage {
  uint64_t transfer_id = 0;          // chosen by the sender, echoed in the ack
  uint64_t ns = 0;                   // tenant namespace of the chunks
  uint64_t layout_fingerprint = 0;   // model + KV layout; the receiver refuses another
  uint32_t block_bytes = 0;          // bytes of one chunk's KV (all its layers)
  uint32_t n_layers = 1;             // slices [layer_begin, layer_end) of n_layers per chunk
  uint32_t layer_begin = 0;
  uint32_t layer_end = 1;
  std::vector<KvChunkMeta> chunks;   // in order along the prefix
  std::vector<uint8_t> payload;      // chunks.size() * slice_bytes(), chunk i at i * slice_bytes()
  bool operator==(const KvMessage&) const = default;

  // Every layer of its chunks, not a slice of them.
  bool whole() const { return layer_begin == 0 && layer_end == n_layers; }
  // The bytes of one chunk in this message (precondition: the layer fields are valid, as
  // check_encodable and decode ensure).
  uint64_t slice_bytes() const { return uint64_t{block_bytes} / n_layers * (layer_end - layer_begin); }
};

// Who sent a message, and its place among that sender's messages.
struct KvSeal {
  uint64_t sender = 0;
  uint64_t sequence = 0;
};

// The fixed header's fields, read and structurally checked (parse_header).
struct KvHeader {
  KvSeal seal{};
  uint64_t transfer_id = 0;
  uint64_t ns = 0;
  uint64_t layout_fingerprint = 0;
  uint32_t block_bytes = 0;
  uint32_t n_chunks = 0;
  uint64_t payload_bytes = 0;
  uint32_t n_layers = 1;
  uint32_t layer_begin = 0;
  uint32_t layer_end = 1;
  uint32_t record_bytes = 0;
  uint64_t body_checksum = 0;
  // The bytes after the header: records and payload.
  uint64_t body_bytes() const { return uint64_t{record_bytes} + payload_bytes; }
};

// What a receiver accepts: declared sizes beyond these are refused from the header alone, before
// anything is allocated. The body a receiver allocates is at most max_record_bytes +
// max_payload_bytes.
struct KvLimits {
  uint32_t max_chunks = 65536;
  uint32_t max_record_bytes = uint32_t{32} << 20;   // 32 MiB: 65536 records of 120 tokens
  uint64_t max_payload_bytes = uint64_t{256} << 20; // 256 MiB
  uint32_t block_bytes = 0;  // nonzero: the only chunk size accepted (this receiver's KV layout)
                             // in a message with chunks
};

using KvBodyDigest = std::array<uint8_t, 32>;  // SHA-256 of a message's body

// Whether `message` is within the format's bounds (chunk count, tokens per chunk, record and
// payload size, a layer range within n_layers that divide block_bytes) and its payload holds
// exactly chunks.size() * slice_bytes() bytes; the error says which is not.
Status check_encodable(const KvMessage& message);

// The size encode() returns for `message`.
size_t encoded_size(const KvMessage& message);

// Precondition: check_encodable(message) is OK (otherwise the bytes decode to an error). With a
// secret, the message is signed; without, its MACs are zero (the loopback-only insecure mode).
std::vector<uint8_t> encode(const KvMessage& message, const KvSeal& seal = {}, std::string_view secret = {});
// Unsigned, sender and sequence 0, into `bytes` (cleared first), whose capacity is reused (a
// staging buffer); seal() it next.
void encode_into(const KvMessage& message, std::vector<uint8_t>& bytes);

// SHA-256 of an encoded message's body (the bytes after the header). Only signing needs it.
KvBodyDigest body_digest(std::span<const uint8_t> message);
// Writes the sender, the sequence, both MACs under `secret` (zeros when it is empty) and the
// header checksum into an encoded message. `digest`: body_digest(message), read only with a
// secret. Cheap: the header only. Precondition: message.size() >= kKvMessageHeaderBytes.
void seal(std::span<uint8_t> message, const KvSeal& seal, std::string_view secret, const KvBodyDigest& digest);
// Recomputes both checksums (not the MACs) of an encoded message; shorter than a header: left
// alone. For tests and the fuzz target, so that deliberate damage reaches the checks behind them.
void update_checksums(std::span<uint8_t> message);

// ---- receiving, stage by stage (each stage's errors are of one kind) ---------------------------

// The header at the front of `bytes` (at least kKvMessageHeaderBytes): its magic, version and
// checksum. Failure: malformed (not ours, or damaged in transit). Allocates nothing.
Status check_header_integrity(std::span<const uint8_t> bytes);
// The header's MACs (precondition: its integrity was checked): with a secret, the header MAC must
// match; without one, both MACs must be zero (a receiver without a secret cannot check a signed
// message). Failure: unauthenticated. Before the fields are interpreted: a forged header is
// counted as such whatever it declares.
Status authenticate_header(std::span<const uint8_t> header, std::string_view secret);
// The header's integrity again, then its fields: the layer range, payload bytes == chunks *
// slice bytes and record bytes that n records can have. Failure: malformed. Allocates nothing.
Result<KvHeader> parse_header(std::span<const uint8_t> bytes);
// The declared sizes against this receiver's limits. Failure: oversized.
Status check_limits(const KvHeader& header, const KvLimits& limits);
// The body's length and checksum. Failure: malformed (truncated, trailing bytes, damaged).
Status check_body(const KvHeader& header, std::span<const uint8_t> body);
// The message MAC over the header and `body`; nothing to check without a secret (its MAC was
// checked to be zero with the header). Failure: unauthenticated.
Status authenticate_body(std::span<const uint8_t> header, std::span<const uint8_t> body, std::string_view secret);
// The chunk records and the payload of a checked body. Failure: malformed. Allocates at most
// about the size of `body`.
Result<KvMessage> decode_body(const KvHeader& header, std::span<const uint8_t> body);

// All of the above on one buffer, in that order (parse_header after authenticate_header). Never reads outside `bytes`, never throws,
// allocates at most about the size of `bytes`.
Result<KvMessage> decode(std::span<const uint8_t> bytes, std::string_view secret = {}, const KvLimits& limits = {});

}  // namespace mnemo::transfer
