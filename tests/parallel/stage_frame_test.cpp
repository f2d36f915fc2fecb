// The stage frame codec (parallel/stage_frame.h): every kind round-trips; every truncation and
// every count beyond the limits or the bytes left (rows, KV, the KV cache's block operations)
// is refused with the field named; and the
// splits of layers and microbatches.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "parallel/pipeline.h"
#include "parallel/stage_frame.h"

namespace mnemo::parallel {
namespace {

std::string refusal(const StageFrame& frame, const StageFrameLimits& limits = {});

StageFrame rows_frame() {
  StageFrame f;
  f.kind = StageFrameKind::kRows;
  f.step = 41;
  f.microbatch = 2;
  f.route = {"127.0.0.1:9001", "127.0.0.1:9002"};
  f.n_embd = 3;
  SequenceInput a;
  a.tokens = {5, 6, 7};
  a.ranges = {{0, 1}, {4, 2}};
  a.block_table = {9, 3};
  SequenceInput b;
  b.tokens = {8};
  b.ranges = {{17, 1}};
  b.block_table = {1, 2, 40, 5, 6};
  f.sequences = {a, b};
  f.rows.resize(12);
  std::iota(f.rows.begin(), f.rows.end(), -2.5f);
  f.rows[5] = -0.0f;
  return f;
}

void expect_same(const StageFrame& a, const StageFrame& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.microbatch, b.microbatch);
  EXPECT_EQ(a.route, b.route);
  EXPECT_EQ(a.setup, b.setup);
  EXPECT_EQ(a.n_embd, b.n_embd);
  ASSERT_EQ(a.sequences.size(), b.sequences.size());
  for (size_t s = 0; s < a.sequences.size(); ++s) {
    EXPECT_EQ(a.sequences[s].tokens, b.sequences[s].tokens);
    EXPECT_EQ(a.sequences[s].block_table, b.sequences[s].block_table);
    ASSERT_EQ(a.sequences[s].ranges.size(), b.sequences[s].ranges.size());
    for (size_t r = 0; r < a.sequences[s].ranges.size(); ++r) {
      EXPECT_EQ(a.sequences[s].ranges[r].start, b.sequences[s].ranges[r].start);
      EXPECT_EQ(a.sequences[s].ranges[r].length, b.sequences[s].ranges[r].length);
    }
  }
  ASSERT_EQ(a.rows.size(), b.rows.size());
  if (!a.rows.empty()) {
    EXPECT_EQ(std::memcmp(a.rows.data(), b.rows.data(), a.rows.size() * sizeof(float)), 0);
  }
  EXPECT_EQ(a.error, b.error);
  EXPECT_EQ(a.replicas, b.replicas);
  EXPECT_EQ(a.kv.layer_begin, b.kv.layer_begin);
  EXPECT_EQ(a.kv.layer_end, b.kv.layer_end);
  EXPECT_EQ(a.kv.replica, b.kv.replica);
  EXPECT_EQ(a.kv.slots, b.kv.slots);
  EXPECT_EQ(a.kv.token_bytes, b.kv.token_bytes);
  EXPECT_EQ(a.kv.bytes, b.kv.bytes);
  EXPECT_EQ(a.kv.kv_heads, b.kv.kv_heads);
  EXPECT_EQ(a.tensor_layer, b.tensor_layer);
  EXPECT_EQ(a.tensor_part, b.tensor_part);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.block_copies, b.block_copies);
}

TEST(StageFrame, KvThatDoesNotMatchItsSlotsIsRefused) {
  StageFrame kv;
  kv.kind = StageFrameKind::kKv;
  kv.kv = {0, 2, false, {{1, 1}, {1, 2}}, 8, std::vector<uint8_t>(15, 1)};
  EXPECT_NE(refusal(kv).find("2 slots of 8 bytes of KV need 16 bytes, 15 are left"), std::string::npos) << refusal(kv);
  kv.kv.bytes.resize(16);
  kv.kv.token_bytes = 0;
  kv.kv.bytes.clear();
  EXPECT_NE(refusal(kv).find("0 bytes of KV a token"), std::string::npos) << refusal(kv);
  kv.kv = {3, 3, false, {}, 8, {}};
  EXPECT_NE(refusal(kv).find("layers [3, 3) are not a range"), std::string::npos) << refusal(kv);
}

