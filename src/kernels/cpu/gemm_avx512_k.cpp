// AVX-512 VNNI GEMM kernels of the K formats (Q4_K, Q5_K, Q6_K) against Q8_K activations, and
// the Q8_K packer. See gemm.h for the invariance argument and gemm_avx512_common.h for the tile
// layout.
//
// Per super-block of 256 and lane (weight row), everything up to one float conversion is exact
// integer arithmetic:
//   Q4_K/Q5_K: I = sum_u sc_u * sum(q * a) over the 8 sub-blocks u of 32, M = sum_u m_u * A_u
//              (A_u: the activations' sum over sub-block u);
//              acc = fma(float(I), d * d_a, acc); acc = fnmadd(float(M), dmin * d_a, acc)
//   Q6_K:      I = sum_s sc_s * (sum(q * a) - 32 * A_s) over the 16 sub-blocks s of 16;
//              acc = fma(float(I), d * d_a, acc)
// The levels q are unsigned (Q6_K's carry +32, removed through A_s).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx512_common.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx512 {
namespace {

using namespace gemm;

constexpr int kUnits = kQKK / kUnit;  // 8 units of 32 per super-block

// ---- Packed Q8_K activations, a record per row and super-block (see ActivationBatch): the
// levels, the scale, -32 times the 16 per-16 sums (Q6_K's offset) and the 8 per-32 sums as int16
// pairs (for the Q4_K/Q5_K mins).
struct RecordQ8K {
  int8_t qs[kQKK];
  float d;
  int32_t offset16[16];
  int32_t sum_pairs[4];  // sums of sub-blocks 2p (low 16 bits) and 2p + 1
};

size_t batch_bytes_q8_K(int64_t k, int64_t n_rows) { return ActivationBatch<RecordQ8K>::bytes(k / kQKK, n_rows); }

void pack_q8_K(const float* x, int64_t k, int64_t row, int64_t n_rows, void* batch) {
  for (int64_t b = 0; b < k / kQKK; ++b) {
    RecordQ8K& record = *ActivationBatch<RecordQ8K>::record(batch, k / kQKK, n_rows, row, b);
    BlockQ8_K block;
    avx2::q8_K_from_float(x + b * kQKK, &block, kQKK);
    std::memcpy(record.qs, block.qs, kQKK);
    record.d = block.d;
    for (int s = 0; s < 16; ++s) record.offset16[s] = -32 * block.bsums[s];
    for (int p = 0; p < 4; ++p) {
      const int low = block.bsums[4 * p] + block.bsums[4 * p + 1];
      const int high = block.bsums[4 * p + 2] + block.bsums[4 * p + 3];
      record.sum_pairs[p] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(low)) |
                                                 (static_cast<uint32_t>(static_cast<uint16_t>(high)) << 16));
    }
  }
}

// ---- Per super-block scales of a tile's 16 rows, one row per lane.
struct AffineScales {  // Q4_K, Q5_K
  __m512i scale[kUnits];  // int32
  __m512i min_pairs[4];   // int16 pairs (m_2p, m_2p+1)
  __m512 d, dmin;
};
struct SignedScales {  // Q6_K
  __m512i scale[2 * kUnits];  // int32, one per sub-block of 16
  __m512 d;
};

// The 12-byte scales field of 16 rows, unpacked word-wise as in k_scales.h.
template <class Block>
void affine_scales(const TileRows& rows, int64_t b, AffineScales& out) {
  const size_t base = static_cast<size_t>(b) * sizeof(Block);
  const __m512i w0 = rows.gather_words(base + offsetof(Block, scales));
  const __m512i w1 = rows.gather_words(base + offsetof(Block, scales) + 4);
  const __m512i w2 = rows.gather_words(base + offsetof(Block, scales) + 8);
  const __m512i low6 = _mm512_set1_epi32(0x3f3f3f3f), low4 = _mm512_set1_epi32(0x0f0f0f0f),
                low2 = _mm512_set1_epi32(0x03030303);
  const __m512i scales_low = _mm512_and_si512(w0, low6);
  const __m512i mins_low = _mm512_and_si512(w1, low6);
  const __m512i scales_high = _mm512_or_si512(_mm512_and_si512(w2, low4),
                                              _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), low2), 4));
  const __m512i mins_high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), low2), 4));
  const __m512i byte = _mm512_set1_epi32(0xff);
  for (int u = 0; u < 4; ++u) {
    out.scale[u] = _mm512_and_si512(_mm512_srli_epi32(scales_low, 8 * u), byte);
    out.scale[u + 4] = _mm512_and_si512(_mm512_srli_epi32(scales_high, 8 * u), byte);
  }

  // Bytes [m0 m1 m2 m3] -> words (m0, m1) and (m2, m3).
  const __m512i low_byte = _mm512_set1_epi32(0xff), third_byte = _mm512_set1_epi32(0xff0000);
  const auto first_pair = [&](__m512i x) {
    return _mm512_or_si512(_mm512_and_si512(x, low_byte), _mm512_and_si512(_mm512_slli_epi32(x, 8), third_byte));
  };
  const auto second_pair = [&](__m512i x) {
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x, 16), low_byte),
                           _mm512_and_si512(_mm512_srli_epi32(x, 8), third_byte));
  };
  out.min_pairs[0] = first_pair(mins_low);
  out.min_pairs[1] = second_pair(mins_low);
  out.min_pairs[2] = first_pair(mins_high);
  out.min_pairs[3] = second_pair(mins_high);
  const __m512i halves = rows.gather_words(base);  // d, then dmin
  out.d = TileRows::low_halves(halves);
  out.dmin = TileRows::high_halves(halves);
}

