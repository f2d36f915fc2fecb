// AVX-512 kernel of tiled paged attention (see attention_tile.h for the canonical order). Per
// sub-block of 16 positions, the keys and values are converted to F32 once and used by every row
// of the tile (the query tokens of a prefill chunk times the heads of a GQA group); a
// decode-shaped tile (the heads of a GQA group for one token) instead reads each key and value
// row of the pool once for four rows, converting it in registers. Head sizes 64, 128 and 256 are
// compiled with the size known.
//
// Per row and key, the score is a dot product with 16 lanes over the dimensions (lane l sums
// dimensions l, l + 16, ... by FMA in order), the lanes added by a fixed tree that handles 16 keys
// at once; the weights exp(score - max) are computed 16 at a time; each value row is added with
// one FMA per 16 dimensions. None of it depends on the other rows.
//
// Compiled with AVX-512 flags; everything here has internal linkage and touches no inline code
// of other headers (see avx2_helpers.h for why).
#include <immintrin.h>

#include <math.h>
#include <cstdint>
#include <cstring>

#include "kernels/nn/attention_tile.h"

namespace mnemo::kernels::attention_avx512 {
namespace {

using attention_tile::kSubBlockPositions;
using attention_tile::Params;
using attention_tile::Row;
using attention_tile::SubBlock;

static_assert(kSubBlockPositions == 16, "one key per lane");

constexpr int kMaxRows = 64;  // rows attended together per sub-block (bounds the stack arrays)

__mmask16 tail_mask(int32_t n, int32_t i) {
  return n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
}

// Loads and stores of 16 floats at p (or the masked first ones at the tail of a row). Masked
// stores are slow on Zen 4 even with a full mask, so full vectors use the plain instructions.
__m512 load16(const float* p, __mmask16 m) { return m == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p); }
__m512 load16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(m == 0xffff ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(m, p));
}
void store16(float* p, __mmask16 m, __m512 v) {
  if (m == 0xffff) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm512_mask_storeu_ps(p, m, v);
  }
}

// exp(x) lane-wise: x = n ln2 + r with |r| <= ln2 / 2, a degree-6 polynomial for e^r, times 2^n.
// Below -100 the result is 0 (the weights of masked keys are zeroed separately anyway).
__m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

float exp1(float x) { return _mm512_cvtss_f32(exp16(_mm512_set1_ps(x))); }

// The fixed tree over 16 lanes: halves, quarters, pairs.
float sum16(__m512 v) {
  const __m256 v8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
  return _mm_cvtss_f32(_mm_add_ss(v2, _mm_movehdup_ps(v2)));
}

// Lane k of the result = the sum of the 16 lanes of a[k], by the same tree for every k.
__m512 transpose_sum(const __m512* a) {
  __m512 s[8];
  for (int k = 0; k < 8; ++k) {
    s[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
  }
  __m512 t[4];
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 w[2];
  for (int k = 0; k < 2; ++k) {
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Where the keys and values of a sub-block are read from. A tile with several rows converts
// them to F32 once (Converted); one with few reads the pool directly (Direct), converting on
// the fly. The conversion is exact, so both give the same bits.
struct Converted {
  static constexpr bool kConverted = true;
  const float* data;
  int32_t dim;
  __m512 load(int k, int32_t i, __mmask16 m) const { return load16(data + k * dim + i, m); }
};
// The same for the head sizes of common models (Gemma 3: 256; Llama, Qwen: 128; small ones: 64),
// with the size known when compiling: the overloads of scores and add_values below for it take
// no masks and no branches and keep their accumulators in registers, with the operations of the
// general ones in the same order, so they give the same bits.
template <int kDim>
struct ConvertedFixed {
  static_assert(kDim % 16 == 0);
  static constexpr bool kConverted = true;
  const float* data;
};
struct Direct {
  static constexpr bool kConverted = false;
  const void* const* rows;  // null rows replaced by zeros
  bool f16;
  __m512 load(int k, int32_t i, __mmask16 m) const {
    return f16 ? load16(static_cast<const uint16_t*>(rows[k]) + i, m) : load16(static_cast<const float*>(rows[k]) + i, m);
  }
};

// Converts the present rows of a sub-block to F32 (absent ones to zero) into out[16][dim].
void load_rows(const void* const* rows, int32_t dim, bool f16, float* out) {
  const Direct source{rows, f16};
  for (int k = 0; k < kSubBlockPositions; ++k, out += dim) {
    if (rows[k] == nullptr) {
      std::memset(out, 0, static_cast<size_t>(dim) * sizeof(float));
      continue;
    }
    for (int32_t i = 0; i < dim; i += 16) {
      const __mmask16 m = tail_mask(dim, i);
      store16(out + i, m, source.load(k, i, m));
    }
  }
}

// The 16 scores of one row, lane k = key k.
template <class Source>
__m512 scores(const float* q, const Source& keys, int32_t dim) {
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int32_t i = 0; i < dim; i += 16) {
    const __mmask16 m = tail_mask(dim, i);
    const __m512 qv = load16(q + i, m);
    for (int k = 0; k < 16; ++k) acc[k] = _mm512_fmadd_ps(qv, keys.load(k, i, m), acc[k]);
  }
  return transpose_sum(acc);
}

template <int kDim>
__m512 scores(const float* q, const ConvertedFixed<kDim>& keys, int32_t) {
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int32_t i = 0; i < kDim; i += 16) {
    const __m512 qv = _mm512_loadu_ps(q + i);
    for (int k = 0; k < 16; ++k) acc[k] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(keys.data + k * kDim + i), acc[k]);
  }
  return transpose_sum(acc);
}

