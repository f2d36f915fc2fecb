#include "model/tensor_shard.h"

#include "model/weights.h"

#include <cstring>

#include <fmt/format.h>

namespace mnemo {
namespace {

// [begin, end) of part `i` of `n` over `count` items, as even as they go.
std::pair<int32_t, int32_t> even_part(int32_t count, int32_t i, int32_t n) {
  const int32_t begin = count / n * i + std::min(i, count % n);
  return {begin, begin + count / n + (i < count % n ? 1 : 0)};
}

// Rows [begin, end) of `m`: a view of the file's rows.
WeightMatrix row_slice(const WeightMatrix& m, int64_t begin, int64_t end) {
  WeightMatrix s = m;
  s.data = m.data + static_cast<size_t>(begin) * m.row_bytes();
  s.out_features = end - begin;
  s.tiles = nullptr;
  return s;
}

// Columns [begin, end) of every row of `m`, copied into `bytes`.
Result<WeightMatrix> column_slice(const WeightMatrix& m, int64_t begin, int64_t end, std::vector<uint8_t>& bytes,
                                  const std::string& name) {
  const DTypeInfo info = dtype_info(m.type);
  if (begin % info.block_elems != 0 || end % info.block_elems != 0) {
    return make_error("{}: columns [{}, {}) are not whole blocks of {} ({} elements)", name, begin, end, info.name, info.block_elems);
  }
  const size_t from = static_cast<size_t>(begin / info.block_elems) * info.block_bytes;
  const size_t width = static_cast<size_t>((end - begin) / info.block_elems) * info.block_bytes;
  bytes.resize(width * static_cast<size_t>(m.out_features));
  for (int64_t r = 0; r < m.out_features; ++r) {
    std::memcpy(bytes.data() + static_cast<size_t>(r) * width, m.data + static_cast<size_t>(r) * m.row_bytes() + from, width);
  }
  WeightMatrix s = m;
  s.data = bytes.data();
  s.in_features = end - begin;
  s.tiles = nullptr;
  return s;
}

Vector vector_slice(const Vector& v, int64_t begin, int64_t end) {
  if (v.empty()) return v;
  return Vector(v.begin() + begin, v.begin() + end);
}

}  // namespace

Result<TensorShard> tensor_shard(const ModelConfig& c, int32_t rank, int32_t ranks, int32_t ff_unit) {
  if (ranks < 1 || rank < 0 || rank >= ranks) return make_error("tensor rank {} of {}", rank, ranks);
  TensorShard s;
  s.rank = rank;
  s.ranks = ranks;
  const int32_t group = c.n_heads / c.n_kv_heads;
  if (ranks <= c.n_kv_heads) {
    std::tie(s.kv_begin, s.kv_end) = even_part(c.n_kv_heads, rank, ranks);
    s.q_begin = s.kv_begin * group;
    s.q_end = s.kv_end * group;
  } else {
    const int32_t per_kv = ranks / c.n_kv_heads;
    if (ranks % c.n_kv_heads != 0 || group % per_kv != 0) {
      return make_error("{} query heads in {} KV groups do not split over {} ranks: more ranks than KV heads must be a "
                        "multiple of them that divides a group",
                        c.n_heads, c.n_kv_heads, ranks);
    }
    s.kv_begin = rank / per_kv;
    s.kv_end = s.kv_begin + 1;
    s.q_begin = s.kv_begin * group + rank % per_kv * (group / per_kv);
    s.q_end = s.q_begin + group / per_kv;
  }
  if (ff_unit < 1 || c.n_ff % ff_unit != 0 || c.n_ff / ff_unit < ranks) {
    return make_error("{} feed-forward rows do not split over {} ranks in blocks of {}", c.n_ff, ranks, ff_unit);
  }
  const auto [unit_begin, unit_end] = even_part(c.n_ff / ff_unit, rank, ranks);
  s.ff_begin = unit_begin * ff_unit;
  s.ff_end = unit_end * ff_unit;
  return s;
}

ModelConfig shard_config(const ModelConfig& config, const TensorShard& shard) {
  ModelConfig c = config;
  c.n_heads = shard.q_end - shard.q_begin;
  c.n_kv_heads = shard.kv_end - shard.kv_begin;
  c.n_ff = shard.ff_end - shard.ff_begin;
  return c;
}

Status slice_for_shard(const ModelConfig& c, const TensorShard& s, int32_t layer_begin, int32_t layer_end, ModelWeights& w) {
  const int64_t dk = c.head_dim_k, dv = c.head_dim_v;
  for (int32_t il = layer_begin; il < layer_end; ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    const std::string p = fmt::format("blk.{}.", il);
    l.wq = row_slice(l.wq, s.q_begin * dk, s.q_end * dk);
    l.wk = row_slice(l.wk, s.kv_begin * dk, s.kv_end * dk);
    l.wv = row_slice(l.wv, s.kv_begin * dv, s.kv_end * dv);
    l.bq = vector_slice(l.bq, s.q_begin * dk, s.q_end * dk);
    l.bk = vector_slice(l.bk, s.kv_begin * dk, s.kv_end * dk);
    l.bv = vector_slice(l.bv, s.kv_begin * dv, s.kv_end * dv);
    w.sliced.emplace_back();
    MNEMO_ASSIGN_OR_RETURN(l.wo, column_slice(l.wo, s.q_begin * dv, s.q_end * dv, w.sliced.back(), p + "attn_output.weight"));
    l.w_gate = row_slice(l.w_gate, s.ff_begin, s.ff_end);
    l.w_up = row_slice(l.w_up, s.ff_begin, s.ff_end);
    l.b_gate = vector_slice(l.b_gate, s.ff_begin, s.ff_end);
    l.b_up = vector_slice(l.b_up, s.ff_begin, s.ff_end);
    // The output projections' biases join the sum once: rank 0's share carries them.
    if (s.rank != 0) {
      l.bo.clear();
      l.b_down.clear();
    }
    w.sliced.emplace_back();
    MNEMO_ASSIGN_OR_RETURN(l.w_down, column_slice(l.w_down, s.ff_begin, s.ff_end, w.sliced.back(), p + "ffn_down.weight"));
  }
  return ok_status();
}

}  // namespace mnemo
