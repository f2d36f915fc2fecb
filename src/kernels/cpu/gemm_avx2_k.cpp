// AVX2 GEMM kernels of the 256-element formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) against
// Q8_K activations, in 8-row tiles: a decoded super-block serves every activation row of the call
// (vec_dot per element decodes it again for each).
//
// Layout of a tile's super-block: 8 units of 32 elements; unit u is 8 vectors, vector g holding in
// lane r the levels 4g..4g+3 of row r (vectors 0-3: the unit's first 16 elements, 4-7 its
// second); then the format's scales with one row per lane. Levels are unsigned (Q3_K's and
// Q6_K's carry +4 and +32, removed through the activations' per-16 sums) except IQ4_XS's table
// levels, multiplied as |w| times the activations with w's sign (AVX2 has no VNNI).
//
// A unit's group products (vpmaddubsw: int16 pairs) are summed as int16 while no sum can overflow
// (int16_groups: 2 x the largest level x 127 each), then multiplied by the unit's (or the 16's)
// scale in one vpmaddwd against the scale as an int16 pair.
// Per super-block and lane everything up to one float conversion is exact integer arithmetic, as
// in the AVX-512 kernels (gemm_avx512_k.cpp), whose float operations these repeat:
//   I = sum of each unit's (or each 16's) level products times its scale, less the offset times
//       sum_s scale_s * A16_s (A16_s: the activations' sum over the 16 elements s);
//   affine formats (Q2_K, Q4_K, Q5_K): M = sum of the mins times the activations' sums;
//   acc = fma(float(I), d * d_a, acc)        [acc = fnmadd(float(M), dmin * d_a, acc)]
// The single-row path reads the file's rows and computes each row's I and M directly, as
// vectors (the scales widened from the block, the 8 rows of a tile reduced together); the
// integer sums are exact, so it gives the batched path's bits (batch invariance). The formats
// themselves are in gemm_avx2_k_formats.h.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx2_k_formats.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx2 {
namespace {

using namespace k_formats;  // NOLINT(google-build-using-namespace): this file's own formats

constexpr int kTileRows = 8;
constexpr int kMaxChunkRows = 4;   // activation rows whose accumulators stay in registers
int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

size_t batch_bytes_q8_K(int64_t k, int64_t n_rows) {
  return (sizeof(RecordQ8K) * static_cast<size_t>(k / kQKK * n_rows) + 63) / 64 * 64;
}

void pack_q8_K(const float* x, int64_t k, int64_t row, int64_t /*n_rows*/, void* batch) {
  RecordQ8K* records = static_cast<RecordQ8K*>(batch) + row * (k / kQKK);
  for (int64_t b = 0; b < k / kQKK; ++b) {
    BlockQ8_K block;
    q8_K_from_float(x + b * kQKK, &block, kQKK);
    RecordQ8K& r = records[b];
    std::memcpy(r.qs, block.qs, kQKK);
    r.d = block.d;
    for (int p = 0; p < 8; ++p) r.pairs16[p] = int16_pair(block.bsums[2 * p], block.bsums[2 * p + 1]);
    for (int p = 0; p < 4; ++p) {
      r.pairs32[p] = int16_pair(block.bsums[4 * p] + block.bsums[4 * p + 1], block.bsums[4 * p + 2] + block.bsums[4 * p + 3]);
    }
  }
}

// The 8 rows of a tile; rows past the end repeat the last one (their lanes are computed but
// never stored).
template <class Block>
struct TileRows {
  const Block* row[kTileRows];
  int valid;
  TileRows(const uint8_t* weights, size_t row_bytes, int64_t first, int64_t end) {
    valid = static_cast<int>(min64(end - first, kTileRows));
    for (int r = 0; r < kTileRows; ++r) {
      row[r] = reinterpret_cast<const Block*>(weights + static_cast<size_t>(first + (r < valid ? r : valid - 1)) * row_bytes);
    }
  }
};

// A tile's scales for one super-block, one row per lane.
struct TileScales {
  __m256i scale[16];  // each as an int16 pair (vpmaddwd's other operand)
  __m256i pairs[8];
  __m256 d, dmin;
};

template <class Format>
void tile_scales(const TileRows<typename Format::Block>& rows, int64_t b, TileScales& out) {
  alignas(32) int32_t scale[16][kTileRows];
  alignas(32) int32_t pairs[8][kTileRows];
  alignas(32) float d[kTileRows], dmin[kTileRows];
  for (int r = 0; r < kTileRows; ++r) {
    RowScales s;
    Format::scales(rows.row[r][b], s);
    for (int i = 0; i < scale_count<Format>(); ++i) scale[i][r] = int16_pair(s.scale[i], s.scale[i]);
    for (int p = 0; p < pair_count<Format>(); ++p) pairs[p][r] = s.pairs[p];
    d[r] = s.d;
    dmin[r] = s.dmin;
  }
  for (int i = 0; i < scale_count<Format>(); ++i) out.scale[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(scale[i]));
  for (int p = 0; p < pair_count<Format>(); ++p) out.pairs[p] = _mm256_load_si256(reinterpret_cast<const __m256i*>(pairs[p]));
  out.d = _mm256_load_ps(d);
  out.dmin = _mm256_load_ps(dmin);
}

// rows[r] = 32 levels of row r (8 words); out[g], lane r = word g of row r.
void transpose_unit(const __m256i* rows, __m256i* out) {
  __m256i t[8];
  for (int p = 0; p < 8; p += 2) {
    t[p] = _mm256_unpacklo_epi32(rows[p], rows[p + 1]);
    t[p + 1] = _mm256_unpackhi_epi32(rows[p], rows[p + 1]);
  }
  __m256i u[8];
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int g = 0; g < 4; ++g) {
    out[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
    out[g + 4] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
  }
}

constexpr size_t kLevelBytes = kUnits * 8 * sizeof(__m256i);
constexpr size_t kBlockBytes = kLevelBytes + sizeof(TileScales);
static_assert(sizeof(TileScales) % 32 == 0);

size_t tile_bytes(int64_t k) { return static_cast<size_t>(k / kQKK) * kBlockBytes; }

template <class Format>
void repack_tile(const TileRows<typename Format::Block>& rows, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, out += kBlockBytes) {
    auto* vectors = reinterpret_cast<__m256i*>(out);
    for (int u = 0; u < kUnits; ++u) {
      __m256i levels[kTileRows];
      for (int r = 0; r < kTileRows; ++r) levels[r] = Format::levels(rows.row[r][b], u);
      __m256i transposed[8];
      transpose_unit(levels, transposed);
      for (int g = 0; g < 8; ++g) _mm256_store_si256(vectors + 8 * u + g, transposed[g]);
    }
    TileScales scales;
    tile_scales<Format>(rows, b, scales);
    std::memcpy(out + kLevelBytes, &scales, sizeof(scales));
  }
}