// acc[0, dim) += sum over keys k in [first, last] of weight[k] * values[k], keys in order; eight
// vectors of the row at a time stay in registers.
template <class Source>
void add_values(float* acc, const float* weight, const Source& values, int32_t dim, int first, int last) {
  constexpr int kVectors = 8;
  for (int32_t d0 = 0; d0 < dim; d0 += 16 * kVectors) {
    __m512 a[kVectors];
    __mmask16 m[kVectors];
    for (int v = 0; v < kVectors; ++v) {
      const int32_t i = d0 + 16 * v;
      m[v] = i < dim ? tail_mask(dim, i) : __mmask16(0);
      a[v] = m[v] != 0 ? load16(acc + i, m[v]) : _mm512_setzero_ps();
    }
    for (int k = first; k <= last; ++k) {
      const __m512 w = _mm512_set1_ps(weight[k]);
      for (int v = 0; v < kVectors; ++v) {
        if (m[v] != 0) a[v] = _mm512_fmadd_ps(w, values.load(k, d0 + 16 * v, m[v]), a[v]);
      }
    }
    for (int v = 0; v < kVectors; ++v) {
      if (m[v] != 0) store16(acc + d0 + 16 * v, m[v], a[v]);
    }
  }
}

template <int kDim>
void add_values(float* acc, const float* weight, const ConvertedFixed<kDim>& values, int32_t, int first, int last) {
  constexpr int kVectors = kDim < 128 ? kDim / 16 : 8;
  for (int32_t d0 = 0; d0 < kDim; d0 += 16 * kVectors) {
    __m512 a[kVectors];
    for (int v = 0; v < kVectors; ++v) a[v] = _mm512_loadu_ps(acc + d0 + 16 * v);
    for (int k = first; k <= last; ++k) {
      const __m512 w = _mm512_set1_ps(weight[k]);
      const float* row = values.data + k * kDim + d0;
      for (int v = 0; v < kVectors; ++v) a[v] = _mm512_fmadd_ps(w, _mm512_loadu_ps(row + 16 * v), a[v]);
    }
    for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(acc + d0 + 16 * v, a[v]);
  }
}

void scale_row(float* acc, int32_t dim, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  for (int32_t i = 0; i < dim; i += 16) {
    const __mmask16 m = tail_mask(dim, i);
    store16(acc + i, m, _mm512_mul_ps(load16(acc + i, m), f));
  }
}

// The positions [first, last] of the sub-block in the row's range; first > last when none.
void row_bounds(const Row& row, const SubBlock& block, int& first, int& last) {
  first = row.lo > block.first_position ? row.lo - block.first_position : 0;
  last = row.hi - block.first_position < kSubBlockPositions - 1 ? row.hi - block.first_position : kSubBlockPositions - 1;
}

