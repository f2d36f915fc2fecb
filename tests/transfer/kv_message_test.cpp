// The KV transfer wire format: round trips, and decode() refusing every kind of damage with a
// reason (never crashing, never reading outside the buffer: run under ASan, see CMakePresets).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <xxhash.h>

#include "transfer/kv_message.h"

namespace mnemo::transfer {
namespace {

KvMessage sample_message(size_t n_chunks, uint32_t block_bytes, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  KvMessage m;
  m.transfer_id = 0x1122334455667788ULL + seed;
  m.ns = 42;
  m.layout_fingerprint = 0xfeedface12345678ULL;
  m.block_bytes = block_bytes;
  uint64_t parent = 0;
  for (size_t i = 0; i < n_chunks; ++i) {
    KvChunkMeta c;
    c.key = rng() | (uint64_t{rng()} << 32);
    c.parent_key = parent;
    c.position = static_cast<int32_t>(i * 4);
    for (int t = 0; t < 4; ++t) c.tokens.push_back(static_cast<int32_t>(rng() % 150000));
    parent = c.key;
    m.chunks.push_back(std::move(c));
  }
  m.payload.resize(n_chunks * block_bytes);
  for (auto& b : m.payload) b = static_cast<uint8_t>(rng());
  return m;
}

std::string decode_error(std::span<const uint8_t> bytes) {
  auto r = decode(bytes);
  return r.ok() ? std::string("<decoded>") : r.error().message();
}

// Rewrites the trailing checksum so that a deliberate change reaches the structural checks.
void fix_checksum(std::vector<uint8_t>& bytes) {
  const uint64_t h = XXH3_64bits(bytes.data(), bytes.size() - kKvChecksumBytes);
  for (size_t i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<uint8_t>(h >> (8 * i));
}

template <class T>
void poke(std::vector<uint8_t>& bytes, size_t at, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) bytes[at + i] = static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i));
}

TEST(KvMessage, RoundTrip) {
  const KvMessage m = sample_message(3, 64);
  const std::vector<uint8_t> bytes = encode(m);
  EXPECT_EQ(bytes.size(), encoded_size(m));
  auto back = decode(bytes);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, m);
}

TEST(KvMessage, EncodeIntoReusesTheBufferAndEqualsEncode) {
  const KvMessage big = sample_message(3, 512, 5);
  const KvMessage small = sample_message(1, 64, 6);
  std::vector<uint8_t> bytes;
  encode_into(big, bytes);
  EXPECT_EQ(bytes, encode(big));
  const uint8_t* storage = bytes.data();
  encode_into(small, bytes);  // replaces the contents, keeps the storage
  EXPECT_EQ(bytes, encode(small));
  EXPECT_EQ(bytes.data(), storage);
  const auto decoded = decode(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  EXPECT_EQ(*decoded, small);
}

TEST(KvMessage, RoundTripEmptyAndExtremes) {
  KvMessage empty;
  auto back = decode(encode(empty));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, empty);
  EXPECT_EQ(encode(empty).size(), kKvMessageHeaderBytes + kKvChecksumBytes);

  KvMessage no_payload = sample_message(2, 0);  // metadata only
  back = decode(encode(no_payload));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, no_payload);

  KvMessage big = sample_message(2, 16);
  big.transfer_id = ~uint64_t{0};
  big.ns = ~uint64_t{0};
  big.chunks[0].tokens.assign(kMaxTokensPerChunk, -1);
  big.chunks[0].tokens[7] = INT32_MIN;
  big.chunks[1].position = INT32_MIN;
  big.chunks[1].tokens.clear();
  ASSERT_TRUE(check_encodable(big).ok());
  back = decode(encode(big));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, big);
}

