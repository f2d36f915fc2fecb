#include "kernels/nn/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/nn/attention_tile.h"
#include "kernels/nn/f16_ops.h"
#include "util/fp16.h"

namespace mnemo::kernels {
namespace {

// Per-thread buffers: the query heads being processed (rounded through F16, as llama.cpp does
// before its K.Q dot products), their output accumulators and softmax state.
struct GroupScratch {
  std::vector<float> q, acc, running_max, running_sum;
  void resize(int32_t heads, const AttentionShape& s) {
    q.resize(static_cast<size_t>(heads) * s.head_dim_k);
    acc.resize(static_cast<size_t>(heads) * s.head_dim_v);
    running_max.resize(static_cast<size_t>(heads));
    running_sum.resize(static_cast<size_t>(heads));
  }
};

// Dot products and accumulation against the pool's element type. F16: the query is rounded
// through F16 first, as llama.cpp does before its K.Q products; F32: everything stays F32.
struct F16Elements {
  using Element = uint16_t;
  const F16Ops& ops;
  float round_query(float x) const { return fp16_to_fp32(fp32_to_fp16(x)); }
  float dot(const float* q, const Element* k, int64_t n) const { return ops.dot_f32_f16(q, k, n); }
  void axpy(float w, const Element* v, float* acc, int64_t n) const { ops.axpy_f16(w, v, acc, n); }
};
struct F32Elements {
  using Element = float;
  float round_query(float x) const { return x; }
  float dot(const float* q, const Element* k, int64_t n) const {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += q[i] * k[i];
    return sum;
  }
  void axpy(float w, const Element* v, float* acc, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) acc[i] += w * v[i];
  }
};

// Attention of query heads [head_begin, head_begin + n) for one query token; they all share kv
// head `kv_head`, so each key and value row is loaded once for all of them.
template <class Elements>
void attend_heads(const AttentionQuery& query, const KvStorage& kv, int32_t layer, int32_t kv_head,
                  int32_t head_begin, int32_t n, const AttentionShape& s, const Elements& ops) {
  using Element = typename Elements::Element;
  thread_local GroupScratch scratch;
  scratch.resize(n, s);
  const int32_t block_size = kv.layout().block_size;
  const int32_t hi = query.position;
  const int32_t lo = s.sliding_window > 0 ? std::max(0, hi - s.sliding_window + 1) : 0;

  const auto q = [&](int32_t g) { return scratch.q.data() + static_cast<int64_t>(g) * s.head_dim_k; };
  const auto acc = [&](int32_t g) { return scratch.acc.data() + static_cast<int64_t>(g) * s.head_dim_v; };
  float* running_max = scratch.running_max.data();
  float* running_sum = scratch.running_sum.data();
  for (int32_t g = 0; g < n; ++g) {
    const float* src = query.q + static_cast<int64_t>(head_begin + g) * s.head_dim_k;
    for (int32_t d = 0; d < s.head_dim_k; ++d) q(g)[d] = ops.round_query(src[d]);
    std::fill_n(acc(g), s.head_dim_v, 0.0f);
    running_max[g] = -std::numeric_limits<float>::infinity();
    running_sum[g] = 0.0f;
  }

  for (int32_t block_index = lo / block_size; block_index <= hi / block_size; ++block_index) {
    const BlockId block = query.block_table[static_cast<size_t>(block_index)];
    const auto* keys = static_cast<const Element*>(kv.keys(block, layer, kv_head));
    const auto* values = static_cast<const Element*>(kv.values(block, layer, kv_head));
    const int32_t first = std::max(lo, block_index * block_size);
    const int32_t last = std::min(hi, block_index * block_size + block_size - 1);
    for (int32_t pos = first; pos <= last; ++pos) {
      const int32_t slot = pos - block_index * block_size;
      const Element* k = keys + static_cast<int64_t>(slot) * s.head_dim_k;
      const Element* v = values + static_cast<int64_t>(slot) * s.head_dim_v;
      for (int32_t g = 0; g < n; ++g) {
        float score = ops.dot(q(g), k, s.head_dim_k) * s.scale;
        if (s.softcap > 0.0f) score = s.softcap * std::tanh(score / s.softcap);
        // Online softmax: rescale what was accumulated when a new maximum appears.
        if (score > running_max[g]) {
          const float correction = std::exp(running_max[g] - score);
          running_sum[g] *= correction;
          for (int32_t d = 0; d < s.head_dim_v; ++d) acc(g)[d] *= correction;
          running_max[g] = score;
        }
        const float weight = std::exp(score - running_max[g]);
        running_sum[g] += weight;
        ops.axpy(weight, v, acc(g), s.head_dim_v);
      }
    }
  }
  for (int32_t g = 0; g < n; ++g) {
    float* out = query.out + static_cast<int64_t>(head_begin + g) * s.head_dim_v;
    const float inv = running_sum[g] > 0.0f ? 1.0f / running_sum[g] : 0.0f;
    for (int32_t d = 0; d < s.head_dim_v; ++d) out[d] = acc(g)[d] * inv;
  }
}

// ---- The tiled path (AVX-512): see attention_tile.h for the canonical order.

using attention_tile::kChunkPositions;
using attention_tile::kSubBlockPositions;

constexpr int32_t kTileQueries = 8;  // query tokens of one sequence per tile

// Consecutive queries of one sequence at consecutive positions.
struct Tile {
  int32_t first_query;
  int32_t n_queries;
  int32_t lo, hi;  // the union of the queries' ranges
};

struct TileScratch {
  std::vector<float> q, acc, keys, values, weights, total;
  std::vector<uint16_t> half;
  std::vector<attention_tile::Row> rows;
  std::vector<attention_tile::SubBlock> blocks;
};

int32_t range_lo(int32_t position, const AttentionShape& s) {
  return s.sliding_window > 0 ? std::max(0, position - s.sliding_window + 1) : 0;
}

std::vector<Tile> make_tiles(std::span<const AttentionQuery> queries, const AttentionShape& s) {
  std::vector<Tile> tiles;
  for (int32_t i = 0; i < static_cast<int32_t>(queries.size()); ++i) {
    const AttentionQuery& q = queries[static_cast<size_t>(i)];
    if (!tiles.empty()) {
      Tile& last = tiles.back();
      const AttentionQuery& prev = queries[static_cast<size_t>(i - 1)];
      if (last.n_queries < kTileQueries && q.block_table.data() == prev.block_table.data() &&
          q.block_table.size() == prev.block_table.size() && q.position == prev.position + 1) {
        ++last.n_queries;
        last.hi = q.position;
        continue;
      }
    }
    tiles.push_back({i, 1, range_lo(q.position, s), q.position});
  }
  return tiles;
}

// A row's state for one chunk, as stored between the two passes of a split context: max, sum,
// then the accumulator.
size_t state_floats(const AttentionShape& s) { return 2 + static_cast<size_t>(s.head_dim_v); }

// total = merge(total, chunk), in chunk order; an empty chunk (sum 0) changes nothing and an
// empty total takes the chunk as it is.
void merge_state(float* total, float chunk_max, float chunk_sum, const float* chunk_acc, int32_t dim) {
  if (chunk_sum == 0.0f) return;
  if (total[1] == 0.0f) {
    total[0] = chunk_max;
    total[1] = chunk_sum;
    std::copy(chunk_acc, chunk_acc + dim, total + 2);
    return;
  }
  const float max = std::max(total[0], chunk_max);
  const float a = std::exp(total[0] - max);
  const float b = std::exp(chunk_max - max);
  total[0] = max;
  total[1] = total[1] * a + chunk_sum * b;
  for (int32_t d = 0; d < dim; ++d) total[2 + d] = total[2 + d] * a + chunk_acc[d] * b;
}

void finish_row(const float* total, float* out, int32_t dim) {
  const float inv = total[1] > 0.0f ? 1.0f / total[1] : 0.0f;
  for (int32_t d = 0; d < dim; ++d) out[d] = total[2 + d] * inv;
}

struct TiledJob {
  std::span<const AttentionQuery> queries;
  const KvStorage& kv;
  int32_t layer;
  const AttentionShape& shape;
  attention_tile::AttendFn attend;