// The row's weights exp(score - max) for the 16 raw scores q.k of a sub-block into weight[16]
// (zero outside [first, last]), after rescaling what it accumulated when the maximum grows.
void weigh_scores(Row& row, const Params& p, __m512 raw, int first, int last, float* weight) {
  __m512 s = _mm512_mul_ps(raw, _mm512_set1_ps(p.scale));
  if (p.softcap > 0.0f) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s);
    for (float& x : lanes) x = p.softcap * tanhf(x / p.softcap);
    s = _mm512_load_ps(lanes);
  }
  const __mmask16 valid = static_cast<__mmask16>(((1u << (last + 1)) - 1) & ~((1u << first) - 1));
  const float block_max = _mm512_mask_reduce_max_ps(valid, s);
  if (block_max > row.max) {
    // Online softmax: rescale what was accumulated to the new maximum.
    if (row.sum > 0.0f) {
      const float correction = exp1(row.max - block_max);
      row.sum *= correction;
      scale_row(row.acc, p.head_dim_v, correction);
    }
    row.max = block_max;
  }
  const __m512 w = _mm512_maskz_mov_ps(valid, exp16(_mm512_sub_ps(s, _mm512_set1_ps(row.max))));
  _mm512_storeu_ps(weight, w);
  row.sum += sum16(w);
}

// The first phase of a sub-block for one row: its weights into weight[16]. Returns false when
// the sub-block holds none of the row's positions; [first, last] are its positions in it.
template <class Source>
bool weigh_block(Row& row, const SubBlock& block, const Params& p, const Source& keys, float* weight, int& first,
                 int& last) {
  row_bounds(row, block, first, last);
  if (first > last) return false;
  weigh_scores(row, p, scores(row.q, keys, p.head_dim_k), first, last, weight);
  return true;
}

// ---- Decode-shaped tiles: the heads of a GQA group for one token, four rows sharing one range.
// Four rows at a time read each key and value row of the pool once, converting it in registers,
// instead of converting the sub-block into the scratch first. Per row, the same products summed
// in the same order and by the same tree as the Converted path: the same bits.

constexpr int kGroupRows = 4;
alignas(64) constexpr float kZeroRow[256] = {};  // absent positions (F32 or F16 zeros), up to kDim 256

template <bool kF16>
void prefetch_pool(const void* row, int32_t i) {
  _mm_prefetch(static_cast<const char*>(row) + static_cast<size_t>(i) * (kF16 ? 2 : 4), _MM_HINT_T1);
}

template <bool kF16>
__m512 load_pool(const void* row, int32_t i) {
  if constexpr (kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + i)));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(row) + i);
  }
}

// raw[r] lane k = q[r] . key k, for the four rows.
template <int kDim, bool kF16>
void group_scores(const Row* rows, const void* const* keys, const void* const* next_keys, __m512* raw) {
  alignas(64) float lanes[kGroupRows][16];
  constexpr int32_t kElementsPerLine = kF16 ? 32 : 16;
  for (int first_key = 0; first_key < 16; first_key += 4) {
    __m512 acc[16];  // [row][key of the four]
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (int32_t i = 0; i < kDim; i += 16) {
      __m512 key[4];
      for (int k = 0; k < 4; ++k) key[k] = load_pool<kF16>(keys[first_key + k], i);
      if (next_keys != nullptr && i % kElementsPerLine == 0) {
        for (int k = 0; k < 4; ++k) prefetch_pool<kF16>(next_keys[first_key + k], i);
      }
      for (int r = 0; r < kGroupRows; ++r) {
        const __m512 qv = _mm512_loadu_ps(rows[r].q + i);
        for (int k = 0; k < 4; ++k) acc[4 * r + k] = _mm512_fmadd_ps(qv, key[k], acc[4 * r + k]);
      }
    }
    alignas(64) float sums[16];
    _mm512_store_ps(sums, transpose_sum(acc));
    for (int j = 0; j < 16; ++j) lanes[j / 4][first_key + j % 4] = sums[j];
  }
  for (int r = 0; r < kGroupRows; ++r) raw[r] = _mm512_load_ps(lanes[r]);
}

