#include "parallel/stage_frame.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

namespace mnemo::parallel {
namespace {

class Writer {
 public:
  template <class T>
  void put(T value) {
    auto bits = static_cast<std::make_unsigned_t<T>>(value);
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  }
  void put_f32s(const std::vector<float>& values) {
    for (float v : values) put(std::bit_cast<uint32_t>(v));
  }
  void put_text(std::string_view text) { out_.insert(out_.end(), text.begin(), text.end()); }
  void put_bytes(const std::vector<uint8_t>& bytes) { out_.insert(out_.end(), bytes.begin(), bytes.end()); }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Reads front to back; every read is checked against the bytes left, and every count against
// them before anything it sizes is allocated.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t left() const { return bytes_.size() - at_; }

  template <class T>
  Result<T> take(std::string_view field) {
    if (left() < sizeof(T)) return make_error("stage frame ends inside {} (offset {})", field, at_);
    std::make_unsigned_t<T> bits = 0;
    for (size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<std::make_unsigned_t<T>>(bytes_[at_ + i]) << (8 * i);
    at_ += sizeof(T);
    return static_cast<T>(bits);
  }
  // A count of items of `item_bytes` each, at most `max` and at most what the bytes left hold.
  Result<uint32_t> count(std::string_view field, uint32_t max, size_t item_bytes) {
    MNEMO_ASSIGN_OR_RETURN(const uint32_t n, take<uint32_t>(field));
    if (n > max) return make_error("stage frame: {} {} exceed the limit of {}", n, field, max);
    if (static_cast<uint64_t>(n) * item_bytes > left()) {
      return make_error("stage frame: {} {} of {} bytes each do not fit in the {} bytes left", n, field, item_bytes, left());
    }
    return n;
  }
  Result<std::string> text(std::string_view field, size_t n) {
    if (n > left()) return make_error("stage frame ends inside {}", field);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return s;
  }
  // Precondition: n <= left().
  void bytes(size_t n, std::vector<uint8_t>& out) {
    out.assign(bytes_.begin() + static_cast<std::ptrdiff_t>(at_), bytes_.begin() + static_cast<std::ptrdiff_t>(at_ + n));
    at_ += n;
  }
  Status i32s(std::string_view field, uint32_t n, std::vector<int32_t>& out) {
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      MNEMO_ASSIGN_OR_RETURN(out[i], take<int32_t>(field));
    }
    return ok_status();
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

bool valid_dtype(uint32_t value) {
  return value == static_cast<uint32_t>(DType::F16) || value == static_cast<uint32_t>(DType::F32);
}

void encode_rows(const StageFrame& frame, Writer& out) {
  out.put<int32_t>(frame.n_embd);
  out.put<uint32_t>(static_cast<uint32_t>(frame.sequences.size()));
  for (const SequenceInput& s : frame.sequences) {
    out.put<uint32_t>(static_cast<uint32_t>(s.ranges.size()));
    for (const QueryRange& r : s.ranges) {
      out.put<int32_t>(r.start);
      out.put<int32_t>(r.length);
    }
    out.put<uint32_t>(static_cast<uint32_t>(s.block_table.size()));
    for (BlockId b : s.block_table) out.put<int32_t>(b);
    out.put<uint32_t>(static_cast<uint32_t>(s.tokens.size()));
    for (TokenId t : s.tokens) out.put<int32_t>(t);
  }
  out.put_f32s(frame.rows);
}

Status decode_rows(Reader& in, const StageFrameLimits& limits, StageFrame& frame) {
  MNEMO_ASSIGN_OR_RETURN(frame.n_embd, in.take<int32_t>("n_embd"));
  if (frame.n_embd <= 0 || frame.n_embd > limits.max_n_embd) {
    return make_error("stage frame: n_embd {} outside 1..{}", frame.n_embd, limits.max_n_embd);
  }
  MNEMO_ASSIGN_OR_RETURN(const uint32_t n_sequences, in.count("sequences", limits.max_sequences, 12));
  frame.sequences.resize(n_sequences);
  uint64_t tokens = 0;
  for (SequenceInput& s : frame.sequences) {
    MNEMO_ASSIGN_OR_RETURN(const uint32_t n_ranges, in.count("ranges", limits.max_ranges, 8));
    s.ranges.resize(n_ranges);
    for (QueryRange& r : s.ranges) {
      MNEMO_ASSIGN_OR_RETURN(r.start, in.take<int32_t>("range start"));
      MNEMO_ASSIGN_OR_RETURN(r.length, in.take<int32_t>("range length"));
    }
    MNEMO_ASSIGN_OR_RETURN(const uint32_t n_blocks, in.count("blocks", limits.max_blocks, 4));
    MNEMO_RETURN_IF_ERROR(in.i32s("block id", n_blocks, s.block_table));
    MNEMO_ASSIGN_OR_RETURN(const uint32_t n_tokens, in.count("tokens", limits.max_tokens, 4));
    tokens += n_tokens;
    if (tokens > limits.max_tokens) return make_error("stage frame: {} tokens exceed the limit of {}", tokens, limits.max_tokens);
    MNEMO_RETURN_IF_ERROR(in.i32s("token", n_tokens, s.tokens));
  }
  const uint64_t row_bytes = tokens * static_cast<uint64_t>(frame.n_embd) * 4;
  if (row_bytes > limits.max_row_bytes) {
    return make_error("stage frame: {} bytes of rows exceed the limit of {}", row_bytes, limits.max_row_bytes);
  }
  if (row_bytes != in.left()) {
    return make_error("stage frame: {} tokens of {} floats need {} bytes of rows, {} are left", tokens, frame.n_embd,
                      row_bytes, in.left());
  }
  frame.rows.resize(static_cast<size_t>(tokens) * static_cast<size_t>(frame.n_embd));
  for (float& v : frame.rows) {
    MNEMO_ASSIGN_OR_RETURN(const uint32_t bits, in.take<uint32_t>("row"));
    v = std::bit_cast<float>(bits);
  }
  return check_rows_frame(frame);
}

void encode_endpoints(const std::vector<std::string>& endpoints, Writer& out) {
  out.put<uint32_t>(static_cast<uint32_t>(endpoints.size()));
  for (const std::string& endpoint : endpoints) {
    out.put<uint16_t>(static_cast<uint16_t>(endpoint.size()));
    out.put_text(endpoint);
  }
}

Result<std::vector<std::string>> decode_endpoints(Reader& in, const StageFrameLimits& limits, std::string_view what) {
  MNEMO_ASSIGN_OR_RETURN(const uint32_t n, in.count(what, limits.max_route, 2));
  std::vector<std::string> endpoints;
  for (uint32_t i = 0; i < n; ++i) {
    MNEMO_ASSIGN_OR_RETURN(const uint16_t length, in.take<uint16_t>("endpoint length"));
    if (length == 0 || length > limits.max_endpoint_bytes) {
      return make_error("stage frame: an endpoint of {} bytes, outside 1..{}", length, limits.max_endpoint_bytes);
    }
    MNEMO_ASSIGN_OR_RETURN(std::string endpoint, in.text("endpoint", length));
    endpoints.push_back(std::move(endpoint));
  }
  return endpoints;
}

void encode_kv(const StageFrame& frame, Writer& out) {
  const StageKv& kv = frame.kv;
  out.put<int32_t>(kv.layer_begin);
  out.put<int32_t>(kv.layer_end);
  out.put<uint8_t>(kv.replica ? 1 : 0);
  out.put<int32_t>(kv.kv_heads);
  if (frame.kind == StageFrameKind::kPull) {
    out.put<uint32_t>(static_cast<uint32_t>(frame.blocks.size()));
    for (BlockId b : frame.blocks) out.put<int32_t>(b);
    return;
  }
  if (frame.kind != StageFrameKind::kKv && frame.kind != StageFrameKind::kPush) return;
  out.put<uint32_t>(static_cast<uint32_t>(kv.slots.size()));
  for (const auto& [block, slot] : kv.slots) {
    out.put<int32_t>(block);
    out.put<int32_t>(slot);
  }
  out.put<uint32_t>(kv.token_bytes);
  out.put_bytes(kv.bytes);
}

Status decode_kv(Reader& in, const StageFrameLimits& limits, StageFrame& frame) {
  StageKv& kv = frame.kv;
  MNEMO_ASSIGN_OR_RETURN(kv.layer_begin, in.take<int32_t>("layer_begin"));
  MNEMO_ASSIGN_OR_RETURN(kv.layer_end, in.take<int32_t>("layer_end"));
  if (kv.layer_begin < 0 || kv.layer_begin >= kv.layer_end) {
    return make_error("stage frame: layers [{}, {}) are not a range", kv.layer_begin, kv.layer_end);
  }
  MNEMO_ASSIGN_OR_RETURN(const uint8_t replica, in.take<uint8_t>("replica flag"));
  if (replica > 1) return make_error("stage frame: replica flag {}", replica);
  kv.replica = replica == 1;
  MNEMO_ASSIGN_OR_RETURN(kv.kv_heads, in.take<int32_t>("kv heads"));
  if (kv.kv_heads < 0 || kv.kv_heads > 4096) return make_error("stage frame: {} KV heads", kv.kv_heads);
  if (frame.kind == StageFrameKind::kPull) {
    MNEMO_ASSIGN_OR_RETURN(const uint32_t n_blocks, in.count("pulled blocks", limits.max_block_ops, 4));
    return in.i32s("pulled block", n_blocks, frame.blocks);
  }
  if (frame.kind != StageFrameKind::kKv && frame.kind != StageFrameKind::kPush) return ok_status();
  MNEMO_ASSIGN_OR_RETURN(const uint32_t n_slots, in.count("slots", limits.max_slots, 8));
  kv.slots.resize(n_slots);
  for (auto& [block, slot] : kv.slots) {
    MNEMO_ASSIGN_OR_RETURN(block, in.take<int32_t>("block"));
    MNEMO_ASSIGN_OR_RETURN(slot, in.take<int32_t>("slot"));
  }
  MNEMO_ASSIGN_OR_RETURN(kv.token_bytes, in.take<uint32_t>("token bytes"));
  if (kv.token_bytes == 0 || kv.token_bytes > limits.max_token_bytes) {
    return make_error("stage frame: {} bytes of KV a token, outside 1..{}", kv.token_bytes, limits.max_token_bytes);
  }
  const uint64_t bytes = uint64_t{n_slots} * kv.token_bytes;
  if (bytes > limits.max_kv_bytes || bytes != in.left()) {
    return make_error("stage frame: {} slots of {} bytes of KV need {} bytes, {} are left", n_slots, kv.token_bytes, bytes,
                      in.left());
  }
  in.bytes(static_cast<size_t>(bytes), kv.bytes);  // exactly what is left
  return ok_status();
}

}  // namespace

uint32_t token_kv_bytes(const KvLayout& layout, int32_t n_layers) {
  return static_cast<uint32_t>(static_cast<size_t>(n_layers) * static_cast<size_t>(layout.n_kv_heads) *
                               static_cast<size_t>(layout.head_dim_k + layout.head_dim_v) * layout.element_bytes());
}

std::vector<uint8_t> encode_stage_frame(const StageFrame& frame) {
  Writer out;
  out.put<uint32_t>(kStageFrameMagic);
  out.put<uint32_t>(kStageFrameVersion);
  out.put<uint32_t>(static_cast<uint32_t>(frame.kind));
  out.put<uint64_t>(frame.step);
  out.put<uint32_t>(frame.microbatch);
  encode_endpoints(frame.route, out);
  encode_endpoints(frame.replicas, out);
  switch (frame.kind) {
    case StageFrameKind::kSetup:
      out.put<uint64_t>(frame.setup.model_fingerprint);
      out.put<int32_t>(frame.setup.layer_begin);
      out.put<int32_t>(frame.setup.layer_end);
      out.put<int32_t>(frame.setup.block_size);
      out.put<int32_t>(frame.setup.n_blocks);
      out.put<uint32_t>(static_cast<uint32_t>(frame.setup.kv_dtype));
      out.put<int32_t>(frame.setup.tensor_rank);
      out.put<int32_t>(frame.setup.tensor_ranks);
      break;
    case StageFrameKind::kTensorRows:
      out.put<int32_t>(frame.tensor_layer);
      out.put<uint8_t>(frame.tensor_part);
      encode_rows(frame, out);
      break;
    case StageFrameKind::kRows:
      encode_rows(frame, out);
      break;
    case StageFrameKind::kError:
      out.put<uint32_t>(static_cast<uint32_t>(frame.error.size()));
      out.put_text(frame.error);
      break;
    case StageFrameKind::kKv:
    case StageFrameKind::kRestore:
    case StageFrameKind::kPush:
    case StageFrameKind::kPull:
      encode_kv(frame, out);
      break;
    case StageFrameKind::kCopy:
      out.put<uint32_t>(static_cast<uint32_t>(frame.block_copies.size()));
      for (const auto& [from, to] : frame.block_copies) {
        out.put<int32_t>(from);
        out.put<int32_t>(to);
      }
      break;
    case StageFrameKind::kPing:
    case StageFrameKind::kRestored:
      break;
  }
  return out.take();
}

Result<StageFrame> decode_stage_frame(std::span<const uint8_t> bytes, const StageFrameLimits& limits) {
  Reader in(bytes);
  StageFrame frame;
  MNEMO_ASSIGN_OR_RETURN(const uint32_t magic, in.take<uint32_t>("magic"));
  if (magic != kStageFrameMagic) return make_error("not a stage frame (magic {:#010x})", magic);
  MNEMO_ASSIGN_OR_RETURN(const uint32_t version, in.take<uint32_t>("version"));
  if (version != kStageFrameVersion) return make_error("stage frame version {}, this build speaks {}", version, kStageFrameVersion);
  MNEMO_ASSIGN_OR_RETURN(const uint32_t kind, in.take<uint32_t>("kind"));
  if (kind < 1 || kind > kLastStageFrameKind) return make_error("stage frame kind {} is not one of 1..{}", kind, kLastStageFrameKind);
  frame.kind = static_cast<StageFrameKind>(kind);
  MNEMO_ASSIGN_OR_RETURN(frame.step, in.take<uint64_t>("step"));
  MNEMO_ASSIGN_OR_RETURN(frame.microbatch, in.take<uint32_t>("microbatch"));
  MNEMO_ASSIGN_OR_RETURN(frame.route, decode_endpoints(in, limits, "route endpoints"));
  MNEMO_ASSIGN_OR_RETURN(frame.replicas, decode_endpoints(in, limits, "replica endpoints"));
  switch (frame.kind) {
    case StageFrameKind::kSetup: {
      StageSetup& s = frame.setup;
      MNEMO_ASSIGN_OR_RETURN(s.model_fingerprint, in.take<uint64_t>("model fingerprint"));
      MNEMO_ASSIGN_OR_RETURN(s.layer_begin, in.take<int32_t>("layer_begin"));
      MNEMO_ASSIGN_OR_RETURN(s.layer_end, in.take<int32_t>("layer_end"));
      MNEMO_ASSIGN_OR_RETURN(s.block_size, in.take<int32_t>("block_size"));
      MNEMO_ASSIGN_OR_RETURN(s.n_blocks, in.take<int32_t>("n_blocks"));
      MNEMO_ASSIGN_OR_RETURN(const uint32_t dtype, in.take<uint32_t>("kv dtype"));
      if (!valid_dtype(dtype)) return make_error("stage setup: KV element type {} is neither F16 nor F32", dtype);
      s.kv_dtype = static_cast<DType>(dtype);
      MNEMO_ASSIGN_OR_RETURN(s.tensor_rank, in.take<int32_t>("tensor rank"));
      MNEMO_ASSIGN_OR_RETURN(s.tensor_ranks, in.take<int32_t>("tensor ranks"));
      if (s.layer_begin < 0 || s.layer_begin >= s.layer_end || s.block_size <= 0 || s.n_blocks <= 0 || s.tensor_ranks < 1 ||
          s.tensor_ranks > 4096 || s.tensor_rank < 0 || s.tensor_rank >= s.tensor_ranks) {
        return make_error("stage setup: layers [{}, {}), blocks of {} tokens, {} blocks, tensor rank {} of {}: not a stage",
                          s.layer_begin, s.layer_end, s.block_size, s.n_blocks, s.tensor_rank, s.tensor_ranks);
      }
      break;
    }
    case StageFrameKind::kTensorRows: {
      MNEMO_ASSIGN_OR_RETURN(frame.tensor_layer, in.take<int32_t>("tensor layer"));
      MNEMO_ASSIGN_OR_RETURN(frame.tensor_part, in.take<uint8_t>("tensor part"));
      if (frame.tensor_layer < 0 || frame.tensor_part > 1) {
        return make_error("stage frame: tensor layer {} part {}", frame.tensor_layer, frame.tensor_part);
      }
      MNEMO_RETURN_IF_ERROR(decode_rows(in, limits, frame));
      break;
    }
    case StageFrameKind::kRows:
      MNEMO_RETURN_IF_ERROR(decode_rows(in, limits, frame));
      break;
    case StageFrameKind::kError: {
      MNEMO_ASSIGN_OR_RETURN(const uint32_t length, in.count("error bytes", limits.max_error_bytes, 1));
      MNEMO_ASSIGN_OR_RETURN(frame.error, in.text("error", length));
      break;
    }
    case StageFrameKind::kKv:
    case StageFrameKind::kRestore:
    case StageFrameKind::kPush:
    case StageFrameKind::kPull:
      MNEMO_RETURN_IF_ERROR(decode_kv(in, limits, frame));
      break;
    case StageFrameKind::kCopy: {
      MNEMO_ASSIGN_OR_RETURN(const uint32_t n, in.count("block copies", limits.max_block_ops, 8));
      frame.block_copies.resize(n);
      for (auto& [from, to] : frame.block_copies) {
        MNEMO_ASSIGN_OR_RETURN(from, in.take<int32_t>("copied block"));
        MNEMO_ASSIGN_OR_RETURN(to, in.take<int32_t>("copy's block"));
      }
      break;
    }
    case StageFrameKind::kPing:
    case StageFrameKind::kRestored:
      break;
  }
  if (in.left() != 0) return make_error("stage frame: {} bytes after its end", in.left());
  return frame;
}

std::vector<SequenceInput> frame_sequences(const Batch& batch, size_t begin, size_t end) {
  std::vector<SequenceInput> sequences;
  for (size_t s = begin; s < end; ++s) {
    const SequenceInput& in = batch.sequences[s];
    SequenceInput seq;
    seq.tokens = in.tokens;
    seq.ranges = in.ranges;
    seq.block_table = in.block_table;
    seq.logits = LogitsFor::kNone;
    sequences.push_back(std::move(seq));
  }
  return sequences;
}

Status check_rows_frame(const StageFrame& frame) {
  if (frame.kind != StageFrameKind::kRows && frame.kind != StageFrameKind::kTensorRows) return make_error("not a rows frame");
  size_t tokens = 0;
  for (size_t s = 0; s < frame.sequences.size(); ++s) {
    const SequenceInput& seq = frame.sequences[s];
    int64_t covered = 0;
    for (const QueryRange& r : seq.ranges) covered += r.length;
    if (covered != static_cast<int64_t>(seq.tokens.size())) {
      return make_error("stage frame sequence {}: {} tokens for ranges covering {}", s, seq.tokens.size(), covered);
    }
    tokens += seq.tokens.size();
  }
  if (frame.n_embd <= 0 || frame.rows.size() != tokens * static_cast<size_t>(frame.n_embd)) {
    return make_error("stage frame: {} floats of rows for {} tokens of {}", frame.rows.size(), tokens, frame.n_embd);
  }
  return ok_status();
}

}  // namespace mnemo::parallel