  int32_t group() const { return shape.n_heads / shape.n_kv_heads; }

  // Attends the tile's queries with heads [head_begin, head_begin + n_heads) (one KV head) to
  // chunks [first_chunk, last_chunk]. With `partial`, each chunk's row states are stored there
  // ([chunk][row][state]); otherwise they are merged and the outputs written.
  void run(const Tile& tile, int32_t head_begin, int32_t n_heads, int32_t first_chunk, int32_t last_chunk,
           float* partial) const {
    thread_local TileScratch scratch;
    const AttentionShape& s = shape;
    const int32_t kv_head = head_begin / group();
    const int n_rows = tile.n_queries * n_heads;
    const size_t state = state_floats(s);
    scratch.q.resize(static_cast<size_t>(n_rows) * s.head_dim_k);
    scratch.acc.resize(static_cast<size_t>(n_rows) * s.head_dim_v);
    scratch.keys.resize(static_cast<size_t>(kSubBlockPositions) * s.head_dim_k);
    scratch.values.resize(static_cast<size_t>(kSubBlockPositions) * s.head_dim_v);
    scratch.weights.resize(static_cast<size_t>(kSubBlockPositions) * static_cast<size_t>(n_rows));
    scratch.rows.resize(static_cast<size_t>(n_rows));
    if (partial == nullptr) scratch.total.assign(static_cast<size_t>(n_rows) * state, 0.0f);
    const bool f16 = kv.layout().dtype != DType::F32;
    for (int32_t qi = 0; qi < tile.n_queries; ++qi) {
      const AttentionQuery& query = queries[static_cast<size_t>(tile.first_query + qi)];
      for (int32_t h = 0; h < n_heads; ++h) {
        const int r = qi * n_heads + h;
        float* q = scratch.q.data() + static_cast<size_t>(r) * s.head_dim_k;
        const float* src = query.q + static_cast<int64_t>(head_begin + h) * s.head_dim_k;
        // Rounded through F16 for an F16 pool, as llama.cpp does before its K.Q products.
        if (f16) {
          scratch.half.resize(static_cast<size_t>(s.head_dim_k));
          f16_ops().to_f16(src, scratch.half.data(), s.head_dim_k);
          f16_ops().from_f16(scratch.half.data(), q, s.head_dim_k);
        } else {
          std::copy(src, src + s.head_dim_k, q);
        }
        scratch.rows[static_cast<size_t>(r)].q = q;
        scratch.rows[static_cast<size_t>(r)].lo = range_lo(query.position, s);
        scratch.rows[static_cast<size_t>(r)].hi = query.position;
        scratch.rows[static_cast<size_t>(r)].acc = scratch.acc.data() + static_cast<size_t>(r) * s.head_dim_v;
      }
    }
    const attention_tile::Params params{s.head_dim_k, s.head_dim_v, s.scale, s.softcap, f16};
    const std::span<const BlockId> table = queries[static_cast<size_t>(tile.first_query)].block_table;
    const int32_t block_size = kv.layout().block_size;
    const size_t element = kv.layout().element_bytes();
    for (int32_t c = first_chunk; c <= last_chunk; ++c) {
      const int32_t first = std::max(tile.lo, c * kChunkPositions);
      const int32_t last = std::min(tile.hi, c * kChunkPositions + kChunkPositions - 1);
      for (attention_tile::Row& row : scratch.rows) {
        std::fill_n(row.acc, s.head_dim_v, 0.0f);
        row.max = -std::numeric_limits<float>::infinity();
        row.sum = 0.0f;
      }
      scratch.blocks.clear();
      for (int32_t start = first / kSubBlockPositions * kSubBlockPositions; start <= last; start += kSubBlockPositions) {
        attention_tile::SubBlock& block = scratch.blocks.emplace_back();
        block.first_position = start;
        for (int32_t i = 0; i < kSubBlockPositions; ++i) {
          const int32_t pos = start + i;
          if (pos < first || pos > last) {
            block.keys[i] = block.values[i] = nullptr;
            continue;
          }
          const BlockId id = table[static_cast<size_t>(pos / block_size)];
          const size_t slot = static_cast<size_t>(pos % block_size);
          block.keys[i] = static_cast<const uint8_t*>(kv.keys(id, layer, kv_head)) + slot * s.head_dim_k * element;
          block.values[i] = static_cast<const uint8_t*>(kv.values(id, layer, kv_head)) + slot * s.head_dim_v * element;
        }
      }
      if (first <= last) {
        attend(scratch.rows.data(), n_rows, scratch.blocks.data(), static_cast<int>(scratch.blocks.size()), params,
               scratch.keys.data(), scratch.values.data(), scratch.weights.data());
      }
      for (int r = 0; r < n_rows; ++r) {
        const attention_tile::Row& row = scratch.rows[static_cast<size_t>(r)];
        float* dst = partial != nullptr ? partial + (static_cast<size_t>(c - first_chunk) * n_rows + r) * state
                                        : scratch.total.data() + static_cast<size_t>(r) * state;
        if (partial != nullptr) {
          dst[0] = row.max;
          dst[1] = row.sum;
          std::copy(row.acc, row.acc + s.head_dim_v, dst + 2);
        } else {
          merge_state(dst, row.max, row.sum, row.acc, s.head_dim_v);
        }
      }
    }
    if (partial == nullptr) {
      for (int r = 0; r < n_rows; ++r) finish_row(scratch.total.data() + static_cast<size_t>(r) * state, output(tile, head_begin, n_heads, r), s.head_dim_v);
    }
  }

