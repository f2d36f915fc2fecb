// Signed KV transfer messages, stage by stage: what a receiver with (or without) a cluster secret
// refuses, and from which bytes; then the receiving gate that runs the checks in order and counts
// the refusals. The same over UCX is in kv_transport_test.cpp; the replay table and the refusal
// log alone in sender_sequences_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transfer/kv_gate.h"
#include "transfer/kv_message.h"

namespace mnemo::transfer {
namespace {

const std::string kSecretA(32, 'a');
const std::string kSecretB(32, 'b');
constexpr KvSeal kSeal{0x0123456789abcdefULL, 7};

// Offsets from the table in kv_message.h.
constexpr size_t kNsAt = 32;
constexpr size_t kPayloadBytesAt = 56;
constexpr size_t kBlockBytesAt = 48;
constexpr size_t kChunksAt = 52;
constexpr size_t kRecordBytesAt = 76;
constexpr size_t kBodyChecksumAt = 80;
constexpr size_t kHeaderChecksumAt = 120;

KvMessage sample_message(size_t n_chunks = 3, uint32_t block_bytes = 64) {
  KvMessage m;
  m.transfer_id = 99;
  m.ns = 5;
  m.layout_fingerprint = 0x1234;
  m.block_bytes = block_bytes;
  for (size_t i = 0; i < n_chunks; ++i) {
    KvChunkMeta c;
    c.key = 1000 + i;
    c.parent_key = i == 0 ? 0 : 999 + i;
    c.position = static_cast<int32_t>(4 * i);
    c.tokens = {1, 2, 3, static_cast<int32_t>(i)};
    m.chunks.push_back(std::move(c));
  }
  m.payload.resize(n_chunks * block_bytes);
  for (size_t i = 0; i < m.payload.size(); ++i) m.payload[i] = static_cast<uint8_t>(i * 7 + 1);
  return m;
}

template <class T>
void poke(std::vector<uint8_t>& bytes, size_t at, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) bytes[at + i] = static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i));
}

template <class T>
std::string error_of(const Result<T>& r) {
  return r.ok() ? std::string("<ok>") : r.error().message();
}
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::span<const uint8_t> header_of(const std::vector<uint8_t>& bytes) {
  return std::span<const uint8_t>(bytes).first(kKvMessageHeaderBytes);
}
std::span<const uint8_t> body_of(const std::vector<uint8_t>& bytes) {
  return std::span<const uint8_t>(bytes).subspan(kKvMessageHeaderBytes);
}

// ---- the format -----------------------------------------------------------------------------

TEST(KvMessageAuth, SignedRoundTripWithMatchingSecrets) {
  const KvMessage m = sample_message();
  const std::vector<uint8_t> bytes = encode(m, kSeal, kSecretA);
  EXPECT_EQ(bytes.size(), encoded_size(m));
  auto back = decode(bytes, kSecretA);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, m);
  auto header = parse_header(bytes);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->seal.sender, kSeal.sender);
  EXPECT_EQ(header->seal.sequence, kSeal.sequence);
  // Signing is encode_into + body_digest + seal, which is what the transport does in two steps.
  std::vector<uint8_t> staged;
  encode_into(m, staged);
  seal(staged, kSeal, kSecretA, body_digest(staged));
  EXPECT_EQ(staged, bytes);
}

TEST(KvMessageAuth, UnsignedMessagesCarryTheFieldsAndZeroMacs) {
  const std::vector<uint8_t> bytes = encode(sample_message(), kSeal);
  for (size_t i = 88; i < 120; ++i) ASSERT_EQ(bytes[i], 0) << "MAC byte " << i;
  auto header = parse_header(bytes);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->seal.sequence, kSeal.sequence);
  EXPECT_TRUE(decode(bytes).ok());  // a receiver without a secret takes it
}

TEST(KvMessageAuth, SignedUnderSecretAIsRefusedUnderSecretB) {
  const std::vector<uint8_t> bytes = encode(sample_message(), kSeal, kSecretA);
  EXPECT_TRUE(contains(error_of(decode(bytes, kSecretB)), "header MAC does not match")) << error_of(decode(bytes, kSecretB));
  EXPECT_FALSE(authenticate_header(header_of(bytes), kSecretB).ok());
}

TEST(KvMessageAuth, UnsignedMessageIsRefusedByAReceiverWithASecret) {
  const std::vector<uint8_t> bytes = encode(sample_message(), kSeal);
  EXPECT_TRUE(contains(error_of(decode(bytes, kSecretA)), "header MAC does not match"));
}

TEST(KvMessageAuth, SignedMessageIsRefusedByAReceiverWithoutASecret) {
  const std::vector<uint8_t> bytes = encode(sample_message(), kSeal, kSecretA);
  EXPECT_TRUE(contains(error_of(decode(bytes)), "no cluster secret")) << error_of(decode(bytes));
}

