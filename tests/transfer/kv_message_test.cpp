// The KV transfer wire format: round trips, and decode() refusing every kind of damage with a
// reason (never crashing, never reading outside the buffer: run under ASan, see CMakePresets).
// Unsigned messages here; signing and what a receiver refuses are in kv_auth_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

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

// Rewrites both checksums so that a deliberate change reaches the structural checks.
void fix_checksum(std::vector<uint8_t>& bytes) { update_checksums(bytes); }

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
  EXPECT_EQ(encode(empty).size(), kKvMessageHeaderBytes);

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
  // Offsets from the table in kv_message.h; the records start at 128, 3 of 24 + 4 * 4 bytes.
  const Damage table[] = {
      {"wrong magic", [](auto& b) { b[0] = 'X'; }, "magic"},
      {"wrong version", [](auto& b) { poke<uint32_t>(b, 4, 2); fix_checksum(b); }, "version"},
      {"payload size field off by one", [](auto& b) { poke<uint64_t>(b, 56, 47); fix_checksum(b); }, "payload size"},
      {"block_bytes disagrees", [](auto& b) { poke<uint32_t>(b, 48, 8); fix_checksum(b); }, "payload size"},
      {"more chunks than a receiver takes",
       [](auto& b) {
         poke<uint32_t>(b, 52, (1u << 20) + 1);
         poke<uint64_t>(b, 56, uint64_t{16} * ((1u << 20) + 1));
         poke<uint32_t>(b, 76, 24 * ((1u << 20) + 1));
         fix_checksum(b);
       },
       "limit"},
      {"chunk count beyond the buffer",
       [](auto& b) { poke<uint32_t>(b, 52, 1000); poke<uint64_t>(b, 56, 16000); poke<uint32_t>(b, 76, 24000); fix_checksum(b); },
       "truncated"},
      {"a payload beyond the limit",  // 9 chunks of 2 GiB: 18 GiB
       [](auto& b) {
         poke<uint32_t>(b, 48, 1u << 31);
         poke<uint32_t>(b, 52, 9);
         poke<uint64_t>(b, 56, uint64_t{9} << 31);
         poke<uint32_t>(b, 76, 9 * 24);
         fix_checksum(b);
       },
       "limit"},
      {"record bytes that cannot hold the records", [](auto& b) { poke<uint32_t>(b, 76, 8); fix_checksum(b); }, "cannot hold"},
      {"record bytes that are not whole tokens", [](auto& b) { poke<uint32_t>(b, 76, 3 * 40 + 2); fix_checksum(b); }, "cannot hold"},
      {"no layers", [](auto& b) { poke<uint32_t>(b, 64, 0); fix_checksum(b); }, "layers"},
      {"layers that do not divide the chunk", [](auto& b) { poke<uint32_t>(b, 64, 3); poke<uint32_t>(b, 72, 3); fix_checksum(b); }, "equal layers"},
      {"an empty layer range", [](auto& b) { poke<uint32_t>(b, 68, 1); fix_checksum(b); }, "range"},
      {"a layer range past the chunk's layers", [](auto& b) { poke<uint32_t>(b, 72, 2); fix_checksum(b); }, "range"},
      {"a slice size the payload disagrees with", [](auto& b) { poke<uint32_t>(b, 64, 2); poke<uint32_t>(b, 72, 2); poke<uint32_t>(b, 68, 1); fix_checksum(b); }, "payload size"},
      {"a MAC on an unsigned message", [](auto& b) { b[88] ^= 1; fix_checksum(b); }, "signed"},
      {"too many tokens", [](auto& b) { poke<uint32_t>(b, 128 + 20, 4097); fix_checksum(b); }, "tokens"},
      {"token count beyond the records", [](auto& b) { poke<uint32_t>(b, 128 + 20, 4000); fix_checksum(b); }, "truncated"},
      {"records shorter than declared",  // 3 records of 40 bytes and 48 payload bytes, all declared records
       [](auto& b) { poke<uint32_t>(b, 76, 168); poke<uint32_t>(b, 48, 0); poke<uint64_t>(b, 56, 0); fix_checksum(b); },
       "left over"},
      {"payload short by one byte", [](auto& b) { b.pop_back(); fix_checksum(b); }, "truncated"},
      {"one trailing byte", [](auto& b) { b.push_back(0); fix_checksum(b); }, "trailing"},
      {"payload byte flipped", [](auto& b) { b[b.size() - 1] ^= 1; }, "checksum mismatch"},
      {"header checksum byte flipped", [](auto& b) { b[127] ^= 0x80; }, "header checksum"},
      {"body checksum byte flipped", [](auto& b) { b[80] ^= 0x80; }, "header checksum"},
      {"chunk key flipped", [](auto& b) { b[128] ^= 4; }, "checksum mismatch"},
      {"transfer id flipped", [](auto& b) { b[24] ^= 1; }, "header checksum"},
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
// with repaired checksums so the structural checks behind them are reached too. decode must never
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
        case 4:  // a random count or size field: block bytes, chunk count or record bytes
          if (bytes.size() >= 80) {
            const size_t field[] = {48, 52, 76};
            poke<uint32_t>(bytes, field[rng() % 3], static_cast<uint32_t>(rng() % 64));
          }
          break;
        default:
          if (bytes.size() >= 64) poke<uint64_t>(bytes, 56, rng() % 256);
          break;
      }
    }
    if (rng() % 2 == 0) fix_checksum(bytes);
    auto r = decode(bytes);
    if (r.ok()) {
      ++accepted;
      // The sender and the sequence are the header's, not the message's.
      const auto header = parse_header(bytes);
      ASSERT_TRUE(header.ok());
      ASSERT_EQ(encode(*r, header->seal), bytes) << "iteration " << iteration;
    } else {
      ASSERT_FALSE(r.error().message().empty());
    }
  }
  RecordProperty("accepted", accepted);
}

}  // namespace
}  // namespace mnemo::transfer