// acc + the super-block's terms per lane, from its exact integer sums (see the file comment).
template <class Format>
__m256 finish_block(__m256i total, __m256i pairs_dot, __m256 d, __m256 dmin, float d_a, __m256 acc) {
  const __m256 scale_a = _mm256_set1_ps(d_a);
  if constexpr (Format::kOffset != 0) total = _mm256_sub_epi32(total, _mm256_mullo_epi32(pairs_dot, _mm256_set1_epi32(Format::kOffset)));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, scale_a), acc);
  if constexpr (Format::kAffine) acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(pairs_dot), _mm256_mul_ps(dmin, scale_a), acc);
  return acc;
}

// How many group products may be summed as int16: each lane of one is at most
// 2 x kMaxLevel x 127 in size (Q8_K activations are within +-127).
template <class Format>
constexpr int int16_groups() {
  constexpr int fit = 32767 / (2 * Format::kMaxLevel * 127);
  return fit < 1 ? 1 : fit > 8 ? 8 : fit;
}
static_assert(int16_groups<Q4_KFormat>() == 8 && int16_groups<Q5_KFormat>() == 4 && int16_groups<Q6_KFormat>() == 2 &&
              int16_groups<IQ4_XSFormat>() == 1);

// The products per lane of a tile's vector w and four activation bytes, as int16 pairs.
template <class Format>
__m256i group_products(__m256i w, const int8_t* a) {
  int32_t word;
  std::memcpy(&word, a, sizeof(word));
  const __m256i broadcast = _mm256_set1_epi32(word);
  if constexpr (Format::kSigned) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(broadcast, w));
  } else {
    return _mm256_maddubs_epi16(w, broadcast);
  }
}

