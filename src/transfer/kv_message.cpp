#include "transfer/kv_message.h"

#include <cstring>
#include <iterator>
#include <type_traits>

#include <xxhash.h>

namespace mnemo::transfer {
namespace {

constexpr uint8_t kMagic[4] = {'M', 'N', 'K', 'V'};

// Little-endian appends and loads, independent of the host's byte order.
template <class T>
void put(std::vector<uint8_t>& out, T value) {
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
}

template <class T>
T get(const uint8_t* p) {
  std::make_unsigned_t<T> bits = 0;
  for (size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<std::make_unsigned_t<T>>(p[i]) << (8 * i);
  return static_cast<T>(bits);
}

// Reads fields front to back; every read is checked against the end of the buffer first.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t offset() const { return at_; }
  size_t left() const { return bytes_.size() - at_; }
  template <class T>
  T take() {  // precondition: left() >= sizeof(T)
    const T value = get<T>(bytes_.data() + at_);
    at_ += sizeof(T);
    return value;
  }
  const uint8_t* take_bytes(size_t n) {  // precondition: left() >= n
    const uint8_t* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

// The layer fields' rules, shared by both directions; the error says which one is broken.
Status check_layers(uint32_t block_bytes, uint32_t n_layers, uint32_t layer_begin, uint32_t layer_end) {
  if (n_layers == 0 || n_layers > kMaxLayers) {
    return make_error("{} layers per chunk, outside 1..{}", n_layers, kMaxLayers);
  }
  if (block_bytes % n_layers != 0) {
    return make_error("chunks of {} bytes do not split into {} equal layers", block_bytes, n_layers);
  }
  if (layer_begin >= layer_end || layer_end > n_layers) {
    return make_error("layers [{}, {}) are not a range of the chunk's {}", layer_begin, layer_end, n_layers);
  }
  return ok_status();
}

}  // namespace

Status check_encodable(const KvMessage& message) {
  if (Status layers = check_layers(message.block_bytes, message.n_layers, message.layer_begin, message.layer_end);
      !layers.ok()) {
    return layers;
  }
  if (message.chunks.size() > kMaxChunksPerMessage) {
    return make_error("{} chunks, more than the limit of {}", message.chunks.size(), kMaxChunksPerMessage);
  }
  for (size_t i = 0; i < message.chunks.size(); ++i) {
    if (message.chunks[i].tokens.size() > kMaxTokensPerChunk) {
      return make_error("chunk {} has {} tokens, more than the limit of {}", i, message.chunks[i].tokens.size(),
                        kMaxTokensPerChunk);
    }
  }
  const uint64_t expected = message.slice_bytes() * message.chunks.size();
  if (expected > kMaxPayloadBytes) {
    return make_error("payload of {} bytes, more than the limit of {}", expected, kMaxPayloadBytes);
  }
  if (message.payload.size() != expected) {
    return make_error("payload holds {} bytes, but {} chunks of {} bytes need {}", message.payload.size(),
                      message.chunks.size(), message.slice_bytes(), expected);
  }
  return ok_status();
}

size_t encoded_size(const KvMessage& message) {
  size_t size = kKvMessageHeaderBytes + message.payload.size() + kKvChecksumBytes;
  for (const KvChunkMeta& chunk : message.chunks) size += kKvChunkRecordBytes + 4 * chunk.tokens.size();
  return size;
}

std::vector<uint8_t> encode(const KvMessage& message) {
  std::vector<uint8_t> bytes;
  encode_into(message, bytes);
  return bytes;
}

void encode_into(const KvMessage& message, std::vector<uint8_t>& bytes) {
  bytes.clear();
  bytes.reserve(encoded_size(message));
  bytes.insert(bytes.end(), std::begin(kMagic), std::end(kMagic));
  put<uint32_t>(bytes, kKvMessageVersion);
  put<uint64_t>(bytes, message.transfer_id);
  put<uint64_t>(bytes, message.ns);
  put<uint64_t>(bytes, message.layout_fingerprint);
  put<uint32_t>(bytes, message.block_bytes);
  put<uint32_t>(bytes, static_cast<uint32_t>(message.chunks.size()));
  put<uint64_t>(bytes, message.payload.size());
  put<uint32_t>(bytes, message.n_layers);
  put<uint32_t>(bytes, message.layer_begin);
  put<uint32_t>(bytes, message.layer_end);
  put<uint32_t>(bytes, 0);  // reserved
  for (const KvChunkMeta& chunk : message.chunks) {
    put<uint64_t>(bytes, chunk.key);
    put<uint64_t>(bytes, chunk.parent_key);
    put<int32_t>(bytes, chunk.position);
    put<uint32_t>(bytes, static_cast<uint32_t>(chunk.tokens.size()));
    for (const int32_t token : chunk.tokens) put<int32_t>(bytes, token);
  }
  bytes.insert(bytes.end(), message.payload.begin(), message.payload.end());
  put<uint64_t>(bytes, XXH3_64bits(bytes.data(), bytes.size()));
}

Result<KvMessage> decode(std::span<const uint8_t> bytes) {
  constexpr size_t kMinimum = kKvMessageHeaderBytes + kKvChecksumBytes;
  if (bytes.size() < kMinimum) {
    return make_error("kv message: truncated: {} bytes, a message has at least {}", bytes.size(), kMinimum);
  }
  Reader in(bytes);
  if (std::memcmp(in.take_bytes(sizeof(kMagic)), kMagic, sizeof(kMagic)) != 0) {
    return make_error("kv message: bad magic (not a KV transfer message)");
  }
  const auto version = in.take<uint32_t>();
  if (version != kKvMessageVersion) {
    return make_error("kv message: version {}, this build reads version {}", version, kKvMessageVersion);
  }
  KvMessage message;
  message.transfer_id = in.take<uint64_t>();
  message.ns = in.take<uint64_t>();
  message.layout_fingerprint = in.take<uint64_t>();
  message.block_bytes = in.take<uint32_t>();
  const auto n_chunks = in.take<uint32_t>();
  const auto payload_bytes = in.take<uint64_t>();
  message.n_layers = in.take<uint32_t>();
  message.layer_begin = in.take<uint32_t>();
  message.layer_end = in.take<uint32_t>();
  if (const auto reserved = in.take<uint32_t>(); reserved != 0) {
    return make_error("kv message: reserved header field is {}, not 0", reserved);
  }
  if (Status layers = check_layers(message.block_bytes, message.n_layers, message.layer_begin, message.layer_end);
      !layers.ok()) {
    return make_error("kv message: {}", layers.error().message());
  }
  if (n_chunks > kMaxChunksPerMessage) {
    return make_error("kv message: {} chunks, more than the limit of {}", n_chunks, kMaxChunksPerMessage);
  }
  if (payload_bytes > kMaxPayloadBytes) {
    return make_error("kv message: payload of {} bytes, more than the limit of {}", payload_bytes, kMaxPayloadBytes);
  }
  // n_chunks < 2^20 and slice bytes < 2^32: the product fits in 64 bits.
  if (payload_bytes != message.slice_bytes() * n_chunks) {
    return make_error("kv message: payload size {} is not {} chunks of {} bytes", payload_bytes, n_chunks,
                      message.slice_bytes());
  }
  // Every record takes at least kKvChunkRecordBytes: check that before reserving, so a damaged
  // count cannot make us allocate more than the buffer's size.
  if (uint64_t{n_chunks} * kKvChunkRecordBytes > in.left() - kKvChecksumBytes) {
    return make_error("kv message: truncated: {} chunk records do not fit in {} bytes", n_chunks, bytes.size());
  }
  message.chunks.reserve(n_chunks);
  for (uint32_t i = 0; i < n_chunks; ++i) {
    if (in.left() < kKvChunkRecordBytes + kKvChecksumBytes) {
      return make_error("kv message: truncated in chunk record {} at offset {}", i, in.offset());
    }
    KvChunkMeta chunk;
    chunk.key = in.take<uint64_t>();
    chunk.parent_key = in.take<uint64_t>();
    chunk.position = in.take<int32_t>();
    const auto n_tokens = in.take<uint32_t>();
    if (n_tokens > kMaxTokensPerChunk) {
      return make_error("kv message: chunk {} has {} tokens, more than the limit of {}", i, n_tokens,
                        kMaxTokensPerChunk);
    }
    if (in.left() < size_t{4} * n_tokens + kKvChecksumBytes) {
      return make_error("kv message: truncated in the tokens of chunk {} at offset {}", i, in.offset());
    }
    chunk.tokens.resize(n_tokens);
    for (int32_t& token : chunk.tokens) token = in.take<int32_t>();
    message.chunks.push_back(std::move(chunk));
  }
  const size_t rest = in.left() - kKvChecksumBytes;
  if (rest != payload_bytes) {
    return make_error("kv message: {}: {} bytes where the payload of {} bytes and the checksum belong",
                      rest < payload_bytes ? "truncated" : "trailing bytes", in.left(), payload_bytes);
  }
  const size_t covered = in.offset() + rest;
  const uint64_t expected = get<uint64_t>(bytes.data() + covered);
  if (XXH3_64bits(bytes.data(), covered) != expected) {
    return make_error("kv message: checksum mismatch (damaged in transit)");
  }
  message.payload.assign(bytes.data() + in.offset(), bytes.data() + covered);
  return message;
}

}  // namespace mnemo::transfer
