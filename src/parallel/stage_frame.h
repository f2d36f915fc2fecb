// What a pipeline's coordinator and its stages say to each other (SPEC D6): the coordinator sets
// each stage up (its layers and KV pool), then every forward pass's microbatches go through the
// stages as rows of the residual stream and come back to the coordinator.
//
//   coordinator ──setup──▶ stage i              (once; acknowledged when the stage is ready)
//   coordinator ──rows──▶ stage 0 ──rows──▶ stage 1 ... ──rows──▶ coordinator
//                         a stage that fails a microbatch sends ──error──▶ coordinator
//   stage i ──kv (replica)──▶ its replica holder      (before it sends the rows on: SPEC D7)
//   coordinator ──ping──▶ stage                        (acknowledged while it lives)
//   coordinator ──restore──▶ stage j ──kv──▶ a spare ; stage j ──restored──▶ coordinator
//   coordinator ──tensor rows──▶ every tensor worker ──rows (its partial)──▶ coordinator
//   coordinator ──pull──▶ worker ──kv (its share of the blocks)──▶ coordinator
//   coordinator ──push (kv of its share)──▶ worker ──kv (replica)──▶ its replica holder
//                                           worker ──restored──▶ coordinator
//   coordinator ──copy──▶ worker ──restored──▶ coordinator
//
// Pull, push and copy are the coordinator's KV cache moving chunks between the workers' device
// tier and its own host and disk tiers (kv/remote_device.h): the worker answers each, in order
// with its passes, with the frame's microbatch (the coordinator's request number).
//
// A rows frame carries its route: the endpoints still ahead of it, the coordinator's last. A
// stage runs its layers over the rows and sends the frame on to route[0] with the rest of the
// route. So the coordinator alone decides the topology, and a replaced stage is a new endpoint
// in the next frame's route. Its `replicas` list the replica holder of each stage still to run
// the frame, the receiving stage's first: the stage sends the KV its microbatch wrote there
// before the rows go on, so every pass that completed is replicated (empty: no replication).
//
// KV travels per token: a kv frame's slots (block, slot) each carry the token's keys and values
// for the frame's layers, every KV head, in the pool's element type, in layout order
// ([layer][K then V][head][dim]); token_kv_bytes() is their size.
//
// Encoding (little-endian):
//   magic "MNST" u32 | version u32 | kind u32 | step u64 | microbatch u32 |
//   route: count u32, then per endpoint: length u16, bytes; replicas: the same
//   setup: model fingerprint u64 | layer_begin i32 | layer_end i32 | block_size i32 |
//          n_blocks i32 | kv dtype u32 | tensor rank i32 | tensor ranks i32
//   rows:  n_embd i32 | sequence count u32, then per sequence: range count u32, (start i32,
//          length i32) each | block count u32, block ids i32 | token count u32, tokens i32 |
//          then the rows: (total tokens) x n_embd f32
//   error: length u32, UTF-8 text
//   kv:    layer_begin i32 | layer_end i32 | into replica u8 | kv heads i32 | slot count u32,
//          (block i32, slot i32) each | token bytes u32 | then slot count x token bytes
//   restore: layer_begin i32 | layer_end i32 | from replica u8 | kv heads i32 (the target is
//          route[0])
//   push:  as kv (into the worker's own pool; replicas: its replica holder, or none)
//   pull:  as restore | block count u32, block ids i32 (answered with a kv frame of every slot
//          of those blocks, in order)
//   copy:  pair count u32, (from block i32, to block i32) each
//   ping, restored: nothing more
//   tensor rows: layer i32 | part u8 | then as rows (the rows are the block's normed input; a
//          tensor worker answers with a rows frame of its share of the block's output)
// Every count is checked against StageFrameLimits and the bytes that remain before anything is
// allocated; decode() refuses trailing bytes. Frames travel inside the KV transport's
// authenticated messages (stage_link.h): the bytes are hostile until it verified them, and
// decode() is fuzzed (fuzz/stage_frame_fuzz.cpp) all the same.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/batch.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace mnemo::parallel {

inline constexpr uint32_t kStageFrameMagic = 0x54534e4dU;  // "MNST" little-endian
inline constexpr uint32_t kStageFrameVersion = 1;