// Per lane: the scale times the sum of groups [kFirst, kFirst + kCount) of a unit (group g: w[g]
// against the activations q[4g..4g+3]), exact.
template <class Format, int kFirst, int kCount>
__m256i scaled_groups(const __m256i* w, const int8_t* q, __m256i scale16) {
  constexpr int kRun = int16_groups<Format>();
  __m256i total = _mm256_setzero_si256();
  for (int g = kFirst; g < kFirst + kCount; g += kRun) {
    __m256i sum = group_products<Format>(w[g], q + 4 * g);
    for (int i = 1; i < kRun && g + i < kFirst + kCount; ++i) sum = _mm256_add_epi16(sum, group_products<Format>(w[g + i], q + 4 * (g + i)));
    total = _mm256_add_epi32(total, _mm256_madd_epi16(sum, scale16));
  }
  return total;
}

// A tile's outputs o..o+valid-1 of activation row `row`.
void store_outputs(const GemmArgs& args, int64_t row, int64_t o, int valid, __m256 v) {
  float* y = args.y + row * args.y_stride + o;
  if (valid == kTileRows) {
    _mm256_storeu_ps(y, v);
    return;
  }
  alignas(32) float lanes[kTileRows];
  _mm256_store_ps(lanes, v);
  std::memcpy(y, lanes, static_cast<size_t>(valid) * sizeof(float));
}

template <class Format, int kRows>
void multiply_chunk(const uint8_t* tile, int64_t n_blocks, const GemmArgs& args, int64_t first_row, int64_t o, int valid) {
  const RecordQ8K* records = reinterpret_cast<const RecordQ8K*>(args.activations) + first_row * n_blocks;
  __m256 acc[kRows];
  for (int j = 0; j < kRows; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b, tile += kBlockBytes) {
    const auto* vectors = reinterpret_cast<const __m256i*>(tile);
    const auto* scales = reinterpret_cast<const TileScales*>(tile + kLevelBytes);
    __m256i total[kRows];
    for (int j = 0; j < kRows; ++j) total[j] = _mm256_setzero_si256();
    for (int u = 0; u < kUnits; ++u) {
      __m256i w[8];
      for (int g = 0; g < 8; ++g) w[g] = _mm256_load_si256(vectors + 8 * u + g);
      for (int j = 0; j < kRows; ++j) {
        const int8_t* q = records[j * n_blocks + b].qs + 32 * u;
        if constexpr (Format::kHalfScales) {
          total[j] = _mm256_add_epi32(total[j], _mm256_add_epi32(scaled_groups<Format, 0, 4>(w, q, scales->scale[2 * u]),
                                                                 scaled_groups<Format, 4, 4>(w, q, scales->scale[2 * u + 1])));
        } else {
          total[j] = _mm256_add_epi32(total[j], scaled_groups<Format, 0, 8>(w, q, scales->scale[u]));
        }
      }
    }
    for (int j = 0; j < kRows; ++j) {
      const RecordQ8K& a = records[j * n_blocks + b];
      __m256i pairs_dot = _mm256_setzero_si256();
      for (int p = 0; p < pair_count<Format>(); ++p) {
        pairs_dot = _mm256_add_epi32(pairs_dot, _mm256_madd_epi16(scales->pairs[p], _mm256_set1_epi32(activation_pairs<Format>(a)[p])));
      }
      acc[j] = finish_block<Format>(total[j], pairs_dot, scales->d, scales->dmin, a.d, acc[j]);
    }
  }
  for (int j = 0; j < kRows; ++j) store_outputs(args, first_row + j, o, valid, acc[j]);
}

template <class Format>
void multiply_tile(const uint8_t* tile, int64_t n_blocks, const GemmArgs& args, int64_t o, int valid) {
  int64_t j = 0;
  for (; j + kMaxChunkRows <= args.n_rows; j += kMaxChunkRows) multiply_chunk<Format, kMaxChunkRows>(tile, n_blocks, args, j, o, valid);
  switch (args.n_rows - j) {
    case 1: multiply_chunk<Format, 1>(tile, n_blocks, args, j, o, valid); break;
    case 2: multiply_chunk<Format, 2>(tile, n_blocks, args, j, o, valid); break;
    case 3: multiply_chunk<Format, 3>(tile, n_blocks, args, j, o, valid); break;
    default: break;
  }
}

// The scales of a row's super-block as int16 vectors: per-32 formats [s0..s7 | s0..s7], per-16
// formats [s0..s7 | s8..s15].
template <class Format>
__m256i row_scale_vector(const RowScales& s) {
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.scale));
  if constexpr (Format::kHalfScales) {
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.scale + 8));
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), 0xD8);
  } else {
    return _mm256_broadcastsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1)));
  }
}