  float* output(const Tile& tile, int32_t head_begin, int32_t n_heads, int r) const {
    const AttentionQuery& query = queries[static_cast<size_t>(tile.first_query + r / n_heads)];
    return query.out + static_cast<int64_t>(head_begin + r % n_heads) * shape.head_dim_v;
  }
};

int32_t chunk_of(int32_t position) { return position / kChunkPositions; }

void paged_attention_tiled(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
                           const AttentionShape& shape, ThreadPool& pool, attention_tile::AttendFn attend) {
  const std::vector<Tile> tiles = make_tiles(queries, shape);
  const TiledJob job{queries, kv, layer, shape, attend};
  const int32_t group = job.group();
  const int64_t n_tiles = static_cast<int64_t>(tiles.size());
  const int64_t enough = 2 * pool.size();
  // Work items: (tile, KV head) so the heads of a group share each K/V conversion; with too few
  // of those, (tile, head); with still too few and long contexts, (tile, head, chunk), merged in
  // a second pass. All three give the same bits (attention_tile.h).
  const int32_t heads_per_item = n_tiles * shape.n_kv_heads >= enough ? group : 1;
  const int32_t items_per_tile = shape.n_heads / heads_per_item;
  int32_t max_chunks = 1;
  for (const Tile& t : tiles) max_chunks = std::max(max_chunks, chunk_of(t.hi) - chunk_of(t.lo) + 1);
  if (n_tiles * items_per_tile >= enough || max_chunks == 1) {
    pool.parallel_for(n_tiles * items_per_tile, [&](int64_t begin, int64_t end, int) {
      for (int64_t item = begin; item < end; ++item) {
        const Tile& tile = tiles[static_cast<size_t>(item / items_per_tile)];
        const int32_t head_begin = static_cast<int32_t>(item % items_per_tile) * heads_per_item;
        job.run(tile, head_begin, heads_per_item, chunk_of(tile.lo), chunk_of(tile.hi), nullptr);
      }
    });
    return;
  }
  // Flash-decoding: split each context into its chunks across the threads.
  struct Piece {
    int32_t tile, head, chunk;
    size_t offset;  // into partial
  };
  std::vector<Piece> pieces;
  std::vector<size_t> first_piece;  // per (tile, head)
  const size_t state = state_floats(shape);
  size_t floats = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(n_tiles); ++t) {
    const Tile& tile = tiles[static_cast<size_t>(t)];
    for (int32_t h = 0; h < shape.n_heads; ++h) {
      first_piece.push_back(pieces.size());
      for (int32_t c = chunk_of(tile.lo); c <= chunk_of(tile.hi); ++c) {
        pieces.push_back({t, h, c, floats});
        floats += static_cast<size_t>(tile.n_queries) * state;
      }
    }
  }
  first_piece.push_back(pieces.size());
  // Kept by the calling thread across calls; the workers see it through this pointer (a
  // thread_local named in the lambdas would be each worker's own).
  thread_local std::vector<float> partial_storage;
  partial_storage.resize(floats);
  float* const partial = partial_storage.data();
  pool.parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const Piece& piece = pieces[static_cast<size_t>(i)];
      job.run(tiles[static_cast<size_t>(piece.tile)], piece.head, 1, piece.chunk, piece.chunk, partial + piece.offset);
    }
  });
  pool.parallel_for(static_cast<int64_t>(first_piece.size()) - 1, [&](int64_t begin, int64_t end, int) {
    std::vector<float> total(state);
    for (int64_t g = begin; g < end; ++g) {
      const Piece& head_piece = pieces[first_piece[static_cast<size_t>(g)]];
      const Tile& tile = tiles[static_cast<size_t>(head_piece.tile)];
      for (int32_t qi = 0; qi < tile.n_queries; ++qi) {
        std::fill(total.begin(), total.end(), 0.0f);
        for (size_t p = first_piece[static_cast<size_t>(g)]; p < first_piece[static_cast<size_t>(g) + 1]; ++p) {
          const float* chunk = partial + pieces[p].offset + static_cast<size_t>(qi) * state;
          merge_state(total.data(), chunk[0], chunk[1], chunk + 2, shape.head_dim_v);
        }
        finish_row(total.data(), job.output(tile, head_piece.head, 1, qi), shape.head_dim_v);
      }
    }
  });
}