// rows[r].acc += sum over keys k in [first, last] of weight[16 r + k] * values[k], keys in order.
template <int kDim, bool kF16>
void group_add_values(const Row* rows, const float* weight, const void* const* values, const void* const* next_values,
                      int first, int last) {
  static_assert(kDim % 64 == 0);
  for (int32_t d0 = 0; d0 < kDim; d0 += 64) {
    __m512 a[kGroupRows][4];
    for (int r = 0; r < kGroupRows; ++r) {
      for (int c = 0; c < 4; ++c) a[r][c] = _mm512_loadu_ps(rows[r].acc + d0 + 16 * c);
    }
    if (next_values != nullptr) {  // the same 64 elements of the next sub-block's values
      for (int k = 0; k < kSubBlockPositions; ++k) {
        for (int32_t e = 0; e < 64; e += kF16 ? 32 : 16) prefetch_pool<kF16>(next_values[k], d0 + e);
      }
    }
    for (int k = first; k <= last; ++k) {
      __m512 v[4];
      for (int c = 0; c < 4; ++c) v[c] = load_pool<kF16>(values[k], d0 + 16 * c);
      for (int r = 0; r < kGroupRows; ++r) {
        const __m512 w = _mm512_set1_ps(weight[16 * r + k]);
        for (int c = 0; c < 4; ++c) a[r][c] = _mm512_fmadd_ps(w, v[c], a[r][c]);
      }
    }
    for (int r = 0; r < kGroupRows; ++r) {
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(rows[r].acc + d0 + 16 * c, a[r][c]);
    }
  }
}

template <int kDim, bool kF16>
void attend_groups(Row* rows, int n_rows, const SubBlock& block, const SubBlock* next, const Params& p, float* weights) {
  const void* keys[kSubBlockPositions];
  for (int k = 0; k < kSubBlockPositions; ++k) keys[k] = block.keys[k] != nullptr ? block.keys[k] : kZeroRow;
  // The next sub-block's rows are requested alongside this one's reads, a line per line read,
  // so that the memory traffic overlaps the arithmetic instead of arriving in one burst.
  const void* next_keys[kSubBlockPositions];
  const void* next_values[kSubBlockPositions];
  if (next != nullptr) {
    for (int k = 0; k < kSubBlockPositions; ++k) {
      next_keys[k] = next->keys[k] != nullptr ? next->keys[k] : kZeroRow;
      next_values[k] = next->values[k] != nullptr ? next->values[k] : kZeroRow;
    }
  }
  for (int g = 0; g < n_rows; g += kGroupRows) {
    Row* group = rows + g;
    int first, last;
    row_bounds(group[0], block, first, last);
    if (first > last) continue;
    __m512 raw[kGroupRows];
    const bool fetch = next != nullptr && g == 0;
    group_scores<kDim, kF16>(group, keys, fetch ? next_keys : nullptr, raw);
    for (int r = 0; r < kGroupRows; ++r) weigh_scores(group[r], p, raw[r], first, last, weights + 16 * r);
    group_add_values<kDim, kF16>(group, weights, block.values, fetch ? next_values : nullptr, first, last);
  }
}

// Whether the tile is decode-shaped: groups of four rows with one range each, few of them (with
// many rows, converting a sub-block once for all of them is cheaper).
bool in_groups(const Row* rows, int n_rows) {
  if (n_rows % kGroupRows != 0 || n_rows > 4 * kGroupRows) return false;
  for (int g = 0; g < n_rows; g += kGroupRows) {
    for (int r = 1; r < kGroupRows; ++r) {
      if (rows[g + r].lo != rows[g].lo || rows[g + r].hi != rows[g].hi) return false;
    }
  }
  return true;
}

// Both phases over every row: keys first (the weights of all rows), then values, so that only
// one 16-position buffer is hot at a time.
template <class Source>
void attend_rows(Row* rows, int n_rows, const SubBlock& block, const Params& p, const Source& keys,
                 const Source& values, float* weights) {
  int first[kMaxRows], last[kMaxRows];
  bool active[kMaxRows];
  for (int r = 0; r < n_rows; ++r) active[r] = weigh_block(rows[r], block, p, keys, weights + 16 * r, first[r], last[r]);
  if constexpr (Source::kConverted) load_rows(block.values, p.head_dim_v, p.f16_elements, const_cast<float*>(values.data));
  for (int r = 0; r < n_rows; ++r) {
    if (active[r]) add_values(rows[r].acc, weights + 16 * r, values, p.head_dim_v, first[r], last[r]);
  }
}

}  // namespace

