// AVX-512 kernel of tiled paged attention (see attention_tile.h for the canonical order). Per
// sub-block of 16 positions, the keys and values are converted to F32 once and used by every row
// of the tile (the query tokens of a prefill chunk times the heads of a GQA group).
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

__mmask16 tail_mask(int32_t n, int32_t i) {
  return n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
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

// Converts the present rows of a sub-block to F32 (absent ones to zero) into out[16][dim].
void load_rows(const void* const* rows, int32_t dim, bool f16, float* out) {
  for (int k = 0; k < kSubBlockPositions; ++k, out += dim) {
    if (rows[k] == nullptr) {
      std::memset(out, 0, static_cast<size_t>(dim) * sizeof(float));
      continue;
    }
    for (int32_t i = 0; i < dim; i += 16) {
      const __mmask16 m = tail_mask(dim, i);
      const __m512 v = f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(rows[k]) + i))
                           : _mm512_maskz_loadu_ps(m, static_cast<const float*>(rows[k]) + i);
      _mm512_mask_storeu_ps(out + i, m, v);
    }
  }
}

// The 16 scores of one row, lane k = key k.
__m512 scores(const float* q, const float* keys, int32_t dim) {
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int32_t i = 0; i < dim; i += 16) {
    const __mmask16 m = tail_mask(dim, i);
    const __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
    for (int k = 0; k < 16; ++k) acc[k] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, keys + k * dim + i), acc[k]);
  }
  return transpose_sum(acc);
}

// acc[0, dim) += sum over keys k in [first, last] of weight[k] * values[k], keys in order; eight
// vectors of the row at a time stay in registers.
void add_values(float* acc, const float* weight, const float* values, int32_t dim, int first, int last) {
  constexpr int kVectors = 8;
  for (int32_t d0 = 0; d0 < dim; d0 += 16 * kVectors) {
    __m512 a[kVectors];
    __mmask16 m[kVectors];
    for (int v = 0; v < kVectors; ++v) {
      const int32_t i = d0 + 16 * v;
      m[v] = i < dim ? tail_mask(dim, i) : __mmask16(0);
      a[v] = _mm512_maskz_loadu_ps(m[v], acc + i);
    }
    for (int k = first; k <= last; ++k) {
      const __m512 w = _mm512_set1_ps(weight[k]);
      for (int v = 0; v < kVectors; ++v) {
        a[v] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m[v], values + k * dim + d0 + 16 * v), a[v]);
      }
    }
    for (int v = 0; v < kVectors; ++v) _mm512_mask_storeu_ps(acc + d0 + 16 * v, m[v], a[v]);
  }
}

void scale_row(float* acc, int32_t dim, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  for (int32_t i = 0; i < dim; i += 16) {
    const __mmask16 m = tail_mask(dim, i);
    _mm512_mask_storeu_ps(acc + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + i), f));
  }
}

void attend_block(Row& row, const SubBlock& block, const Params& p, const float* keys, const float* values) {
  const int first = row.lo > block.first_position ? row.lo - block.first_position : 0;
  const int last = row.hi - block.first_position < kSubBlockPositions - 1 ? row.hi - block.first_position
                                                                           : kSubBlockPositions - 1;
  if (first > last) return;
  __m512 s = _mm512_mul_ps(scores(row.q, keys, p.head_dim_k), _mm512_set1_ps(p.scale));
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
  alignas(64) float weight[16];
  const __m512 w = _mm512_maskz_mov_ps(valid, exp16(_mm512_sub_ps(s, _mm512_set1_ps(row.max))));
  _mm512_store_ps(weight, w);
  row.sum += sum16(w);
  add_values(row.acc, weight, values, p.head_dim_v, first, last);
}

}  // namespace

void attend(Row* rows, int n_rows, const SubBlock* blocks, int n_blocks, const Params& params, float* keys,
            float* values) {
  for (int b = 0; b < n_blocks; ++b) {
    load_rows(blocks[b].keys, params.head_dim_k, params.f16_elements, keys);
    load_rows(blocks[b].values, params.head_dim_v, params.f16_elements, values);
    for (int r = 0; r < n_rows; ++r) attend_block(rows[r], blocks[b], params, keys, values);
  }
}

}  // namespace mnemo::kernels::attention_avx512