attention_tile::AttendFn tiled_kernel(Isa isa) {
  return isa == Isa::kAvx512 && isa_supported(Isa::kAvx512) ? attention_avx512::attend : nullptr;
}

}  // namespace

void paged_attention(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
                     const AttentionShape& shape, ThreadPool& pool) {
  static const attention_tile::AttendFn attend = tiled_kernel(detected_isa());
  if (attend != nullptr) {
    paged_attention_tiled(queries, kv, layer, shape, pool, attend);
  } else {
    paged_attention_reference(queries, kv, layer, shape, pool);
  }
}

bool paged_attention_has_tiles(Isa isa) { return tiled_kernel(isa) != nullptr; }

void paged_attention_tiled(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
                           const AttentionShape& shape, ThreadPool& pool, Isa isa) {
  const attention_tile::AttendFn attend = tiled_kernel(isa);
  assert(attend != nullptr);
  paged_attention_tiled(queries, kv, layer, shape, pool, attend);
}

void paged_attention_reference(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
                               const AttentionShape& shape, ThreadPool& pool) {
  const F16Elements f16{f16_ops()};
  const F32Elements f32;
  const bool f32_pool = kv.layout().dtype == DType::F32;
  const int32_t group = shape.n_heads / shape.n_kv_heads;
  // Work items are (query, kv head) so a group shares its K/V loads; with too few of those to
  // keep every thread busy (decode of a model with one KV head), split by query head instead.
  const bool split_groups = static_cast<int64_t>(queries.size()) * shape.n_kv_heads < 2 * pool.size();
  const int32_t heads_per_item = split_groups ? 1 : group;
  const int32_t items_per_query = shape.n_heads / heads_per_item;
  const int64_t n_items = static_cast<int64_t>(queries.size()) * items_per_query;
  pool.parallel_for(n_items, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const AttentionQuery& query = queries[static_cast<size_t>(item / items_per_query)];
      const int32_t head_begin = static_cast<int32_t>(item % items_per_query) * heads_per_item;
      if (f32_pool) {
        attend_heads(query, kv, layer, head_begin / group, head_begin, heads_per_item, shape, f32);
      } else {
        attend_heads(query, kv, layer, head_begin / group, head_begin, heads_per_item, shape, f16);
      }
    }
  });
}

}  // namespace mnemo::kernels