enum class StageFrameKind : uint32_t {
  kSetup = 1, kRows = 2, kError = 3, kKv = 4, kRestore = 5, kPing = 6, kRestored = 7, kTensorRows = 8,
  kPull = 9, kPush = 10, kCopy = 11
};
inline constexpr uint32_t kLastStageFrameKind = 11;

// A frame of KV (a restore's, a pull's answer, a push) stays below this many bytes.
inline constexpr size_t kMaxKvFrameBytes = size_t{32} << 20;

// A stage's share of the model and of the KV pool. Block ids are the coordinator's: every stage
// holds its layers' slice of every block, so a chunk is on every stage or on none.
struct StageSetup {
  uint64_t model_fingerprint = 0;  // stage_model_fingerprint() of the coordinator's file
  int32_t layer_begin = 0;
  int32_t layer_end = 0;
  int32_t block_size = 0;
  int32_t n_blocks = 0;
  DType kv_dtype = DType::F16;
  int32_t tensor_rank = 0;   // tensor parallelism: this worker's share of every layer
  int32_t tensor_ranks = 1;  // 1: whole layers (a pipeline stage)
  bool operator==(const StageSetup&) const = default;
};

// Per-token KV of a range of layers (kKv), or which KV a restore sends (kRestore).
struct StageKv {
  int32_t layer_begin = 0;
  int32_t layer_end = 0;
  bool replica = false;  // kKv: into the receiver's replica store; kRestore: from the sender's
  std::vector<std::pair<BlockId, int32_t>> slots;  // kKv
  uint32_t token_bytes = 0;                        // kKv
  std::vector<uint8_t> bytes;                      // kKv: slots.size() * token_bytes
  // The KV heads a token's bytes hold (a tensor rank's may differ from the receiver's own); 0:
  // the receiver's.
  int32_t kv_heads = 0;
};

struct StageFrame {
  StageFrameKind kind = StageFrameKind::kRows;
  uint64_t step = 0;         // the coordinator's forward pass
  uint32_t microbatch = 0;   // its index within the pass
  std::vector<std::string> route;
  std::vector<std::string> replicas;     // kRows: replica holders, this stage's first
  StageSetup setup;                      // kSetup
  int32_t n_embd = 0;                    // kRows
  std::vector<SequenceInput> sequences;  // kRows: tokens, ranges and block tables
  std::vector<float> rows;               // kRows, kTensorRows: one row of n_embd per token, in batch order
  int32_t tensor_layer = 0;              // kTensorRows: the layer, and its attention (0) or FFN (1)
  uint8_t tensor_part = 0;
  std::string error;                     // kError
  StageKv kv;                            // kKv, kRestore, kPush; kPull: the share's layers and heads
  std::vector<BlockId> blocks;           // kPull
  std::vector<std::pair<BlockId, BlockId>> block_copies;  // kCopy: (from, to)
};

struct StageFrameLimits {
  uint32_t max_route = 16;
  uint32_t max_endpoint_bytes = 256;
  uint32_t max_sequences = 4096;
  uint32_t max_ranges = 64;            // per sequence
  uint32_t max_blocks = 1u << 20;      // per sequence
  uint32_t max_tokens = 1u << 20;      // in all
  int32_t max_n_embd = 1 << 16;
  uint64_t max_row_bytes = uint64_t{1} << 30;
  uint32_t max_error_bytes = 4096;
  uint32_t max_slots = 1u << 24;
  uint32_t max_token_bytes = 1u << 24;
  uint64_t max_kv_bytes = uint64_t{1} << 32;
  uint32_t max_block_ops = 1u << 22;  // blocks a pull names, pairs a copy lists
};

// The bytes of one token's KV for `n_layers` layers of `layout` (its n_layers is ignored).
uint32_t token_kv_bytes(const KvLayout& layout, int32_t n_layers);

std::vector<uint8_t> encode_stage_frame(const StageFrame& frame);
// Every field checked as the encoding above says; the error names the first one that is not.
Result<StageFrame> decode_stage_frame(std::span<const uint8_t> bytes, const StageFrameLimits& limits = {});

// Sequences [begin, end) of `batch` as a rows frame carries them: tokens, ranges, tables.
std::vector<SequenceInput> frame_sequences(const Batch& batch, size_t begin, size_t end);

// Whether `frame` is a rows frame whose rows match its tokens (n_embd floats each) and whose
// ranges cover its tokens.
Status check_rows_frame(const StageFrame& frame);

}  // namespace mnemo::parallel
