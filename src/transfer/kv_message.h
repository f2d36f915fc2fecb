// The wire format of one KV transfer between instances (SPEC M5): a request's chunks, gathered
// into ONE contiguous message, not one small message per layer and per K/V.
//
//   offset  size
//   0       4     magic "MNKV"
//   4       4     version (1)
//   8       8     transfer_id
//   16      8     ns
//   24      8     layout_fingerprint
//   32      4     block_bytes
//   36      4     chunk count n
//   40      8     payload bytes (== n * slice bytes)
//   48      4     n_layers: a chunk's KV splits into this many equal slices (its layers)
//   52      4     layer_begin \  the message carries slices [layer_begin, layer_end) of every
//   56      4     layer_end   /  chunk; whole chunks: 1, 0, 1
//   60      4     reserved (0)
//   64            n chunk records: key 8, parent_key 8, position 4, token count 4, tokens 4 each
//   ...           payload: chunk i's slices at i * slice bytes,
//                 slice bytes = block_bytes / n_layers * (layer_end - layer_begin)
//   end - 8 8     XXH3-64 of every byte before it (header, records and payload)
//
// Layer slices let a prompt's KV leave while the prompt is still computed (SPEC D3): the layers
// [0, i] of a prefill step's chunks are sent while layer i + 1 runs.
//
// All integers little-endian. decode() checks the structure first (so a damaged message gets a
// precise reason), the checksum last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "util/result.h"

namespace mnemo::transfer {

inline constexpr uint32_t kKvMessageVersion = 2;
inline constexpr size_t kMaxChunksPerMessage = size_t{1} << 20;
inline constexpr size_t kMaxTokensPerChunk = 4096;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{16} << 30;  // 16 GiB
inline constexpr uint32_t kMaxLayers = 4096;
// Fixed parts of the encoding (see the table above).
inline constexpr size_t kKvMessageHeaderBytes = 64;
inline constexpr size_t kKvChunkRecordBytes = 24;
inline constexpr size_t kKvChecksumBytes = 8;

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

// Whether `message` is within the format's bounds (chunk count, tokens per chunk, payload size,
// a layer range within n_layers that divide block_bytes) and its payload holds exactly
// chunks.size() * slice_bytes() bytes; the error says which is not.
Status check_encodable(const KvMessage& message);

// The size encode() returns for `message`.
size_t encoded_size(const KvMessage& message);

// Precondition: check_encodable(message) is OK (otherwise the bytes decode to an error).
std::vector<uint8_t> encode(const KvMessage& message);
// The same into `bytes` (cleared first), whose capacity is reused: a staging buffer.
void encode_into(const KvMessage& message, std::vector<uint8_t>& bytes);

// Validates everything (magic, version, the layer range, lengths against the buffer, payload
// size == chunks * slice bytes, checksum) and returns an Error saying what is wrong. Never reads outside `bytes`,
// never throws, allocates at most about the size of `bytes`.
Result<KvMessage> decode(std::span<const uint8_t> bytes);

}  // namespace mnemo::transfer