// The KV pool is read from memory once per step (a batch of long contexts reads as much as the
// weights): ask for the next sub-block's rows while this one is computed.
void prefetch_block(const SubBlock& block, const Params& p) {
  const size_t element = p.f16_elements ? 2 : 4;
  const size_t key_bytes = static_cast<size_t>(p.head_dim_k) * element, value_bytes = static_cast<size_t>(p.head_dim_v) * element;
  for (int k = 0; k < kSubBlockPositions; ++k) {
    if (block.keys[k] == nullptr) continue;
    for (size_t i = 0; i < key_bytes; i += 64) _mm_prefetch(static_cast<const char*>(block.keys[k]) + i, _MM_HINT_T1);
    for (size_t i = 0; i < value_bytes; i += 64) _mm_prefetch(static_cast<const char*>(block.values[k]) + i, _MM_HINT_T1);
  }
}

// Below this many rows per tile, converting a sub-block's keys and values once costs more than
// converting them on each use.
constexpr int kConvertedRows = 3;

void attend(Row* rows, int n_rows, const SubBlock* blocks, int n_blocks, const Params& params, float* keys,
            float* values, float* weights) {
  for (int start = 0; start < n_rows; start += kMaxRows) {
    const int count = n_rows - start < kMaxRows ? n_rows - start : kMaxRows;
    const int32_t dim = params.head_dim_k == params.head_dim_v ? params.head_dim_k : 0;
    const bool grouped = (dim == 256 || dim == 128 || dim == 64) && in_groups(rows + start, count);
    for (int b = 0; b < n_blocks; ++b) {
      const SubBlock* next = b + 1 < n_blocks ? &blocks[b + 1] : nullptr;
      // The decode-shaped groups request the next sub-block as they read this one; the other
      // shapes all at once before it (their arithmetic per byte is larger).
      if (next != nullptr && !grouped) prefetch_block(*next, params);
      if (grouped) {
        const auto run = [&]<int kDim>() {
          if (params.f16_elements) {
            attend_groups<kDim, true>(rows + start, count, blocks[b], next, params, weights);
          } else {
            attend_groups<kDim, false>(rows + start, count, blocks[b], next, params, weights);
          }
        };
        if (dim == 256) {
          run.template operator()<256>();
        } else if (dim == 128) {
          run.template operator()<128>();
        } else {
          run.template operator()<64>();
        }
      } else if (count >= kConvertedRows) {
        load_rows(blocks[b].keys, params.head_dim_k, params.f16_elements, keys);
        const auto run = [&](const auto& k, const auto& v) { attend_rows(rows + start, count, blocks[b], params, k, v, weights); };
        if (dim == 256) {
          run(ConvertedFixed<256>{keys}, ConvertedFixed<256>{values});
        } else if (dim == 128) {
          run(ConvertedFixed<128>{keys}, ConvertedFixed<128>{values});
        } else if (dim == 64) {
          run(ConvertedFixed<64>{keys}, ConvertedFixed<64>{values});
        } else {
          run(Converted{keys, params.head_dim_k}, Converted{values, params.head_dim_v});
        }
      } else {
        // Absent positions read as zeros (the scratch, zeroed, is large enough for a row).
        std::memset(keys, 0, static_cast<size_t>(params.head_dim_k) * sizeof(float));
        const void* key_rows[kSubBlockPositions];
        for (int k = 0; k < kSubBlockPositions; ++k) key_rows[k] = blocks[b].keys[k] != nullptr ? blocks[b].keys[k] : keys;
        const Direct k{key_rows, params.f16_elements}, v{blocks[b].values, params.f16_elements};
        attend_rows(rows + start, count, blocks[b], params, k, v, weights);
      }
    }
  }
}

}  // namespace mnemo::kernels::attention_avx512