void signed_scales(const TileRows& rows, int64_t b, SignedScales& out) {
  const size_t base = static_cast<size_t>(b) * sizeof(BlockQ6_K);
  for (int w = 0; w < 4; ++w) {
    const __m512i word = rows.gather_words(base + offsetof(BlockQ6_K, scales) + 4 * static_cast<size_t>(w));
    for (int i = 0; i < 4; ++i) out.scale[4 * w + i] = _mm512_srai_epi32(_mm512_slli_epi32(word, 24 - 8 * i), 24);
  }
  // d is the block's last field: read the word that ends with it (scales 14, 15, then d).
  out.d = TileRows::high_halves(rows.gather_words(base + offsetof(BlockQ6_K, d) - 2));
}

// ---- Levels of unit u (32 elements) of a super-block, unsigned.

// The levels of two rows at once (levels2 = [x | y]) work on 512-bit registers: the same bit
// operations as on one row, half the instructions.
inline __m512i load2(const uint8_t* x, const uint8_t* y) { return join(simd::load256(x), simd::load256(y)); }

// Low (unit even) or high (odd) nibbles of a 32-byte run, per 256-bit half.
inline __m512i nibbles2(__m512i packed, int u) {
  return _mm512_and_si512(u % 2 == 0 ? packed : _mm512_srli_epi16(packed, 4), _mm512_set1_epi8(0x0f));
}

struct Q4_KFormat {
  using Block = BlockQ4_K;
  using Scales = AffineScales;
  static void scales(const TileRows& rows, int64_t b, Scales& out) { affine_scales<Block>(rows, b, out); }
  static __m512i levels2(const Block& x, const Block& y, int u) {
    return nibbles2(load2(x.qs + 32 * (u / 2), y.qs + 32 * (u / 2)), u);
  }
};
struct Q5_KFormat {
  using Block = BlockQ5_K;
  using Scales = AffineScales;
  static void scales(const TileRows& rows, int64_t b, Scales& out) { affine_scales<Block>(rows, b, out); }
  // Unit u's fifth bits are bit u of qh[l].
  static __m512i levels2(const Block& x, const Block& y, int u) {
    const __m512i nibbles = nibbles2(load2(x.qs + 32 * (u / 2), y.qs + 32 * (u / 2)), u);
    const __mmask64 fifth = _mm512_test_epi8_mask(load2(x.qh, y.qh), _mm512_set1_epi8(static_cast<char>(1 << u)));
    return _mm512_mask_add_epi8(nibbles, fifth, nibbles, _mm512_set1_epi8(16));
  }
};
struct Q6_KFormat {
  using Block = BlockQ6_K;
  using Scales = SignedScales;
  static void scales(const TileRows& rows, int64_t b, Scales& out) { signed_scales(rows, b, out); }
  // Unit u = group g of half h (see unpack_levels_q6): low 4 bits from ql, top 2 from qh.
  static __m512i levels2(const Block& x, const Block& y, int u) {
    const int half = u / 4, g = u % 4;
    const int low_offset = 64 * half + 32 * (g & 1);
    const __m512i low = load2(x.ql + low_offset, y.ql + low_offset);
    const __m512i nibble = _mm512_and_si512(g < 2 ? low : _mm512_srli_epi16(low, 4), _mm512_set1_epi8(0x0f));
    const __m512i top = _mm512_srli_epi16(load2(x.qh + 32 * half, y.qh + 32 * half), 2 * g);
    return _mm512_or_si512(nibble, _mm512_slli_epi16(_mm512_and_si512(top, _mm512_set1_epi8(0x03)), 4));
  }
};

