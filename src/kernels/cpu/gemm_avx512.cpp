// AVX-512 VNNI GEMM kernels of the 32-element block formats (Q4_0, Q5_0, Q8_0 against Q8_0
// activations; Q4_1, Q5_1 against Q8_1) and their activation packers. See gemm.h for the
// invariance argument and gemm_avx512_common.h for the tile layout.
//
// Weights become unsigned levels u (Q8_0: q + 128; Q4_0: q + 8; Q5_0: q + 16; Q4_1/Q5_1: q), and
// per block each lane computes the exact integer sum(u * a) - offset * sum(a), the activation
// sums coming packed with the activations. Per element, in block order:
//   acc = fma(float(S_b), d_w * d_a, acc)                 [+ acc = fma(m_w, s_a, acc) for _1]
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/block_q8_1.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx512_common.h"
#include "kernels/cpu/q8_0_block_avx512.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx512 {
namespace {

using namespace gemm;

// ---- Packed Q8_0 / Q8_1 activations, a record per row and block (see ActivationBatch): the
// levels, the scale as a float, and either -offset * the sum of the levels (Q8_0; the correction
// for weights carrying that offset, so there is one packer per offset and the kernels broadcast
// it straight from memory) or ggml's s = d * sum (Q8_1).
struct RecordQ8_0 {
  int8_t qs[kQK];
  float d;
  int32_t correction;
};
struct RecordQ8_1 {
  int8_t qs[kQK];
  float d;
  float s;
};

template <class Record>
size_t batch_bytes(int64_t k, int64_t n_rows) {
  return ActivationBatch<Record>::bytes(k / kQK, n_rows);
}

template <int kOffset>
void pack_q8_0(const float* x, int64_t k, int64_t row, int64_t n_rows, void* batch) {
  for (int64_t b = 0; b < k / kQK; ++b) {
    RecordQ8_0& record = *ActivationBatch<RecordQ8_0>::record(batch, k / kQK, n_rows, row, b);
    const Q8_0Levels levels = quantize_q8_0_block(x + b * kQK);
    store_q8_0_levels(levels, record.qs);
    record.d = simd::half_to_float(levels.d);
    record.correction = -kOffset * q8_0_stored_level_sum(levels);
  }
}

void pack_q8_1(const float* x, int64_t k, int64_t row, int64_t n_rows, void* batch) {
  for (int64_t b = 0; b < k / kQK; ++b) {
    RecordQ8_1& record = *ActivationBatch<RecordQ8_1>::record(batch, k / kQK, n_rows, row, b);
    BlockQ8_1 block;
    avx2::q8_1_quantize_activations(x + b * kQK, &block, kQK);
    std::memcpy(record.qs, block.qs, kQK);
    record.d = simd::half_to_float(block.d);
    record.s = simd::half_to_float(block.s);
  }
}

// ---- Weight formats: the unsigned levels of one block of two rows (levels2(a, b) = [a | b]),
// the offset they carry, whether an m follows d at the start of the block.

// kOneRowReadsTiles: whether a single activation row reads the tiles repacked at load rather
// than the file's rows. Q8_0's tiles take 576 bytes per 16 x 32 elements against the file's 544
// and spare the per-row reduction; the 4- and 5-bit formats' are 64-100% larger than the file's,
// and one row's product is bound by the bytes it reads.
struct Q8_0Format {
  using Record = RecordQ8_0;
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  static constexpr bool kHasMin = false;
  static constexpr bool kOneRowReadsTiles = true;
  static __m512i levels2(const Block& a, const Block& b) {
    return _mm512_xor_si512(join(simd::load256(a.qs), simd::load256(b.qs)), _mm512_set1_epi8(-128));
  }
  static __m256i levels(const Block& a) { return _mm256_xor_si256(simd::load256(a.qs), _mm256_set1_epi8(-128)); }
};
struct Q4_0Format {
  using Record = RecordQ8_0;
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static constexpr bool kHasMin = false;
  static constexpr bool kOneRowReadsTiles = false;
  static __m512i levels2(const Block& a, const Block& b) { return unpack_nibbles2(a.qs, b.qs); }
  static __m256i levels(const Block& a) { return simd::unpack_nibbles(a.qs); }
};
// The two qh words are a byte mask: add 16 where the fifth bit is set.
template <class Block>
__m512i five_bit_levels2(const Block& a, const Block& b) {
  uint32_t bits_a, bits_b;
  std::memcpy(&bits_a, a.qh, sizeof(bits_a));
  std::memcpy(&bits_b, b.qh, sizeof(bits_b));
  const __mmask64 fifth = _cvtu64_mask64((static_cast<uint64_t>(bits_b) << 32) | bits_a);
  const __m512i nibbles = unpack_nibbles2(a.qs, b.qs);
  return _mm512_mask_add_epi8(nibbles, fifth, nibbles, _mm512_set1_epi8(16));
}
template <class Block>
__m256i five_bit_levels(const Block& a) {
  uint32_t bits;
  std::memcpy(&bits, a.qh, sizeof(bits));
  const __m256i nibbles = simd::unpack_nibbles(a.qs);
  return _mm256_mask_add_epi8(nibbles, _cvtu32_mask32(bits), nibbles, _mm256_set1_epi8(16));
}
struct Q5_0Format {
  using Record = RecordQ8_0;
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  static constexpr bool kHasMin = false;
  static constexpr bool kOneRowReadsTiles = false;
  static __m512i levels2(const Block& a, const Block& b) { return five_bit_levels2(a, b); }
  static __m256i levels(const Block& a) { return five_bit_levels(a); }
};
struct Q4_1Format {
  using Record = RecordQ8_1;
  using Block = BlockQ4_1;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kOneRowReadsTiles = false;
  static __m512i levels2(const Block& a, const Block& b) { return unpack_nibbles2(a.qs, b.qs); }
  static __m256i levels(const Block& a) { return simd::unpack_nibbles(a.qs); }
};
struct Q5_1Format {
  using Record = RecordQ8_1;
  using Block = BlockQ5_1;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kOneRowReadsTiles = false;
  static __m512i levels2(const Block& a, const Block& b) { return five_bit_levels2(a, b); }
  static __m256i levels(const Block& a) { return five_bit_levels(a); }
};

// A repacked unit: 8 vectors of levels, the 16 rows' d, and (for _1) their m.
template <class Format>
constexpr size_t unit_bytes() {
  return (8 + 1 + (Format::kHasMin ? 1 : 0)) * sizeof(__m512i);
}

template <class Format>
size_t tile_bytes(int64_t k) {
  return static_cast<size_t>(k / kQK) * unit_bytes<Format>();
}

template <class Format>
void repack_tile(const TileRows& rows, int64_t n_blocks, uint8_t* out, NextTilePrefetch prefetch) {
  using Block = typename Format::Block;
  for (int64_t b = 0; b < n_blocks; ++b, out += unit_bytes<Format>()) {
    __m512i levels[8];
    for (int p = 0; p < 8; ++p) {
      const int r = kPairFirst[p];
      levels[p] = Format::levels2(reinterpret_cast<const Block*>(rows.row[r])[b],
                                  reinterpret_cast<const Block*>(rows.row[r + 4])[b]);
    }
    prefetch.step();
    auto* vectors = reinterpret_cast<__m512i*>(out);
    transpose_unit(levels, vectors);
    // d (and m right after it in the _1 formats) start every block.
    const __m512i words = rows.gather_words(static_cast<size_t>(b) * sizeof(Block));
    _mm512_store_ps(out + 8 * sizeof(__m512i), TileRows::low_halves(words));
    if constexpr (Format::kHasMin) _mm512_store_ps(out + 9 * sizeof(__m512i), TileRows::high_halves(words));
  }
}

template <class Format, int kRows>
void multiply_chunk(const uint8_t* tile, int64_t n_blocks, const GemmArgs& args, int64_t first_row, int64_t o,
                    __mmask16 store_mask, NextTilePrefetch& prefetch) {
  using Record = typename Format::Record;
  __m512 acc[kRows];
  for (int j = 0; j < kRows; ++j) acc[j] = _mm512_setzero_ps();
  const Record* records = ActivationBatch<Record>::group(args.activations, n_blocks, first_row);
  for (int64_t b = 0; b < n_blocks; ++b, tile += unit_bytes<Format>(), records += kRows) {
    prefetch.step();
    const auto* vectors = reinterpret_cast<const __m512i*>(tile);
    __m512i w[8];
    for (int g = 0; g < 8; ++g) w[g] = _mm512_load_si512(vectors + g);
    const __m512 d_w = _mm512_load_ps(tile + 8 * sizeof(__m512i));
    for (int j = 0; j < kRows; ++j) {
      const Record& a = records[j];
      // Two dependency chains (even and odd groups); integer sums are exact in any order.
      __m512i even = _mm512_setzero_si512();
      if constexpr (Format::kOffset != 0) even = _mm512_set1_epi32(a.correction);
      __m512i odd = _mm512_setzero_si512();
      for (int g = 0; g < 8; g += 2) {
        even = dpbusd_broadcast(even, w[g], a.qs + 4 * g);
        odd = dpbusd_broadcast(odd, w[g + 1], a.qs + 4 * g + 4);
      }
      const __m512 sums = _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd));
      acc[j] = _mm512_fmadd_ps(sums, _mm512_mul_ps(d_w, _mm512_set1_ps(a.d)), acc[j]);
      if constexpr (Format::kHasMin) {
        const __m512 m_w = _mm512_load_ps(tile + 9 * sizeof(__m512i));
        acc[j] = _mm512_fmadd_ps(m_w, _mm512_set1_ps(a.s), acc[j]);
      }
    }
  }
  for (int j = 0; j < kRows; ++j) finish_outputs(args, first_row + j, o, store_mask, acc[j]);
}