TEST(StageFrame, BlockOperationsBeyondTheLimitsOrTheBytesAreRefused) {
  StageFrame pull;
  pull.kind = StageFrameKind::kPull;
  pull.kv = {0, 2, false, {}, 0, {}, 1};
  pull.blocks = {1, 2, 3};
  StageFrameLimits limits;
  limits.max_block_ops = 2;
  EXPECT_NE(refusal(pull, limits).find("3 pulled blocks exceed the limit of 2"), std::string::npos) << refusal(pull, limits);
  std::vector<uint8_t> bytes = encode_stage_frame(pull);
  bytes.resize(bytes.size() - 4);  // the last block id gone: the count no longer fits
  const auto short_pull = decode_stage_frame(bytes);
  ASSERT_FALSE(short_pull.ok());
  EXPECT_NE(short_pull.error().message().find("3 pulled blocks of 4 bytes each do not fit in the 8 bytes left"), std::string::npos)
      << short_pull.error().message();
  StageFrame copy;
  copy.kind = StageFrameKind::kCopy;
  copy.block_copies = {{1, 2}, {3, 4}, {5, 6}};
  EXPECT_NE(refusal(copy, limits).find("3 block copies exceed the limit of 2"), std::string::npos) << refusal(copy, limits);
  StageFrame push;
  push.kind = StageFrameKind::kPush;
  push.kv = {0, 2, false, {{1, 1}}, 8, std::vector<uint8_t>(7, 1)};
  EXPECT_NE(refusal(push).find("1 slots of 8 bytes of KV need 8 bytes, 7 are left"), std::string::npos) << refusal(push);
}

TEST(StageFrame, EveryKindRoundTrips) {
  StageFrame setup;
  setup.kind = StageFrameKind::kSetup;
  setup.setup = {0x1234567890abcdefULL, 10, 20, 16, 4096, DType::F32, 1, 3};
  StageFrame tensor = rows_frame();
  tensor.kind = StageFrameKind::kTensorRows;
  tensor.tensor_layer = 17;
  tensor.tensor_part = 1;
  StageFrame error;
  error.kind = StageFrameKind::kError;
  error.step = 7;
  error.error = "stage of layers [0, 15): block id 99 outside the pool";
  StageFrame kv;
  kv.kind = StageFrameKind::kKv;
  kv.step = 3;
  kv.kv = {4, 9, true, {{7, 0}, {7, 1}, {2, 15}}, 5, std::vector<uint8_t>(15, 0xab), 3};
  StageFrame restore;
  restore.kind = StageFrameKind::kRestore;
  restore.route = {"127.0.0.1:1", "127.0.0.1:2"};
  restore.kv = {0, 4, false, {}, 0, {}};
  StageFrame ping;
  ping.kind = StageFrameKind::kPing;
  StageFrame rows = rows_frame();
  rows.replicas = {"127.0.0.1:9001", "10.0.0.2:9000"};
  StageFrame pull;
  pull.kind = StageFrameKind::kPull;
  pull.route = {"127.0.0.1:3"};
  pull.kv = {0, 30, false, {}, 0, {}, 2};
  pull.blocks = {4, 0, 4095};
  StageFrame push = kv;
  push.kind = StageFrameKind::kPush;
  push.kv.replica = false;
  push.replicas = {"127.0.0.1:4"};
  StageFrame copy;
  copy.kind = StageFrameKind::kCopy;
  copy.block_copies = {{3, 9}, {4, 10}};
  for (const StageFrame& f : {rows, setup, error, kv, restore, ping, tensor, pull, push, copy}) {
    const auto decoded = decode_stage_frame(encode_stage_frame(f));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message();
    expect_same(f, *decoded);
  }
}

TEST(StageFrame, EveryTruncationIsRefusedAndATrailingByteToo) {
  const std::vector<uint8_t> bytes = encode_stage_frame(rows_frame());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_stage_frame(std::span(bytes).first(n)).ok()) << n << " of " << bytes.size() << " bytes";
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  const auto extra_row_byte = decode_stage_frame(longer);
  ASSERT_FALSE(extra_row_byte.ok());
  EXPECT_NE(extra_row_byte.error().message().find("need 48 bytes of rows, 49 are left"), std::string::npos)
      << extra_row_byte.error().message();
  StageFrame error;
  error.kind = StageFrameKind::kError;
  error.error = "x";
  std::vector<uint8_t> error_bytes = encode_stage_frame(error);
  error_bytes.push_back(0);
  const auto trailing = decode_stage_frame(error_bytes);
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.error().message().find("1 bytes after its end"), std::string::npos) << trailing.error().message();
}

std::string refusal(const StageFrame& frame, const StageFrameLimits& limits) {
  const auto decoded = decode_stage_frame(encode_stage_frame(frame), limits);
  return decoded.ok() ? "accepted" : decoded.error().message();
}