// The row vectors from RowScales, for the formats whose scales have no shorter way (Q3_K's
// packing, IQ4_XS's split bits).
template <class Format>
void row_vectors(const typename Format::Block& block, RowVectors& v) {
  if constexpr (requires { Format::vectors(block, v); }) {
    Format::vectors(block, v);
  } else {
    RowScales s;
    Format::scales(block, s);
    v.scales = row_scale_vector<Format>(s);
    v.pairs = _mm256_setzero_si256();
    if constexpr (pair_count<Format>() == 8) {
      v.pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.pairs));
    } else if constexpr (pair_count<Format>() == 4) {
      v.pairs = _mm256_inserti128_si256(v.pairs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.pairs)), 0);
    }
    v.d = s.d;
    v.dmin = s.dmin;
  }
}

// Unit u's scale in every int16 lane (per-16 formats: scale 2u in the low 128 bits, 2u + 1 in
// the high), from row_scale_vector's vector.
template <class Format>
__m256i unit_scale(__m256i scales, int u) {
  if constexpr (Format::kHalfScales) {
    const int k = u % 4;
    const __m256i half = u < 4 ? _mm256_permute2x128_si256(scales, scales, 0x00) : _mm256_permute2x128_si256(scales, scales, 0x11);
    const __m256i pick = _mm256_setr_epi8(4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1,
                                          4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3, 4 * k + 2,
                                          4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2,
                                          4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3);
    return _mm256_shuffle_epi8(half, pick);
  } else {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * u)));
  }
}

// One row's super-block b as two int32 vectors whose lanes sum to its exact sums: I (with the
// offset already removed: sum of the levels' products times their scales, less the offset
// times the pairs' dot) and, for the affine formats, the mins' dot M.
template <class Format>
void row_sum_vectors(const typename Format::Block& block, const RecordQ8K& a, __m256i& total, __m256i& pairs_dot, float& d,
                     float& dmin) {
  RowVectors v;
  row_vectors<Format>(block, v);
  total = _mm256_setzero_si256();
  for (int u = 0; u < kUnits; ++u) {
    const __m256i levels = Format::levels(block, u);
    const __m256i q = simd::load256(a.qs + 32 * u);
    __m256i products;
    if constexpr (Format::kSigned) {
      products = _mm256_maddubs_epi16(_mm256_sign_epi8(levels, levels), _mm256_sign_epi8(q, levels));
    } else {
      products = _mm256_maddubs_epi16(levels, q);
    }
    total = _mm256_add_epi32(total, _mm256_madd_epi16(products, unit_scale<Format>(v.scales, u)));
  }
  pairs_dot = _mm256_setzero_si256();
  if constexpr (pair_count<Format>() == 8) {
    pairs_dot = _mm256_madd_epi16(v.pairs, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(activation_pairs<Format>(a))));
  } else if constexpr (pair_count<Format>() == 4) {
    const __m128i dot = _mm_madd_epi16(_mm256_castsi256_si128(v.pairs),
                                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(activation_pairs<Format>(a))));
    pairs_dot = _mm256_inserti128_si256(_mm256_setzero_si256(), dot, 0);
  }
  if constexpr (Format::kOffset != 0) {
    static_assert(!Format::kAffine);
    total = _mm256_sub_epi32(total, _mm256_mullo_epi32(pairs_dot, _mm256_set1_epi32(Format::kOffset)));
    pairs_dot = _mm256_setzero_si256();
  }
  d = v.d;
  dmin = v.dmin;
}

// Lane r: the sum of the eight lanes of v[r] (exact).
__m256i lane_sums(const __m256i* v) {
  const __m256i h0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i h4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20), _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// The weights stream from memory once, 8 rows in lockstep, which the hardware prefetcher follows
// poorly: while a tile's rows are multiplied, the next tile's are requested a slice per block.
class NextRowsPrefetch {
 public:
  NextRowsPrefetch(const GemmArgs& args, int64_t next_row, int64_t steps) {
    const int64_t stream_end = args.stream_row_end > args.row_end ? args.stream_row_end : args.row_end;
    const int64_t rows = min64(kTileRows, stream_end - next_row);
    if (rows <= 0) return;
    next_ = reinterpret_cast<const char*>(args.weights) + static_cast<size_t>(next_row) * args.weight_row_bytes;
    end_ = next_ + static_cast<size_t>(rows) * args.weight_row_bytes;
    const auto lines = static_cast<size_t>(end_ - next_ + 63) / 64;
    per_step_ = (lines + static_cast<size_t>(steps) - 1) / static_cast<size_t>(steps);
  }
  void step() {
    for (size_t i = 0; i < per_step_ && next_ < end_; ++i, next_ += 64) _mm_prefetch(next_, _MM_HINT_T0);
  }