// One activation row against the weight rows, without repacking (see reduce_rows). Per lane the
// same integer sum and the same float operations as multiply_chunk.
template <class Format>
void multiply_one_row(const GemmArgs& args) {
  using Block = typename Format::Block;
  const int64_t n_blocks = args.k / kQK;
  const auto* records = ActivationBatch<typename Format::Record>::group(args.activations, n_blocks, 0);
  for (int64_t o = args.row_begin; o < args.row_end; o += kTileRows) {
    const TileRows rows(args.weights, args.weight_row_bytes, o, args.row_end);
    NextTilePrefetch prefetch(args, o + kTileRows, n_blocks);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
      prefetch.step();
      const auto& record = records[b];
      const __m512i a = _mm512_broadcast_i64x4(simd::load256(record.qs));
      __m512i partial[8];
      for (int p = 0; p < 8; ++p) {
        const int r = kPairFirst[p];
        const __m512i levels = Format::levels2(reinterpret_cast<const Block*>(rows.row[r])[b],
                                               reinterpret_cast<const Block*>(rows.row[r + 4])[b]);
        partial[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), levels, a);
      }
      __m512i first, second;
      reduce_row_pairs(partial, first, second);
      __m512i sums = _mm512_add_epi32(first, second);
      if constexpr (Format::kOffset != 0) {
        sums = _mm512_add_epi32(_mm512_set1_epi32(record.correction), sums);
      }
      const __m512i words = rows.gather_words(static_cast<size_t>(b) * sizeof(Block));
      const __m512 d_w = TileRows::low_halves(words);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(d_w, _mm512_set1_ps(record.d)), acc);
      if constexpr (Format::kHasMin) acc = _mm512_fmadd_ps(TileRows::high_halves(words), _mm512_set1_ps(record.s), acc);
    }
    finish_outputs(args, 0, o, rows.store_mask(), acc);
  }
}