TEST(StageFrame, CountsBeyondTheLimitsOrTheBytesAreRefusedByName) {
  StageFrameLimits limits;
  limits.max_route = 1;
  EXPECT_NE(refusal(rows_frame(), limits).find("2 route endpoints exceed the limit of 1"), std::string::npos);
  limits = {};
  limits.max_tokens = 3;
  EXPECT_NE(refusal(rows_frame(), limits).find("4 tokens exceed the limit of 3"), std::string::npos) << refusal(rows_frame(), limits);
  limits = {};
  limits.max_blocks = 4;
  EXPECT_NE(refusal(rows_frame(), limits).find("5 blocks exceed"), std::string::npos);
  StageFrame f = rows_frame();
  f.rows.pop_back();
  EXPECT_NE(refusal(f).find("need 48 bytes of rows, 44 are left"), std::string::npos) << refusal(f);
  f = rows_frame();
  f.sequences[0].tokens.pop_back();  // 2 tokens for ranges covering 3
  f.rows.resize(9);
  EXPECT_NE(refusal(f).find("2 tokens for ranges covering 3"), std::string::npos) << refusal(f);
  f = rows_frame();
  f.n_embd = 0;
  EXPECT_NE(refusal(f).find("n_embd 0"), std::string::npos);
  // A count the remaining bytes cannot hold is refused before it sizes anything.
  std::vector<uint8_t> bytes = encode_stage_frame(rows_frame());
  const size_t sequences_at = 4 + 4 + 4 + 8 + 4 + 4 + (2 + 14) * 2 + 4 + 4;
  bytes[sequences_at + 3] = 0x7f;
  const auto huge = decode_stage_frame(bytes);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message().find("sequences"), std::string::npos) << huge.error().message();
  StageFrame setup;
  setup.kind = StageFrameKind::kSetup;
  setup.setup = {1, 5, 5, 16, 10, DType::F16, 0, 1};
  EXPECT_NE(refusal(setup).find("not a stage"), std::string::npos);
  std::vector<uint8_t> wrong_magic = encode_stage_frame(setup);
  wrong_magic[0] ^= 1;
  EXPECT_FALSE(decode_stage_frame(wrong_magic).ok());
}

// The fuzzer's seeds (fuzz/corpus/stage) are frames of every kind that decode and re-encode
// unchanged, so fuzzing starts from inside the format.
TEST(StageFrame, TheFuzzSeedsAreValidFramesOfEveryKind) {
  std::set<StageFrameKind> kinds;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(MNEMO_SOURCE_DIR) + "/fuzz/corpus/stage")) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto frame = decode_stage_frame(bytes);
    ASSERT_TRUE(frame.ok()) << entry.path() << ": " << frame.error().message();
    EXPECT_EQ(encode_stage_frame(*frame), bytes) << entry.path();
    kinds.insert(frame->kind);
  }
  EXPECT_EQ(kinds.size(), size_t{kLastStageFrameKind});
}

TEST(PipelineSplits, LayersSplitContiguouslyAndEvenly) {
  using R = std::vector<std::pair<int32_t, int32_t>>;
  EXPECT_EQ(split_layers(30, 2), (R{{0, 15}, {15, 30}}));
  EXPECT_EQ(split_layers(18, 4), (R{{0, 5}, {5, 10}, {10, 14}, {14, 18}}));
  EXPECT_EQ(split_layers(3, 3), (R{{0, 1}, {1, 2}, {2, 3}}));
}

Batch batch_of(const std::vector<size_t>& token_counts) {
  Batch batch;
  for (size_t n : token_counts) {
    SequenceInput s;
    s.tokens.assign(n, 1);
    batch.sequences.push_back(s);
  }
  return batch;
}

TEST(PipelineSplits, MicrobatchesBalanceTokensAndNoneIsEmpty) {
  using G = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(split_microbatches(batch_of({1, 1, 1, 1}), 2), (G{{0, 2}, {2, 4}}));
  EXPECT_EQ(split_microbatches(batch_of({100, 1, 1, 1}), 2), (G{{0, 1}, {1, 4}}));
  EXPECT_EQ(split_microbatches(batch_of({1, 1, 1, 100}), 2), (G{{0, 3}, {3, 4}}));
  EXPECT_EQ(split_microbatches(batch_of({1, 1, 1, 100}), 4), (G{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(split_microbatches(batch_of({5, 5}), 4), (G{{0, 1}, {1, 2}}));
  EXPECT_EQ(split_microbatches(batch_of({7}), 3), (G{{0, 1}}));
  EXPECT_EQ(split_microbatches(batch_of({}), 2), (G{}));
  EXPECT_EQ(split_microbatches(batch_of({1, 1, 1, 1, 1, 1}), 1), (G{{0, 6}}));
}

}  // namespace
}  // namespace mnemo::parallel