// A slice of every chunk's layers (SPEC D3): the payload holds only those layers' bytes.
TEST(KvMessage, LayerSlicesRoundTrip) {
  KvMessage whole = sample_message(3, 96);
  KvMessage slice = whole;
  slice.n_layers = 6;
  slice.layer_begin = 2;
  slice.layer_end = 4;
  EXPECT_FALSE(slice.whole());
  EXPECT_EQ(slice.slice_bytes(), 32u);
  ASSERT_FALSE(check_encodable(slice).ok());  // still the whole chunks' payload
  slice.payload.resize(3 * 32);
  ASSERT_TRUE(check_encodable(slice).ok()) << check_encodable(slice).error().message();
  const std::vector<uint8_t> bytes = encode(slice);
  EXPECT_EQ(bytes.size(), encoded_size(slice));
  auto back = decode(bytes);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, slice);
  EXPECT_TRUE(whole.whole());
  EXPECT_EQ(whole.slice_bytes(), 96u);
}

TEST(KvMessage, CheckEncodableNamesTheProblem) {
  KvMessage m = sample_message(2, 8);
  EXPECT_TRUE(check_encodable(m).ok());
  m.chunks[1].tokens.assign(kMaxTokensPerChunk + 1, 0);
  ASSERT_FALSE(check_encodable(m).ok());
  EXPECT_NE(check_encodable(m).error().message().find("tokens"), std::string::npos);
  m = sample_message(2, 8);
  m.payload.pop_back();
  ASSERT_FALSE(check_encodable(m).ok());
  EXPECT_NE(check_encodable(m).error().message().find("payload"), std::string::npos);
  m = sample_message(2, 8);
  m.n_layers = 3;  // 8 bytes do not split into 3 layers
  m.layer_end = 3;
  ASSERT_FALSE(check_encodable(m).ok());
  EXPECT_NE(check_encodable(m).error().message().find("equal layers"), std::string::npos);
  m.n_layers = 4;
  m.layer_begin = 4;
  m.layer_end = 4;
  ASSERT_FALSE(check_encodable(m).ok());
  EXPECT_NE(check_encodable(m).error().message().find("range"), std::string::npos);
}

struct Damage {
  const char* name;
  void (*apply)(std::vector<uint8_t>&);
  const char* expected;  // a word of the error message
};

TEST(KvMessage, DecodeRejectsEveryKindOfDamage) {
  const std::vector<uint8_t> good = encode(sample_message(3, 16));
  // Offsets from the table in kv_message.h.
  const Damage table[] = {
      {"wrong magic", [](auto& b) { b[0] = 'X'; }, "magic"},
      {"wrong version", [](auto& b) { poke<uint32_t>(b, 4, 1); fix_checksum(b); }, "version"},
      {"payload size field off by one", [](auto& b) { poke<uint64_t>(b, 40, 47); fix_checksum(b); }, "payload size"},
      {"block_bytes disagrees", [](auto& b) { poke<uint32_t>(b, 32, 8); fix_checksum(b); }, "payload size"},
      {"too many chunks", [](auto& b) { poke<uint32_t>(b, 36, (1u << 20) + 1); fix_checksum(b); }, "limit"},
      {"chunk count beyond the buffer", [](auto& b) { poke<uint32_t>(b, 36, 1000); poke<uint64_t>(b, 40, 16000); fix_checksum(b); }, "truncated"},
      {"payload beyond 16 GiB", [](auto& b) { poke<uint64_t>(b, 40, (uint64_t{16} << 30) + 1); fix_checksum(b); }, "limit"},
      {"no layers", [](auto& b) { poke<uint32_t>(b, 48, 0); fix_checksum(b); }, "layers"},
      {"layers that do not divide the chunk", [](auto& b) { poke<uint32_t>(b, 48, 3); poke<uint32_t>(b, 56, 3); fix_checksum(b); }, "equal layers"},
      {"an empty layer range", [](auto& b) { poke<uint32_t>(b, 52, 1); fix_checksum(b); }, "range"},
      {"a layer range past the chunk's layers", [](auto& b) { poke<uint32_t>(b, 56, 2); fix_checksum(b); }, "range"},
      {"reserved field set", [](auto& b) { poke<uint32_t>(b, 60, 1); fix_checksum(b); }, "reserved"},
      {"a slice size the payload disagrees with", [](auto& b) { poke<uint32_t>(b, 48, 2); poke<uint32_t>(b, 56, 2); poke<uint32_t>(b, 52, 1); fix_checksum(b); }, "payload size"},
      {"too many tokens", [](auto& b) { poke<uint32_t>(b, 64 + 20, 4097); fix_checksum(b); }, "tokens"},
      {"token count beyond the buffer", [](auto& b) { poke<uint32_t>(b, 64 + 20, 4000); fix_checksum(b); }, "truncated"},
      {"payload short by one byte", [](auto& b) { b.erase(b.end() - 9); fix_checksum(b); }, "truncated"},
      {"one trailing byte", [](auto& b) { b.insert(b.end() - 8, 0); fix_checksum(b); }, "trailing"},
      {"payload byte flipped", [](auto& b) { b[b.size() - 9] ^= 1; }, "checksum"},
      {"checksum byte flipped", [](auto& b) { b.back() ^= 0x80; }, "checksum"},
      {"chunk key flipped", [](auto& b) { b[64] ^= 4; }, "checksum"},
      {"transfer id flipped", [](auto& b) { b[8] ^= 1; }, "checksum"},
  };
  for (const Damage& d : table) {
    std::vector<uint8_t> bytes = good;
    d.apply(bytes);
    const std::string error = decode_error(bytes);
    EXPECT_NE(error.find(d.expected), std::string::npos) << d.name << ": " << error;
  }
}

