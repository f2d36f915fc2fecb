#include "transfer/kv_message.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string_view>
#include <type_traits>

#include <xxhash.h>

#include "auth/crypto.h"

namespace mnemo::transfer {
namespace {

constexpr uint8_t kMagic[4] = {'M', 'N', 'K', 'V'};
// Where the header's fields live (see the table in kv_message.h).
constexpr size_t kSenderAt = 8;
constexpr size_t kBodyChecksumAt = 80;
// The fields both MACs cover: all but the checksums (the body's is implied by the body, which
// the message MAC covers) and the MACs themselves.
constexpr size_t kSignedBytes = kBodyChecksumAt;
constexpr size_t kHeaderMacAt = 88;
constexpr size_t kMessageMacAt = 104;
constexpr size_t kHeaderChecksumAt = 120;
static_assert(kHeaderChecksumAt + 8 == kKvMessageHeaderBytes);
// The MACs' domains: a header MAC can never pass as a message MAC, nor either as another
// protocol's MAC under the same cluster secret.
constexpr std::string_view kHeaderMacLabel = "mnemo-kv-header-v3";
constexpr std::string_view kMessageMacLabel = "mnemo-kv-message-v3";

// Little-endian appends and loads, independent of the host's byte order.
template <class T>
void put(std::vector<uint8_t>& out, T value) {
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
}

template <class T>
void store(uint8_t* p, T value) {
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(bits >> (8 * i));
}

template <class T>
T get(const uint8_t* p) {
  std::make_unsigned_t<T> bits = 0;
  for (size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<std::make_unsigned_t<T>>(p[i]) << (8 * i);
  return static_cast<T>(bits);
}

std::string_view chars(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
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

uint64_t record_bytes_of(const KvMessage& message) {
  uint64_t bytes = 0;
  for (const KvChunkMeta& chunk : message.chunks) bytes += kKvChunkRecordBytes + 4 * chunk.tokens.size();
  return bytes;
}

// HMAC-SHA-256 under `secret`, truncated to kKvMacBytes.
std::array<uint8_t, kKvMacBytes> mac(std::string_view secret, std::initializer_list<std::string_view> parts) {
  const auth::Digest full = auth::hmac_sha256(secret, parts);
  std::array<uint8_t, kKvMacBytes> truncated{};
  std::copy_n(full.begin(), kKvMacBytes, truncated.begin());
  return truncated;
}

std::array<uint8_t, kKvMacBytes> header_mac(std::span<const uint8_t> header, std::string_view secret) {
  return mac(secret, {kHeaderMacLabel, chars(header.first(kSignedBytes))});
}

std::array<uint8_t, kKvMacBytes> message_mac(std::span<const uint8_t> header, const KvBodyDigest& digest,
                                             std::string_view secret) {
  return mac(secret, {kMessageMacLabel, chars(header.first(kSignedBytes)), chars(digest)});
}

bool matches(std::span<const uint8_t> field, const std::array<uint8_t, kKvMacBytes>& expected) {
  return auth::constant_time_equal(chars(field), chars(expected));
}

bool all_zero(std::span<const uint8_t> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
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
  if (const uint64_t records = record_bytes_of(message); records > kMaxRecordBytes) {
    return make_error("chunk records of {} bytes, more than the limit of {}", records, kMaxRecordBytes);
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
  return kKvMessageHeaderBytes + record_bytes_of(message) + message.payload.size();
}

std::vector<uint8_t> encode(const KvMessage& message, const KvSeal& seal_with, std::string_view secret) {
  std::vector<uint8_t> bytes;
  encode_into(message, bytes);
  seal(bytes, seal_with, secret, secret.empty() ? KvBodyDigest{} : body_digest(bytes));
  return bytes;
}

void encode_into(const KvMessage& message, std::vector<uint8_t>& bytes) {
  bytes.clear();
  bytes.reserve(encoded_size(message));
  bytes.insert(bytes.end(), std::begin(kMagic), std::end(kMagic));
  put<uint32_t>(bytes, kKvMessageVersion);
  put<uint64_t>(bytes, 0);  // sender: seal()
  put<uint64_t>(bytes, 0);  // sequence: seal()
  put<uint64_t>(bytes, message.transfer_id);
  put<uint64_t>(bytes, message.ns);
  put<uint64_t>(bytes, message.layout_fingerprint);
  put<uint32_t>(bytes, message.block_bytes);
  put<uint32_t>(bytes, static_cast<uint32_t>(message.chunks.size()));
  put<uint64_t>(bytes, message.payload.size());
  put<uint32_t>(bytes, message.n_layers);
  put<uint32_t>(bytes, message.layer_begin);
  put<uint32_t>(bytes, message.layer_end);
  put<uint32_t>(bytes, static_cast<uint32_t>(record_bytes_of(message)));
  bytes.resize(kKvMessageHeaderBytes, 0);  // checksums and MACs follow below
  for (const KvChunkMeta& chunk : message.chunks) {
    put<uint64_t>(bytes, chunk.key);
    put<uint64_t>(bytes, chunk.parent_key);
    put<int32_t>(bytes, chunk.position);
    put<uint32_t>(bytes, static_cast<uint32_t>(chunk.tokens.size()));
    for (const int32_t token : chunk.tokens) put<int32_t>(bytes, token);
  }
  bytes.insert(bytes.end(), message.payload.begin(), message.payload.end());
  update_checksums(bytes);
}

KvBodyDigest body_digest(std::span<const uint8_t> message) {
  return auth::sha256(chars(message.subspan(std::min(message.size(), kKvMessageHeaderBytes))));
}

void seal(std::span<uint8_t> message, const KvSeal& seal_with, std::string_view secret, const KvBodyDigest& digest) {
  uint8_t* header = message.data();
  store<uint64_t>(header + kSenderAt, seal_with.sender);
  store<uint64_t>(header + kSenderAt + 8, seal_with.sequence);
  std::array<uint8_t, kKvMacBytes> header_tag{};
  std::array<uint8_t, kKvMacBytes> message_tag{};
  if (!secret.empty()) {
    header_tag = header_mac(message, secret);
    message_tag = message_mac(message, digest, secret);
  }
  std::copy(header_tag.begin(), header_tag.end(), header + kHeaderMacAt);
  std::copy(message_tag.begin(), message_tag.end(), header + kMessageMacAt);
  store<uint64_t>(header + kHeaderChecksumAt, XXH3_64bits(header, kHeaderChecksumAt));
}

void update_checksums(std::span<uint8_t> message) {
  if (message.size() < kKvMessageHeaderBytes) return;
  uint8_t* header = message.data();
  store<uint64_t>(header + kBodyChecksumAt,
                  XXH3_64bits(header + kKvMessageHeaderBytes, message.size() - kKvMessageHeaderBytes));
  store<uint64_t>(header + kHeaderChecksumAt, XXH3_64bits(header, kHeaderChecksumAt));
}

Status check_header_integrity(std::span<const uint8_t> bytes) {
  if (bytes.size() < kKvMessageHeaderBytes) {
    return make_error("kv message: truncated: {} bytes, a message has at least {}", bytes.size(), kKvMessageHeaderBytes);
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return make_error("kv message: bad magic (not a KV transfer message)");
  }
  if (const auto version = get<uint32_t>(bytes.data() + 4); version != kKvMessageVersion) {
    return make_error("kv message: version {}, this build reads version {}", version, kKvMessageVersion);
  }
  if (XXH3_64bits(bytes.data(), kHeaderChecksumAt) != get<uint64_t>(bytes.data() + kHeaderChecksumAt)) {
    return make_error(ErrorCode::kCorruption, "kv message: header checksum mismatch (damaged in transit)");
  }
  return ok_status();
}

Result<KvHeader> parse_header(std::span<const uint8_t> bytes) {
  MNEMO_RETURN_IF_ERROR(check_header_integrity(bytes));
  Reader in(bytes.first(kKvMessageHeaderBytes));
  in.take<uint32_t>();  // the magic
  in.take<uint32_t>();  // the version
  KvHeader h;
  h.seal.sender = in.take<uint64_t>();
  h.seal.sequence = in.take<uint64_t>();
  h.transfer_id = in.take<uint64_t>();
  h.ns = in.take<uint64_t>();
  h.layout_fingerprint = in.take<uint64_t>();
  h.block_bytes = in.take<uint32_t>();
  h.n_chunks = in.take<uint32_t>();
  h.payload_bytes = in.take<uint64_t>();
  h.n_layers = in.take<uint32_t>();
  h.layer_begin = in.take<uint32_t>();
  h.layer_end = in.take<uint32_t>();
  h.record_bytes = in.take<uint32_t>();
  h.body_checksum = in.take<uint64_t>();
  if (Status layers = check_layers(h.block_bytes, h.n_layers, h.layer_begin, h.layer_end); !layers.ok()) {
    return make_error("kv message: {}", layers.error().message());
  }
  // Slice bytes < 2^32 and n_chunks < 2^32: the product fits in 64 bits.
  const uint64_t slice_bytes = uint64_t{h.block_bytes} / h.n_layers * (h.layer_end - h.layer_begin);
  if (h.payload_bytes != slice_bytes * h.n_chunks) {
    return make_error("kv message: payload size {} is not {} chunks of {} bytes", h.payload_bytes, h.n_chunks,
                      slice_bytes);
  }
  const uint64_t fewest = uint64_t{h.n_chunks} * kKvChunkRecordBytes;
  const uint64_t most = uint64_t{h.n_chunks} * (kKvChunkRecordBytes + 4 * kMaxTokensPerChunk);
  if (h.record_bytes < fewest || h.record_bytes > most || h.record_bytes % 4 != 0) {
    return make_error("kv message: {} bytes cannot hold {} chunk records", h.record_bytes, h.n_chunks);
  }
  return h;
}

Status authenticate_header(std::span<const uint8_t> header, std::string_view secret) {
  // parse_header has seen the whole header; this is a precondition, checked for safety.
  if (header.size() < kKvMessageHeaderBytes) return make_error("kv message: no header to authenticate");
  const auto header_tag = header.subspan(kHeaderMacAt, kKvMacBytes);
  if (secret.empty()) {
    if (!all_zero(header_tag) || !all_zero(header.subspan(kMessageMacAt, kKvMacBytes))) {
      return make_error(ErrorCode::kPermissionDenied, "kv message: signed, but this receiver has no cluster secret to check it (configure the "
                        "same secret on every instance)");
    }
    return ok_status();
  }
  if (!matches(header_tag, header_mac(header, secret))) {
    return make_error(ErrorCode::kPermissionDenied, "kv message: header MAC does not match (unsigned, or signed under another cluster secret)");
  }
  return ok_status();
}

Status check_limits(const KvHeader& h, const KvLimits& limits) {
  // A message without chunks carries no KV, whatever its block_bytes (senders leave it 0 then).
  if (limits.block_bytes != 0 && h.n_chunks > 0 && h.block_bytes != limits.block_bytes) {
    return make_error("kv message: chunks of {} bytes; this receiver's KV layout has chunks of {}", h.block_bytes,
                      limits.block_bytes);
  }
  if (const uint64_t most = std::min<uint64_t>(limits.max_chunks, kMaxChunksPerMessage); h.n_chunks > most) {
    return make_error("kv message: {} chunks, more than the limit of {}", h.n_chunks, most);
  }
  if (h.record_bytes > limits.max_record_bytes) {
    return make_error("kv message: chunk records of {} bytes, more than the limit of {}", h.record_bytes,
                      limits.max_record_bytes);
  }
  if (const uint64_t most = std::min(limits.max_payload_bytes, kMaxPayloadBytes); h.payload_bytes > most) {
    return make_error("kv message: payload of {} bytes, more than the limit of {}", h.payload_bytes, most);
  }
  return ok_status();
}

Status check_body(const KvHeader& h, std::span<const uint8_t> body) {
  if (body.size() != h.body_bytes()) {
    return make_error("kv message: {}: {} bytes after the header, which declares {} (records {}, payload {})",
                      body.size() < h.body_bytes() ? "truncated" : "trailing bytes", body.size(), h.body_bytes(),
                      h.record_bytes, h.payload_bytes);
  }
  if (XXH3_64bits(body.data(), body.size()) != h.body_checksum) {
    return make_error(ErrorCode::kCorruption, "kv message: checksum mismatch (damaged in transit)");
  }
  return ok_status();
}

Status authenticate_body(std::span<const uint8_t> header, std::span<const uint8_t> body, std::string_view secret) {
  if (secret.empty()) return ok_status();
  if (header.size() < kKvMessageHeaderBytes) return make_error("kv message: no header to authenticate");
  const KvBodyDigest digest = auth::sha256(chars(body));
  if (!matches(header.subspan(kMessageMacAt, kKvMacBytes), message_mac(header, digest, secret))) {
    return make_error(ErrorCode::kPermissionDenied, "kv message: message MAC does not match (the records or the payload were changed)");
  }
  return ok_status();
}

Result<KvMessage> decode_body(const KvHeader& h, std::span<const uint8_t> body) {
  if (body.size() != h.body_bytes()) {
    return make_error("kv message: {} bytes after the header, which declares {}", body.size(), h.body_bytes());
  }
  KvMessage message;
  message.transfer_id = h.transfer_id;
  message.ns = h.ns;
  message.layout_fingerprint = h.layout_fingerprint;
  message.block_bytes = h.block_bytes;
  message.n_layers = h.n_layers;
  message.layer_begin = h.layer_begin;
  message.layer_end = h.layer_end;
  // parse_header checked that n records fit in record_bytes, and record_bytes fits in the body.
  Reader in(body.first(h.record_bytes));
  message.chunks.reserve(h.n_chunks);
  for (uint32_t i = 0; i < h.n_chunks; ++i) {
    if (in.left() < kKvChunkRecordBytes) {
      return make_error("kv message: truncated in chunk record {} at offset {}", i, kKvMessageHeaderBytes + in.offset());
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
    if (in.left() < size_t{4} * n_tokens) {
      return make_error("kv message: truncated in the tokens of chunk {} at offset {}", i,
                        kKvMessageHeaderBytes + in.offset());
    }
    chunk.tokens.resize(n_tokens);
    for (int32_t& token : chunk.tokens) token = in.take<int32_t>();
    message.chunks.push_back(std::move(chunk));
  }
  if (in.left() != 0) {
    return make_error("kv message: {} bytes left over after the {} chunk records", in.left(), h.n_chunks);
  }
  const auto payload = body.subspan(h.record_bytes);
  message.payload.assign(payload.begin(), payload.end());
  return message;
}

Result<KvMessage> decode(std::span<const uint8_t> bytes, std::string_view secret, const KvLimits& limits) {
  MNEMO_RETURN_IF_ERROR(check_header_integrity(bytes));
  const auto header_bytes = bytes.first(kKvMessageHeaderBytes);
  const auto body = bytes.subspan(kKvMessageHeaderBytes);
  MNEMO_RETURN_IF_ERROR(authenticate_header(header_bytes, secret));
  MNEMO_ASSIGN_OR_RETURN(const KvHeader header, parse_header(header_bytes));
  MNEMO_RETURN_IF_ERROR(check_limits(header, limits));
  MNEMO_RETURN_IF_ERROR(check_body(header, body));
  MNEMO_RETURN_IF_ERROR(authenticate_body(header_bytes, body, secret));
  return decode_body(header, body);
}

}  // namespace mnemo::transfer
