// KV element types per tier (kv/kv_codec.h): the codecs' sizes and round trips, the --kv-types
// syntax, and a KvCache whose host and disk hold compressed copies: demoted chunks come back
// close to what was computed but not identical, while preempted sequences and imported chunks
// (replicas) come back bit for bit from the host's exact blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_codec.h"
#include "kv_test_support.h"
#include "util/fp16.h"

namespace mnemo {
namespace {

using testing::tokens_from;

// Two layers, one head of 32 dimensions, two tokens per block: every format's groups fit.
KvLayout small_layout(DType dtype = DType::F16) {
  KvLayout l;
  l.n_layers = 2;
  l.n_kv_heads = 1;
  l.head_dim_k = 32;
  l.head_dim_v = 32;
  l.block_size = 2;
  l.dtype = dtype;
  return l;
}

float pattern(TokenId first_token, size_t i) {
  return 2.0f * std::sin(0.1f * static_cast<float>(first_token) + 0.37f * static_cast<float>(i));
}

void fill(KvCache& kv, BlockId block, TokenId first_token) {
  auto* h = reinterpret_cast<uint16_t*>(kv.device().block(block));
  for (size_t i = 0; i < kv.layout().block_elems(); ++i) h[i] = fp32_to_fp16(pattern(first_token, i));
}

// The largest |difference| from the pattern, and whether every element is the pattern's own F16.
std::pair<float, bool> compare(const KvCache& kv, BlockId block, TokenId first_token) {
  const auto* h = reinterpret_cast<const uint16_t*>(kv.device().block(block));
  float worst = 0.0f;
  bool identical = true;
  for (size_t i = 0; i < kv.layout().block_elems(); ++i) {
    worst = std::max(worst, std::fabs(fp16_to_fp32(h[i]) - pattern(first_token, i)));
    identical = identical && h[i] == fp32_to_fp16(pattern(first_token, i));
  }
  return {worst, identical};
}

class KvTypesTest : public ::testing::Test {
 protected:
  double clock_ = 1000;
  KvPoolConfig config(int32_t device, int32_t host, std::optional<KvType> host_type, int32_t exact = 0) {
    KvPoolConfig c;
    c.device_blocks = device;
    c.host_blocks = host;
    c.host_exact_blocks = exact;
    c.host_type = host_type;
    c.disk_type = host_type;
    c.policy = RetentionPolicy::kLru;
    c.swap_out_threshold = 0;
    c.clock = [this] { return clock_; };
    return c;
  }
  void run_and_cache(KvCache& kv, uint64_t ns, const std::vector<TokenId>& tokens) {
    clock_ += 1;
    PrefixMatch match = kv.match_prefix(ns, tokens, static_cast<int32_t>(tokens.size()) / kv.block_size());
    KvTable table = std::move(match.table);
    const auto n = static_cast<int32_t>(tokens.size());
    ASSERT_TRUE(kv.prepare_write(table, static_cast<int32_t>(table.size()) * kv.block_size(), n));
    for (size_t b = 0; b < table.size(); ++b) fill(kv, table[b], tokens[b * 2]);
    kv.cache_prefix(ns, tokens, n, table);
    kv.release(table);
  }
};

TEST(KvCodec, SizesFollowTheFormats) {
  const KvLayout l = small_layout();  // 256 elements a block, 512 bytes of F16
  ASSERT_EQ(l.block_bytes(), 512u);
  const auto bytes = [&](KvType type) { return KvCodec::make(l, type)->block_bytes(); };
  EXPECT_EQ(bytes(KvType::kF16), 512u);
  EXPECT_EQ(bytes(KvType::kF32), 1024u);
  EXPECT_EQ(bytes(KvType::kQ8_0), 256u / 32 * 34);
  EXPECT_EQ(bytes(KvType::kQ4_0), 256u / 32 * 18);
  // Per layer: keys 32 channels x (scale, minimum) + 1 row pair x 32 bytes; values 2 groups of 20.
  EXPECT_EQ(bytes(KvType::kKivi4), 2u * ((32 * 4 + 32) + 2 * 20));
  // Keys as kivi4's, values 4 blocks of Q8_0 per layer.
  EXPECT_EQ(bytes(KvType::kK4V8), 2u * ((32 * 4 + 32) + 2 * 34));
  EXPECT_TRUE(KvCodec::make(l, KvType::kF16)->is_identity());
  EXPECT_TRUE(KvCodec::make(l, KvType::kF32)->exact());
  EXPECT_FALSE(KvCodec::make(l, KvType::kQ8_0)->exact());
  EXPECT_FALSE(KvCodec::make(small_layout(DType::F32), KvType::kF16)->exact());
}

TEST(KvCodec, RoundTripsStayCloseForEveryDeviceType) {
  for (const DType dtype : {DType::F16, DType::F32}) {
    const KvLayout l = small_layout(dtype);
    std::vector<uint8_t> block(l.block_bytes()), back(l.block_bytes());
    for (size_t i = 0; i < l.block_elems(); ++i) {
      const float x = pattern(5, i);
      if (dtype == DType::F16) {
        reinterpret_cast<uint16_t*>(block.data())[i] = fp32_to_fp16(x);
      } else {
        reinterpret_cast<float*>(block.data())[i] = x;
      }
    }
    // Values within [-2, 2]: half a step of each format over its group's range (Q4_0's codes
    // reach -8 steps but only +7, so the far end of the other sign is a whole step away).
    for (const auto& [type, bound] : {std::pair{KvType::kF16, 2e-3f}, std::pair{KvType::kQ8_0, 2.0f / 127 / 2 + 4e-3f},
                                      std::pair{KvType::kQ4_0, 2.0f / 8 + 4e-3f}, std::pair{KvType::kKivi4, 4.0f / 15 / 2 + 4e-3f},
                                      std::pair{KvType::kK4V8, 4.0f / 15 / 2 + 4e-3f}}) {
      const KvCodec codec = *KvCodec::make(l, type);
      std::vector<uint8_t> coded(codec.block_bytes());
      codec.encode(block.data(), coded.data(), l.n_layers);
      codec.decode(coded.data(), back.data(), l.n_layers);
      float worst = 0.0f;
      for (size_t i = 0; i < l.block_elems(); ++i) {
        const float y = dtype == DType::F16 ? fp16_to_fp32(reinterpret_cast<const uint16_t*>(back.data())[i])
                                            : reinterpret_cast<const float*>(back.data())[i];
        worst = std::max(worst, std::fabs(y - pattern(5, i)));
      }
      EXPECT_LE(worst, bound) << kv_type_name(type) << " on a " << dtype_name(dtype) << " device";
      if (type != KvType::kF16) {
        EXPECT_GT(worst, 1e-4f) << kv_type_name(type) << ": a lossy type lost nothing?";
      }
    }
  }
}

TEST(KvCodec, RefusesGeometriesItsFormatsCannotHold) {
  KvLayout l = small_layout();
  l.head_dim_k = l.head_dim_v = 48;
  EXPECT_FALSE(KvCodec::make(l, KvType::kQ8_0).ok());
  EXPECT_FALSE(KvCodec::make(l, KvType::kKivi4).ok());
  EXPECT_FALSE(KvCodec::make(l, KvType::kK4V8).ok());
  EXPECT_TRUE(KvCodec::make(l, KvType::kF16).ok());
  l = small_layout();
  l.block_size = 3;
  EXPECT_FALSE(KvCodec::make(l, KvType::kKivi4).ok());
  EXPECT_TRUE(KvCodec::make(l, KvType::kQ8_0).ok());
  KvPoolConfig config;
  config.host_type = KvType::kKivi4;
  const Status checked = KvCache::check_types(l, config);
  ASSERT_FALSE(checked.ok());
  EXPECT_NE(checked.error().message().find("even block size"), std::string::npos) << checked.error().message();
}

// What a write-through to disk does with a chunk of another tier's type (on the disk's writer
// thread): the same type is copied, from or to the device's form is one encode or decode, and
// between two compressed types it goes through the device's form.
TEST(KvCodec, ConvertLayersBetweenEveryPairOfForms) {
  const KvLayout l = small_layout();
  std::vector<uint8_t> device_form(l.block_bytes());
  auto* h = reinterpret_cast<uint16_t*>(device_form.data());
  for (size_t i = 0; i < l.block_elems(); ++i) h[i] = fp32_to_fp16(pattern(3, i));
  const KvCodec f16 = KvCodec::identity(l);
  const KvCodec q8 = *KvCodec::make(l, KvType::kQ8_0);
  const KvCodec k4v8 = *KvCodec::make(l, KvType::kK4V8);
  std::vector<uint8_t> as_q8(q8.block_bytes()), as_k4v8(k4v8.block_bytes()), expected(k4v8.block_bytes());
  convert_layers(f16, q8, device_form.data(), as_q8.data(), l.n_layers);
  q8.encode(device_form.data(), expected.data(), l.n_layers);
  EXPECT_EQ(as_q8, std::vector<uint8_t>(expected.begin(), expected.begin() + static_cast<ptrdiff_t>(q8.block_bytes())));

  std::vector<uint8_t> back(l.block_bytes()), decoded(l.block_bytes());
  convert_layers(q8, f16, as_q8.data(), back.data(), l.n_layers);
  q8.decode(as_q8.data(), decoded.data(), l.n_layers);
  EXPECT_EQ(back, decoded);

  convert_layers(q8, k4v8, as_q8.data(), as_k4v8.data(), l.n_layers);
  k4v8.encode(decoded.data(), expected.data(), l.n_layers);
  EXPECT_EQ(as_k4v8, expected);

  std::vector<uint8_t> copied(q8.block_bytes());
  convert_layers(q8, q8, as_q8.data(), copied.data(), l.n_layers);
  EXPECT_EQ(copied, as_q8);
}

TEST(KvTypesSpec, ParsesEveryTierAndNamesWhatIsWrong) {
  const auto all = parse_kv_types("f16");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(kv_types_string(*all), "device=f16,host=f16,disk=f16");
  EXPECT_EQ(kv_types_string(*parse_kv_types("device=f16,host=q8_0,disk=q4_0")), "device=f16,host=q8_0,disk=q4_0");
  EXPECT_EQ(kv_types_string(*parse_kv_types("host=q8_0")), "device=f16,host=q8_0,disk=q8_0");  // the disk follows the host
  EXPECT_EQ(kv_types_string(*parse_kv_types("device=f32")), "device=f32,host=f32,disk=f32");
  EXPECT_EQ(kv_types_string(*parse_kv_types("host=f16,disk=kivi4")), "device=f16,host=f16,disk=kivi4");
  for (const char* bad : {"q8_0", "device=q8_0", "gpu=f16", "host=q3_k", "host", "", "host=q8_0,,"}) {
    const auto parsed = parse_kv_types(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
  }
  EXPECT_NE(parse_kv_types("host=q3_k").error().message().find("q3_k"), std::string::npos);
}

TEST_F(KvTypesTest, ALossyHostHoldsDemotedChunksCloseButNotIdentical) {
  KvCache kv(small_layout(), config(2, 4, KvType::kQ8_0, 2));
  EXPECT_EQ(kv.kv_types().host, KvType::kQ8_0);
  const auto a = tokens_from(100, 4);
  const auto b = tokens_from(200, 4);
  run_and_cache(kv, 0, a);
  run_and_cache(kv, 0, b);  // the device holds two blocks: a's go to the host, compressed
  EXPECT_EQ(kv.n_cached_blocks(Tier::kHost), 2u);
  EXPECT_EQ(kv.counters().bytes_device_to_host, 2 * 272);  // q8_0 blocks, not F16's 512 bytes
  clock_ += 1;
  PrefixMatch match = kv.match_prefix(0, a, 2);
  kv.finish_loads();
  ASSERT_EQ(match.table.size(), 2u);
  EXPECT_EQ(match.host_chunks, 2);
  for (size_t i = 0; i < 2; ++i) {
    const auto [worst, identical] = compare(kv, match.table[i], a[i * 2]);
    EXPECT_FALSE(identical) << "chunk " << i << " came back from q8_0 bit for bit";
    EXPECT_LE(worst, 2.0f / 127 / 2 + 4e-3f) << "chunk " << i;
  }
  kv.release(match.table);
}

TEST_F(KvTypesTest, PreemptedSequencesComeBackFromTheExactBlocksBitForBit) {
  KvCache kv(small_layout(), config(4, 4, KvType::kQ4_0, 2));
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  fill(kv, table[0], 1);
  fill(kv, table[1], 3);
  ASSERT_TRUE(kv.swap_out(table));
  EXPECT_EQ(kv.n_host_exact_free(), 0);
  EXPECT_EQ(kv.n_host_free(), 4);  // the compressed pool is untouched
  ASSERT_TRUE(kv.swap_in(table));
  EXPECT_TRUE(compare(kv, table[0], 1).second);
  EXPECT_TRUE(compare(kv, table[1], 3).second);
  // A sequence larger than the exact blocks is not swapped (it is recomputed), never compressed.
  KvTable big;
  ASSERT_TRUE(kv.prepare_write(big, 0, 2));
  kv.release(table);
  KvTable three;
  ASSERT_TRUE(kv.prepare_write(three, 0, 6));
  EXPECT_FALSE(kv.swap_out(three));
  kv.release(three);
  kv.release(big);
}

// Any host type other than the device's own keeps exact blocks: kivi4 (lossy) and F32 (exact
// values, other bytes: an F16 payload copied into an F32 block as it is would be garbage).
TEST_F(KvTypesTest, ImportedChunksStayExactBesideAHostOfAnotherType) {
  for (const KvType host_type : {KvType::kKivi4, KvType::kF32}) {
    SCOPED_TRACE(kv_type_name(host_type));
    KvCache sender(small_layout(), config(4, 0, std::nullopt));
    const auto a = tokens_from(300, 4);
    run_and_cache(sender, 0, a);
    KvCache::ExportedPrefix exported = sender.export_prefix(0, a, 2);
    ASSERT_EQ(exported.chunks, 2);
    KvCache receiver(small_layout(), config(2, 4, host_type, 2));
    const auto imported = receiver.import_prefix(0, exported.tokens, exported.payload);
    ASSERT_TRUE(imported.ok()) << imported.error().message();
    EXPECT_EQ(*imported, 2);
    EXPECT_EQ(receiver.n_host_exact_free(), 0);
    EXPECT_EQ(receiver.n_host_free(), 4);
    // Exported again, from the exact blocks: the device's bytes.
    const KvCache::ExportedPrefix again = receiver.export_prefix(0, a, 2);
    EXPECT_EQ(again.payload, exported.payload);
    PrefixMatch match = receiver.match_prefix(0, a, 2);
    receiver.finish_loads();
    ASSERT_EQ(match.table.size(), 2u);
    EXPECT_EQ(match.host_chunks, 2);
    EXPECT_TRUE(compare(receiver, match.table[0], a[0]).second);
    EXPECT_TRUE(compare(receiver, match.table[1], a[2]).second);
    receiver.release(match.table);
  }
}

TEST_F(KvTypesTest, ACompressedDiskTierHoldsCodedExtentsAndServesThemBack) {
  testing::TempDir dir;
  KvPoolConfig c = config(2, 0, KvType::kQ8_0);
  const KvCache::DiskPayload payload = KvCache::disk_payload(small_layout(), c);
  EXPECT_EQ(payload.whole, 272u);
  EXPECT_EQ(payload.compact, 0u);
  auto disk = DiskTier::open(dir.path, 7, payload.whole, 1 << 20);
  ASSERT_TRUE(disk.ok()) << disk.error().message();
  c.disk = std::move(*disk);
  {
    KvCache kv(small_layout(), c);
    const auto a = tokens_from(400, 4);
    run_and_cache(kv, 0, a);  // written through, as q8_0
    run_and_cache(kv, 0, tokens_from(500, 4));
    c.disk->flush();
    EXPECT_EQ(kv.counters().bytes_to_disk, 4 * 272);
    clock_ += 1;
    PrefixMatch match = kv.match_prefix(0, a, 2);
    ASSERT_EQ(match.table.size(), 2u);
    EXPECT_EQ(match.disk_chunks, 2);
    for (size_t i = 0; i < 2; ++i) {
      const auto [worst, identical] = compare(kv, match.table[i], a[i * 2]);
      EXPECT_FALSE(identical);
      EXPECT_LE(worst, 2.0f / 127 / 2 + 4e-3f);
    }
    kv.release(match.table);
  }
  // A restart reads the same extents back.
  KvCache restarted(small_layout(), c);
  EXPECT_EQ(restarted.restore_from_disk(), 4u);
}

}  // namespace
}  // namespace mnemo