// ---- The integer part per unit and the float part per super-block, shared by both paths.

// sums_a / sums_b: the unit's dot products over its first / second 16 elements (lane = row).
inline void add_unit(const AffineScales& s, int u, __m512i sums_a, __m512i sums_b, const RecordQ8K&, __m512i& total) {
  total = _mm512_add_epi32(total, _mm512_mullo_epi32(_mm512_add_epi32(sums_a, sums_b), s.scale[u]));
}
inline void add_unit(const SignedScales& s, int u, __m512i sums_a, __m512i sums_b, const RecordQ8K& a, __m512i& total) {
  const int32_t* offsets = a.offset16 + 2 * u;
  sums_a = _mm512_add_epi32(sums_a, _mm512_set1_epi32(offsets[0]));
  sums_b = _mm512_add_epi32(sums_b, _mm512_set1_epi32(offsets[1]));
  total = _mm512_add_epi32(total, _mm512_mullo_epi32(sums_a, s.scale[2 * u]));
  total = _mm512_add_epi32(total, _mm512_mullo_epi32(sums_b, s.scale[2 * u + 1]));
}

inline __m512 finish_block(const AffineScales& s, __m512i total, const RecordQ8K& a, __m512 acc) {
  __m512i mins = _mm512_setzero_si512();
  for (int p = 0; p < 4; ++p) mins = _mm512_dpwssd_epi32(mins, s.min_pairs[p], _mm512_set1_epi32(a.sum_pairs[p]));
  const __m512 d_a = _mm512_set1_ps(a.d);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(s.d, d_a), acc);
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(s.dmin, d_a), acc);
}
inline __m512 finish_block(const SignedScales& s, __m512i total, const RecordQ8K& a, __m512 acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(s.d, _mm512_set1_ps(a.d)), acc);
}

// ---- Single activation row: no repacking (see reduce_rows).
template <class Format>
void multiply_one_row(const GemmArgs& args) {
  using Block = typename Format::Block;
  const int64_t n_blocks = args.k / kQKK;
  const RecordQ8K* records = ActivationBatch<RecordQ8K>::group(args.activations, n_blocks, 0);
  for (int64_t o = args.row_begin; o < args.row_end; o += kTileRows) {
    const TileRows rows(args.weights, args.weight_row_bytes, o, args.row_end);
    NextTilePrefetch prefetch(args, o + kTileRows, n_blocks * kUnits);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
      typename Format::Scales scales;
      Format::scales(rows, b, scales);
      __m512i total = _mm512_setzero_si512();
      for (int u = 0; u < kUnits; ++u) {
        prefetch.step();
        const __m512i a = _mm512_broadcast_i64x4(simd::load256(records[b].qs + u * kUnit));
        __m512i partial[8];
        for (int p = 0; p < 8; ++p) {
          const int r = kPairFirst[p];
          const __m512i levels = Format::levels2(reinterpret_cast<const Block*>(rows.row[r])[b],
                                                 reinterpret_cast<const Block*>(rows.row[r + 4])[b], u);
          partial[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), levels, a);
        }
        __m512i first, second;
        reduce_row_pairs(partial, first, second);
        add_unit(scales, u, first, second, records[b], total);
      }
      acc = finish_block(scales, total, records[b], acc);
    }
    finish_outputs(args, 0, o, rows.store_mask(), acc);
  }
}

// ---- Batched: the tile is repacked once (levels transposed, scales per super-block).
template <class Format>
constexpr size_t block_bytes() {
  return kUnits * 8 * sizeof(__m512i) + sizeof(typename Format::Scales);
}

template <class Format>
void repack_tile(const TileRows& rows, int64_t n_blocks, uint8_t* out, NextTilePrefetch prefetch) {
  using Block = typename Format::Block;
  for (int64_t b = 0; b < n_blocks; ++b, out += block_bytes<Format>()) {
    auto* vectors = reinterpret_cast<__m512i*>(out);
    for (int u = 0; u < kUnits; ++u) {
      __m512i levels[8];
      for (int p = 0; p < 8; ++p) {
        const int r = kPairFirst[p];
        levels[p] = Format::levels2(reinterpret_cast<const Block*>(rows.row[r])[b],
                                    reinterpret_cast<const Block*>(rows.row[r + 4])[b], u);
      }
      prefetch.step();
      transpose_unit(levels, vectors + 8 * u);
    }
    Format::scales(rows, b, *reinterpret_cast<typename Format::Scales*>(vectors + 8 * kUnits));
  }
}