// An attacker rewrites a header field and the checksums (which anyone can compute): the header
// MAC refuses it, from the header's bytes alone.
TEST(KvMessageAuth, ChangedHeaderFieldFailsTheHeaderMac) {
  std::vector<uint8_t> bytes = encode(sample_message(), kSeal, kSecretA);
  bytes[kNsAt] ^= 1;  // another tenant's namespace
  update_checksums(bytes);
  ASSERT_TRUE(parse_header(header_of(bytes)).ok());
  EXPECT_TRUE(contains(error_of(authenticate_header(header_of(bytes), kSecretA)), "header MAC"));
  // The sequence is covered too: a replay cannot be renumbered.
  bytes = encode(sample_message(), kSeal, kSecretA);
  poke<uint64_t>(bytes, 16, kSeal.sequence + 1);
  update_checksums(bytes);
  EXPECT_FALSE(authenticate_header(header_of(bytes), kSecretA).ok());
}

TEST(KvMessageAuth, ChangedPayloadByteFailsTheMessageMac) {
  std::vector<uint8_t> bytes = encode(sample_message(), kSeal, kSecretA);
  bytes.back() ^= 0x40;
  update_checksums(bytes);
  auto header = parse_header(bytes);
  ASSERT_TRUE(header.ok());
  // The header still passes (its fields are unchanged); the body does not.
  EXPECT_TRUE(authenticate_header(header_of(bytes), kSecretA).ok());
  EXPECT_TRUE(check_body(*header, body_of(bytes)).ok());
  EXPECT_TRUE(contains(error_of(authenticate_body(header_of(bytes), body_of(bytes), kSecretA)), "message MAC"));
  EXPECT_TRUE(contains(error_of(decode(bytes, kSecretA)), "message MAC"));
}

// No single changed bit of a signed message gets through, whether or not the checksums are
// repaired after it (the checksums themselves excepted there: repairing restores them).
TEST(KvMessageAuth, EverySingleBitFlipOfASignedMessageIsRefused) {
  const std::vector<uint8_t> good = encode(sample_message(2, 8), kSeal, kSecretA);
  const auto is_checksum = [](size_t at) {
    return (at >= kBodyChecksumAt && at < kBodyChecksumAt + 8) || (at >= kHeaderChecksumAt && at < kKvMessageHeaderBytes);
  };
  for (size_t at = 0; at < good.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bytes = good;
      bytes[at] ^= static_cast<uint8_t>(1 << bit);
      ASSERT_FALSE(decode(bytes, kSecretA).ok()) << "byte " << at << " bit " << bit;
      if (is_checksum(at)) continue;
      update_checksums(bytes);
      ASSERT_FALSE(decode(bytes, kSecretA).ok()) << "byte " << at << " bit " << bit << ", checksums repaired";
    }
  }
}

// A signed header that declares more than the receiver takes is refused from the header alone:
// no body needs to exist (the transport has allocated nothing yet).
TEST(KvMessageAuth, DeclaredSizesBeyondTheLimitsAreRefusedFromTheHeaderAlone) {
  std::vector<uint8_t> bytes = encode(sample_message(), kSeal);
  bytes.resize(kKvMessageHeaderBytes);  // the header only
  // 2^20 chunks of 32 KiB: 32 GiB of payload.
  poke<uint32_t>(bytes, kBlockBytesAt, 32768);
  poke<uint32_t>(bytes, kChunksAt, 1u << 20);
  poke<uint64_t>(bytes, kPayloadBytesAt, uint64_t{32768} << 20);
  poke<uint32_t>(bytes, kRecordBytesAt, 40u << 20);
  seal(bytes, kSeal, kSecretA, KvBodyDigest{});
  auto header = parse_header(bytes);
  ASSERT_TRUE(header.ok()) << header.error().message();
  EXPECT_TRUE(authenticate_header(bytes, kSecretA).ok());
  EXPECT_TRUE(contains(error_of(check_limits(*header, KvLimits{})), "limit")) << error_of(check_limits(*header, KvLimits{}));
  KvLimits roomy{.max_chunks = 1u << 20, .max_record_bytes = 64u << 20, .max_payload_bytes = uint64_t{64} << 30};
  EXPECT_TRUE(contains(error_of(check_limits(*header, roomy)), "payload of"));  // still the format's 16 GiB
  KvLimits layout{.block_bytes = 4096};
  EXPECT_TRUE(contains(error_of(check_limits(*header, layout)), "KV layout has chunks of 4096"));
}

TEST(KvMessageAuth, EachLimitIsChecked) {
  const KvMessage m = sample_message(3, 64);
  auto header = parse_header(encode(m));
  ASSERT_TRUE(header.ok());
  EXPECT_TRUE(check_limits(*header, KvLimits{}).ok());
  EXPECT_TRUE(check_limits(*header, KvLimits{.block_bytes = 64}).ok());
  EXPECT_FALSE(check_limits(*header, KvLimits{.block_bytes = 128}).ok());
  EXPECT_FALSE(check_limits(*header, KvLimits{.max_chunks = 2}).ok());
  EXPECT_FALSE(check_limits(*header, KvLimits{.max_record_bytes = 100}).ok());
  EXPECT_FALSE(check_limits(*header, KvLimits{.max_payload_bytes = 191}).ok());
  EXPECT_TRUE(check_limits(*header, KvLimits{.max_payload_bytes = 192}).ok());
  // No chunks, no KV: the layout's chunk size does not apply.
  auto empty = parse_header(encode(KvMessage{}));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(check_limits(*empty, KvLimits{.block_bytes = 128}).ok());
}

