#include "kernels/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

}  // namespace

void paged_attention(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
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