 private:
  const char* next_ = nullptr;
  const char* end_ = nullptr;
  size_t per_step_ = 0;
};

template <class Format>
void multiply_one_row(const GemmArgs& args) {
  using Block = typename Format::Block;
  const int64_t n_blocks = args.k / kQKK;
  const auto* records = reinterpret_cast<const RecordQ8K*>(args.activations);
  for (int64_t o = args.row_begin; o < args.row_end; o += kTileRows) {
    const TileRows<Block> rows(args.weights, args.weight_row_bytes, o, args.row_end);
    NextRowsPrefetch prefetch(args, o + kTileRows, n_blocks);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
      prefetch.step();
      __m256i total[kTileRows], pairs_dot[kTileRows];
      alignas(32) float d[kTileRows], dmin[kTileRows];
      for (int r = 0; r < kTileRows; ++r) row_sum_vectors<Format>(rows.row[r][b], records[b], total[r], pairs_dot[r], d[r], dmin[r]);
      // The offset is already off the totals (the pairs' dots are zero there): finish_block
      // then does the batched path's float operations on the same integers.
      const __m256i pairs = Format::kAffine ? lane_sums(pairs_dot) : _mm256_setzero_si256();
      acc = finish_block<Format>(lane_sums(total), pairs, _mm256_load_ps(d), _mm256_load_ps(dmin), records[b].d, acc);
    }
    store_outputs(args, 0, o, rows.valid, acc);
  }
}

// A thread's repacked tile, reused across calls.
uint8_t* thread_tile(size_t bytes) {
  struct alignas(32) Line {
    uint8_t bytes[32];
  };
  thread_local std::vector<Line> buffer;
  if (buffer.size() * sizeof(Line) < bytes) buffer.resize((bytes + sizeof(Line) - 1) / sizeof(Line));
  return buffer.data()->bytes;
}

template <class Format>
void multiply(const GemmArgs& args) {
  const int64_t n_blocks = args.k / kQKK;
  const size_t bytes = tile_bytes(args.k);
  // The tiles are about twice the file's rows: a single row reads the file (it is bound by the
  // bytes it reads).
  const bool prepacked = args.tiles != nullptr && args.row_begin % kTileRows == 0 && args.n_rows > 1;
  if (!prepacked && args.n_rows == 1) {
    multiply_one_row<Format>(args);
    return;
  }
  for (int64_t o = args.row_begin; o < args.row_end; o += kTileRows) {
    const int valid = static_cast<int>(min64(kTileRows, args.row_end - o));
    const uint8_t* tile = nullptr;
    if (prepacked) {
      tile = args.tiles + static_cast<size_t>(o / kTileRows) * bytes;
    } else {
      uint8_t* repacked = thread_tile(bytes);
      repack_tile<Format>(TileRows<typename Format::Block>(args.weights, args.weight_row_bytes, o, args.row_end), n_blocks, repacked);
      tile = repacked;
    }
    multiply_tile<Format>(tile, n_blocks, args, o, valid);
  }
}

template <class Format>
void pack_tile(const uint8_t* weights, size_t row_bytes, int64_t k, int64_t first_row, int64_t n_rows, uint8_t* out) {
  repack_tile<Format>(TileRows<typename Format::Block>(weights, row_bytes, first_row, n_rows), k / kQKK, out);
}

template <class Format>
constexpr GemmKernel gemm_kernel_of(const ActivationPacker* packer) {
  return {packer, kTileRows, multiply<Format>, tile_bytes, pack_tile<Format>, false, false};
}

}  // namespace

const ActivationPacker kPackQ8_K{batch_bytes_q8_K, pack_q8_K};

constinit const GemmKernel kGemmQ2_K = gemm_kernel_of<Q2_KFormat>(&kPackQ8_K);
constinit const GemmKernel kGemmQ3_K = gemm_kernel_of<Q3_KFormat>(&kPackQ8_K);
constinit const GemmKernel kGemmQ4_K = gemm_kernel_of<Q4_KFormat>(&kPackQ8_K);
constinit const GemmKernel kGemmQ5_K = gemm_kernel_of<Q5_KFormat>(&kPackQ8_K);
constinit const GemmKernel kGemmQ6_K = gemm_kernel_of<Q6_KFormat>(&kPackQ8_K);
constinit const GemmKernel kGemmIQ4_XS = gemm_kernel_of<IQ4_XSFormat>(&kPackQ8_K);

}  // namespace mnemo::kernels::avx2