TEST(KvMessage, DecodeRejectsEveryTruncation) {
  const std::vector<uint8_t> good = encode(sample_message(2, 8));
  for (size_t n = 0; n < good.size(); ++n) {
    // A copy of exactly n bytes, so ASan sees any read past its end.
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = decode(prefix);
    ASSERT_FALSE(r.ok()) << "a " << n << "-byte prefix decoded";
  }
}

TEST(KvMessage, DecodeRejectsEverySingleBitFlip) {
  const std::vector<uint8_t> good = encode(sample_message(2, 8));
  for (size_t at = 0; at < good.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bytes = good;
      bytes[at] ^= static_cast<uint8_t>(1 << bit);
      ASSERT_FALSE(decode(bytes).ok()) << "byte " << at << " bit " << bit;
    }
  }
}

// Random mutations (byte flips, insertions, deletions, cuts, random header fields), half of them
// with a repaired checksum so the structural checks behind it are reached too. decode must never
// crash; whatever it accepts must re-encode to exactly the same bytes (the format is canonical).
TEST(KvMessage, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(12345);
  const std::vector<uint8_t> seeds[] = {encode(KvMessage{}), encode(sample_message(1, 4)), encode(sample_message(3, 16)),
                                        encode(sample_message(5, 0))};
  int accepted = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::vector<uint8_t> bytes = seeds[rng() % std::size(seeds)];
    const int n_mutations = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_mutations; ++k) {
      const size_t at = bytes.empty() ? 0 : rng() % bytes.size();
      switch (rng() % 6) {
        case 0:
          if (!bytes.empty()) bytes[at] ^= static_cast<uint8_t>(1 + rng() % 255);
          break;
        case 1:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng()));
          break;
        case 2:
          if (!bytes.empty()) bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        case 3:
          bytes.resize(at);
          break;
        case 4:  // a random count or size field
          if (bytes.size() >= 48) poke<uint32_t>(bytes, 32 + 4 * (rng() % 2), static_cast<uint32_t>(rng() % 64));
          break;
        default:
          if (bytes.size() >= 48) poke<uint64_t>(bytes, 40, rng() % 256);
          break;
      }
    }
    if (rng() % 2 == 0 && bytes.size() >= kKvChecksumBytes) fix_checksum(bytes);
    auto r = decode(bytes);
    if (r.ok()) {
      ++accepted;
      ASSERT_EQ(encode(*r), bytes) << "iteration " << iteration;
    } else {
      ASSERT_FALSE(r.error().message().empty());
    }
  }
  RecordProperty("accepted", accepted);
}

}  // namespace
}  // namespace mnemo::transfer