// ---- the receiving gate ---------------------------------------------------------------------

struct Received {
  std::vector<uint8_t> bytes;
  std::span<const uint8_t> header() const { return header_of(bytes); }
  std::span<const uint8_t> body() const { return body_of(bytes); }
};

TEST(KvGate, AdmitsThenOpensASignedMessage) {
  KvGate gate(kSecretA, KvLimits{.block_bytes = 64}, 16);
  const KvMessage m = sample_message();
  const Received in{encode(m, kSeal, kSecretA)};
  auto header = gate.admit(in.header(), in.body().size(), m.transfer_id);
  ASSERT_TRUE(header.ok()) << header.error().message();
  auto opened = gate.open(*header, in.header(), in.body());
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EXPECT_EQ(*opened, m);
}

TEST(KvGate, RefusesBeforeTheBodyAndCountsEachKind) {
  KvGate gate(kSecretA, KvLimits{.max_payload_bytes = 1024, .block_bytes = 64}, 16);
  using R = KvGate::Refusal;
  const KvMessage m = sample_message();
  // Another secret, no secret, a changed header field: unauthenticated.
  for (const Received& in : {Received{encode(m, kSeal, kSecretB)}, Received{encode(m, kSeal)}}) {
    EXPECT_FALSE(gate.admit(in.header(), in.body().size(), m.transfer_id).ok());
  }
  Received forged{encode(m, kSeal, kSecretA)};
  forged.bytes[kNsAt] ^= 1;
  update_checksums(forged.bytes);
  EXPECT_FALSE(gate.admit(forged.header(), forged.body().size(), m.transfer_id).ok());
  EXPECT_EQ(gate.refused(R::kUnauthenticated), 3u);
  // Signed, but beyond the limits or of another layout: oversized.
  const Received big{encode(sample_message(17, 64), {kSeal.sender, 1}, kSecretA)};
  EXPECT_TRUE(contains(error_of(gate.admit(big.header(), big.body().size(), m.transfer_id)),
                       "more than the limit of 1024"));
  const Received other_layout{encode(sample_message(3, 128), {kSeal.sender, 2}, kSecretA)};
  EXPECT_FALSE(gate.admit(other_layout.header(), other_layout.body().size(), m.transfer_id).ok());
  EXPECT_EQ(gate.refused(R::kOversized), 2u);
  // A body length other than the declared one, or another envelope: malformed.
  const Received good{encode(m, kSeal, kSecretA)};
  EXPECT_FALSE(gate.admit(good.header(), good.body().size() + 1, m.transfer_id).ok());
  EXPECT_FALSE(gate.admit(good.header(), good.body().size(), m.transfer_id + 1).ok());
  EXPECT_EQ(gate.refused(R::kMalformed), 2u);
  // The refusals above recorded no sequence: the good message is admitted once, then replayed.
  auto header = gate.admit(good.header(), good.body().size(), m.transfer_id);
  ASSERT_TRUE(header.ok()) << header.error().message();
  EXPECT_TRUE(contains(error_of(gate.admit(good.header(), good.body().size(), m.transfer_id)), "replay"));
  EXPECT_EQ(gate.refused(R::kReplayed), 1u);
  // A body changed with the checksums repaired: its header's fields are as signed, so it is
  // admitted; the message MAC refuses the body.
  Received changed{encode(m, {kSeal.sender, 8}, kSecretA)};
  changed.bytes.back() ^= 1;
  update_checksums(changed.bytes);
  auto changed_header = gate.admit(changed.header(), changed.body().size(), m.transfer_id);
  ASSERT_TRUE(changed_header.ok()) << changed_header.error().message();
  EXPECT_TRUE(contains(error_of(gate.open(*changed_header, changed.header(), changed.body())), "message MAC"));
  EXPECT_EQ(gate.refused(R::kUnauthenticated), 4u);
  EXPECT_TRUE(gate.open(*header, good.header(), good.body()).ok());
}

TEST(KvGate, WithoutASecretTakesUnsignedMessagesOnly) {
  KvGate gate("", KvLimits{}, 16);
  const KvMessage m = sample_message();
  const Received unsigned_message{encode(m, kSeal)};
  auto header = gate.admit(unsigned_message.header(), unsigned_message.body().size(), m.transfer_id);
  ASSERT_TRUE(header.ok()) << header.error().message();
  // Sequences are not tracked without a secret (nothing proves who chose them).
  EXPECT_TRUE(gate.admit(unsigned_message.header(), unsigned_message.body().size(), m.transfer_id).ok());
  const Received signed_message{encode(m, kSeal, kSecretA)};
  EXPECT_FALSE(gate.admit(signed_message.header(), signed_message.body().size(), m.transfer_id).ok());
  EXPECT_EQ(gate.refused(KvGate::Refusal::kUnauthenticated), 1u);
}

}  // namespace
}  // namespace mnemo::transfer