template <class Format>
void multiply(const GemmArgs& args) {
  const int64_t n_blocks = args.k / kQK;
  const auto chunk = [&]<int kRows>(const uint8_t* tile, int64_t first_row, int64_t o, __mmask16 store_mask,
                                    NextTilePrefetch& prefetch) {
    multiply_chunk<Format, kRows>(tile, n_blocks, args, first_row, o, store_mask, prefetch);
  };
  if (reads_prepacked(args, Format::kOneRowReadsTiles)) {
    multiply_prepacked(args, n_blocks, tile_bytes<Format>(args.k), chunk);
    return;
  }
  if (args.n_rows == 1) {
    multiply_one_row<Format>(args);
    return;
  }
  multiply_in_groups(
      args, n_blocks, tile_bytes<Format>(args.k), n_blocks,
      [&](const TileRows& rows, uint8_t* out, NextTilePrefetch prefetch) { repack_tile<Format>(rows, n_blocks, out, prefetch); },
      chunk);
}

template <class Format>
void pack_tile(const uint8_t* weights, size_t row_bytes, int64_t k, int64_t first_row, int64_t n_rows, uint8_t* out) {
  repack_tile<Format>(TileRows(weights, row_bytes, first_row, n_rows), k / kQK, out, NextTilePrefetch());
}

template <class Format>
constexpr GemmKernel gemm_kernel_of(const ActivationPacker* packer) {
  return {packer, kTileRows, multiply<Format>, tile_bytes<Format>, pack_tile<Format>, Format::kOneRowReadsTiles, true};
}

}  // namespace

const ActivationPacker kPackQ8_0Offset8{batch_bytes<RecordQ8_0>, pack_q8_0<Q4_0Format::kOffset>};
const ActivationPacker kPackQ8_0Offset16{batch_bytes<RecordQ8_0>, pack_q8_0<Q5_0Format::kOffset>};
const ActivationPacker kPackQ8_0Offset128{batch_bytes<RecordQ8_0>, pack_q8_0<Q8_0Format::kOffset>};
const ActivationPacker kPackQ8_1{batch_bytes<RecordQ8_1>, pack_q8_1};

constinit const GemmKernel kGemmQ4_0 = gemm_kernel_of<Q4_0Format>(&kPackQ8_0Offset8);
constinit const GemmKernel kGemmQ5_0 = gemm_kernel_of<Q5_0Format>(&kPackQ8_0Offset16);
constinit const GemmKernel kGemmQ8_0 = gemm_kernel_of<Q8_0Format>(&kPackQ8_0Offset128);
constinit const GemmKernel kGemmQ4_1 = gemm_kernel_of<Q4_1Format>(&kPackQ8_1);
constinit const GemmKernel kGemmQ5_1 = gemm_kernel_of<Q5_1Format>(&kPackQ8_1);

}  // namespace mnemo::kernels::avx512