template <class Format, int kRows>
void multiply_chunk(const uint8_t* tile, int64_t n_blocks, const GemmArgs& args, int64_t first_row, int64_t o,
                    __mmask16 store_mask, NextTilePrefetch& prefetch) {
  using Scales = typename Format::Scales;
  __m512 acc[kRows];
  for (int j = 0; j < kRows; ++j) acc[j] = _mm512_setzero_ps();
  const RecordQ8K* records = ActivationBatch<RecordQ8K>::group(args.activations, n_blocks, first_row);
  for (int64_t b = 0; b < n_blocks; ++b, tile += block_bytes<Format>(), records += kRows) {
    prefetch.step();
    const auto* vectors = reinterpret_cast<const __m512i*>(tile);
    const Scales& scales = *reinterpret_cast<const Scales*>(vectors + 8 * kUnits);
    __m512i total[kRows];
    for (int j = 0; j < kRows; ++j) total[j] = _mm512_setzero_si512();
    for (int u = 0; u < kUnits; ++u) {
      __m512i w[8];
      for (int g = 0; g < 8; ++g) w[g] = _mm512_load_si512(vectors + 8 * u + g);
      for (int j = 0; j < kRows; ++j) {
        const RecordQ8K& a = records[j];
        const int8_t* q = a.qs + u * kUnit;
        // Groups 0-3 are the unit's first 16 elements, 4-7 its second (Q6_K's two sub-blocks).
        __m512i first = _mm512_setzero_si512();
        __m512i second = _mm512_setzero_si512();
        for (int g = 0; g < 4; ++g) {
          first = dpbusd_broadcast(first, w[g], q + 4 * g);
          second = dpbusd_broadcast(second, w[g + 4], q + 16 + 4 * g);
        }
        add_unit(scales, u, first, second, a, total[j]);
      }
    }
    for (int j = 0; j < kRows; ++j) acc[j] = finish_block(scales, total[j], records[j], acc[j]);
  }
  for (int j = 0; j < kRows; ++j) finish_outputs(args, first_row + j, o, store_mask, acc[j]);
}

template <class Format>
size_t tile_bytes(int64_t k) {
  return static_cast<size_t>(k / kQKK) * block_bytes<Format>();
}

template <class Format>
void multiply(const GemmArgs& args) {
  const int64_t n_blocks = args.k / kQKK;
  const auto chunk = [&]<int kRows>(const uint8_t* tile, int64_t first_row, int64_t o, __mmask16 store_mask,
                                    NextTilePrefetch& prefetch) {
    multiply_chunk<Format, kRows>(tile, n_blocks, args, first_row, o, store_mask, prefetch);
  };
  // The tiles are about twice the file's rows: a single row reads the file (see reads_prepacked).
  if (reads_prepacked(args, false)) {
    multiply_prepacked(args, n_blocks, tile_bytes<Format>(args.k), chunk);
    return;
  }
  if (args.n_rows == 1) {
    multiply_one_row<Format>(args);
    return;
  }
  multiply_in_groups(
      args, n_blocks, tile_bytes<Format>(args.k), n_blocks * kUnits,
      [&](const TileRows& rows, uint8_t* out, NextTilePrefetch prefetch) { repack_tile<Format>(rows, n_blocks, out, prefetch); },
      chunk);
}

template <class Format>
void pack_tile(const uint8_t* weights, size_t row_bytes, int64_t k, int64_t first_row, int64_t n_rows, uint8_t* out) {
  repack_tile<Format>(TileRows(weights, row_bytes, first_row, n_rows), k / kQKK, out, NextTilePrefetch());
}

template <class Format>
constexpr GemmKernel gemm_kernel_of() {
  return {&kPackQ8_K, kTileRows, multiply<Format>, tile_bytes<Format>, pack_tile<Format>, false, true};
}

}  // namespace

const ActivationPacker kPackQ8_K{batch_bytes_q8_K, pack_q8_K};

constinit const GemmKernel kGemmQ4_K = gemm_kernel_of<Q4_KFormat>();
constinit const GemmKernel kGemmQ5_K = gemm_kernel_of<Q5_KFormat>();
constinit const GemmKernel kGemmQ6_K = gemm_kernel_of<Q6_KFormat>();

}  // namespace mnemo::kernels::avx512
