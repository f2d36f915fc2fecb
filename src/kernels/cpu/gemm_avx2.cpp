// AVX2 GEMM kernels of the 32-element block formats (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 against
// Q8_0 activations; Q4_1, Q5_1 against Q8_1). Per element, vec_dot decodes the weight block again for
// every activation row and reduces eight lanes at the end; here eight weight rows share the lanes
// of a vector, so a decoded block serves every activation row of the call and each lane
// accumulates its own element. (Gemma 3's tied Q8_0 output projection, 262,144 x 640, is two
// thirds of its multiply-adds; SmolLM2's layers are Q4_1.)
//
// Layout of a tile: 8 weight rows side by side. Each block of 32 elements of the 8 rows becomes
// 8 vectors; vector g holds, in lane r, the levels 4g..4g+3 of row r (Q8_0: signed; the others:
// unsigned, q + offset for the _0 formats; the table formats' levels, signed); then the 8 rows'
// scales (and for _1 their mins) as floats. AVX2 has no VNNI: per vector, maddubs (for Q8_0, of |w| and the activations with w's
// sign) and madd with ones give each lane its four products.
//
// Per element, in block order, the operations of the AVX-512 kernels (gemm_avx512.cpp), so the
// two ISAs give the same bits wherever their activation quantisers agree (both follow ggml's):
//   acc = fma(float(S_b), d_w * d_a, acc)        [+ acc = fma(m_w, s_a, acc) for _1]
// S_b being the exact sum of the block's level products (less offset x the activations' sum).
// The single-row path reads the file's rows and reduces each row's eight partial sums to its
// lane: the integer sums are exact, so it gives the batched path's bits (batch invariance).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/block_q8_1.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/nonlinear_levels.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx2 {
namespace {

constexpr int kTileRows = 8;
// No std::min here: a template instantiated in this file could serve callers elsewhere.
int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
constexpr int kMaxChunkRows = 4;  // activation rows whose accumulators stay in registers

// Packed activation rows, a record per row and block: the levels, the scale as a float, and
// either -offset x the sum of the levels (Q8_0; the correction for weights carrying that offset,
// so there is one packer per offset) or ggml's s = d x sum (Q8_1).
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
  return (sizeof(Record) * static_cast<size_t>(k / kQK * n_rows) + 63) / 64 * 64;
}

template <int kOffset>
void pack_q8_0(const float* x, int64_t k, int64_t row, int64_t /*n_rows*/, void* batch) {
  RecordQ8_0* records = static_cast<RecordQ8_0*>(batch) + row * (k / kQK);
  for (int64_t b = 0; b < k / kQK; ++b) {
    BlockQ8_0 block;
    q8_0_quantize_activations(x + b * kQK, &block, kQK);
    std::memcpy(records[b].qs, block.qs, kQK);
    records[b].d = simd::half_to_float(block.d);
    int32_t sum = 0;
    for (const int8_t q : block.qs) sum += q;
    records[b].correction = -kOffset * sum;
  }
}

void pack_q8_1(const float* x, int64_t k, int64_t row, int64_t /*n_rows*/, void* batch) {
  RecordQ8_1* records = static_cast<RecordQ8_1*>(batch) + row * (k / kQK);
  for (int64_t b = 0; b < k / kQK; ++b) {
    BlockQ8_1 block;
    q8_1_quantize_activations(x + b * kQK, &block, kQK);
    std::memcpy(records[b].qs, block.qs, kQK);
    records[b].d = simd::half_to_float(block.d);
    records[b].s = simd::half_to_float(block.s);
  }
}

// ---- Weight formats: a block's 32 levels, whether they are signed (Q8_0) or carry an offset,
// whether an m follows d at the start of the block, whether one activation row reads the tiles.
// Q8_0's tiles take 288 bytes per 8 x 32 elements against the file's 272 and spare the one-row
// path's reductions; the 4- and 5-bit formats' are 60-100% larger than the file's, and one
// row's product is bound by the bytes it reads.
// The scale d of every format but MXFP4 is the half at the start of the block.
struct HalfScale {
  template <class Rows>
  static __m256 scales(const Rows& rows, int64_t b) { return rows.halves(b, 0); }
};
struct Q8_0Format : HalfScale {
  using Record = RecordQ8_0;
  using Block = BlockQ8_0;
  static constexpr bool kSigned = true, kHasMin = false, kOneRowReadsTiles = true;
  static __m256i levels(const Block& b) { return simd::load256(b.qs); }
};
struct Q4_0Format : HalfScale {
  using Record = RecordQ8_0;
  using Block = BlockQ4_0;
  static constexpr bool kSigned = false, kHasMin = false, kOneRowReadsTiles = false;
  static __m256i levels(const Block& b) { return simd::unpack_nibbles(b.qs); }
};
struct Q5_0Format : HalfScale {
  using Record = RecordQ8_0;
  using Block = BlockQ5_0;
  static constexpr bool kSigned = false, kHasMin = false, kOneRowReadsTiles = false;
  static __m256i levels(const Block& b) { return simd::q5_levels(b.qs, b.qh); }
};
struct Q4_1Format : HalfScale {
  using Record = RecordQ8_1;
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false, kHasMin = true, kOneRowReadsTiles = false;
  static __m256i levels(const Block& b) { return simd::unpack_nibbles(b.qs); }
};
struct Q5_1Format : HalfScale {
  using Record = RecordQ8_1;
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false, kHasMin = true, kOneRowReadsTiles = false;
  static __m256i levels(const Block& b) { return simd::q5_levels(b.qs, b.qh); }
};

// Each code looks up its level in a table: signed levels, as Q8_0's.
inline __m256i table_levels(const int8_t* table, const uint8_t* qs) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table))),
                             simd::unpack_nibbles(qs));
}
struct IQ4_NLFormat : HalfScale {
  using Record = RecordQ8_0;
  using Block = BlockIQ4_NL;
  static constexpr bool kSigned = true, kHasMin = false, kOneRowReadsTiles = false;
  static __m256i levels(const Block& b) { return table_levels(kIq4nlLevels, b.qs); }
};
struct MXFP4Format {
  using Record = RecordQ8_0;
  using Block = BlockMXFP4;
  static constexpr bool kSigned = true, kHasMin = false, kOneRowReadsTiles = false;
  static __m256i levels(const Block& b) { return table_levels(kMxfp4Levels, b.qs); }
  template <class Rows>
  static __m256 scales(const Rows& rows, int64_t b) {
    alignas(32) float d[kTileRows];
    for (int r = 0; r < kTileRows; ++r) d[r] = e8m0_half_to_float(rows.row[r][b].e);
    return _mm256_load_ps(d);
  }
};

template <class Format>
constexpr size_t unit_bytes() {
  return (8 + 1 + (Format::kHasMin ? 1 : 0)) * sizeof(__m256i);
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
  // The 8 rows' half at byte `offset` of block b (d at 0, m at 2), as floats.
  __m256 halves(int64_t b, size_t offset) const {
    alignas(16) uint16_t h[kTileRows];
    for (int r = 0; r < kTileRows; ++r) std::memcpy(&h[r], reinterpret_cast<const uint8_t*>(&row[r][b]) + offset, sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  }
};

// rows[r] = 32 levels of row r (8 words); out[g], lane r = word g of row r.
void transpose_unit(const __m256i* rows, __m256i* out) {
  __m256i t[8];
  for (int p = 0; p < 8; p += 2) {
    t[p] = _mm256_unpacklo_epi32(rows[p], rows[p + 1]);      // words 0,1 | 4,5 of rows p, p+1
    t[p + 1] = _mm256_unpackhi_epi32(rows[p], rows[p + 1]);  // words 2,3 | 6,7
  }
  __m256i u[8];
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);      // word 0 | word 4
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);      // word 1 | word 5
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);  // word 2 | word 6
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);  // word 3 | word 7
  }
  for (int g = 0; g < 4; ++g) {
    out[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
    out[g + 4] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
  }
}

template <class Format>
void repack_tile(const TileRows<typename Format::Block>& rows, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, out += unit_bytes<Format>()) {
    __m256i levels[kTileRows];
    for (int r = 0; r < kTileRows; ++r) levels[r] = Format::levels(rows.row[r][b]);
    __m256i transposed[8];
    transpose_unit(levels, transposed);
    auto* vectors = reinterpret_cast<__m256i*>(out);
    for (int g = 0; g < 8; ++g) _mm256_store_si256(vectors + g, transposed[g]);
    _mm256_store_ps(reinterpret_cast<float*>(out + 8 * sizeof(__m256i)), Format::scales(rows, b));
    if constexpr (Format::kHasMin) _mm256_store_ps(reinterpret_cast<float*>(out + 9 * sizeof(__m256i)), rows.halves(b, 2));
  }
}

template <class Format>
size_t tile_bytes(int64_t k) {
  return static_cast<size_t>(k / kQK) * unit_bytes<Format>();
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

// The integer sums' starting value: the offset's correction, which Q8_1 records do not carry.
template <class Record>
__m256i initial_sum(const Record& a) {
  if constexpr (requires { a.correction; }) {
    return _mm256_set1_epi32(a.correction);
  } else {
    return _mm256_setzero_si256();
  }
}

// acc + the block's term(s) for one element per lane.
template <class Format>
__m256 accumulate(__m256 acc, __m256i sums, __m256 d_w, const typename Format::Record& a, const float* m_w) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(d_w, _mm256_set1_ps(a.d)), acc);
  if constexpr (Format::kHasMin) acc = _mm256_fmadd_ps(_mm256_load_ps(m_w), _mm256_set1_ps(a.s), acc);
  return acc;
}

template <class Format, int kRows>
void multiply_chunk(const uint8_t* tile, int64_t n_blocks, const GemmArgs& args, int64_t first_row, int64_t o, int valid) {
  using Record = typename Format::Record;
  const Record* records = reinterpret_cast<const Record*>(args.activations) + first_row * n_blocks;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kRows];
  for (int j = 0; j < kRows; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b, tile += unit_bytes<Format>()) {
    const auto* vectors = reinterpret_cast<const __m256i*>(tile);
    __m256i sums[kRows];
    for (int j = 0; j < kRows; ++j) sums[j] = initial_sum(records[j * n_blocks + b]);
    for (int g = 0; g < 8; ++g) {
      const __m256i w = _mm256_load_si256(vectors + g);
      const __m256i magnitude = Format::kSigned ? _mm256_sign_epi8(w, w) : w;
      for (int j = 0; j < kRows; ++j) {
        int32_t word;
        std::memcpy(&word, records[j * n_blocks + b].qs + 4 * g, sizeof(word));
        __m256i a = _mm256_set1_epi32(word);
        if constexpr (Format::kSigned) a = _mm256_sign_epi8(a, w);
        sums[j] = _mm256_add_epi32(sums[j], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, a), ones));
      }
    }
    const __m256 d_w = _mm256_load_ps(reinterpret_cast<const float*>(tile + 8 * sizeof(__m256i)));
    const auto* m_w = reinterpret_cast<const float*>(tile + 9 * sizeof(__m256i));
    for (int j = 0; j < kRows; ++j) acc[j] = accumulate<Format>(acc[j], sums[j], d_w, records[j * n_blocks + b], m_w);
  }
  for (int j = 0; j < kRows; ++j) store_outputs(args, first_row + j, o, valid, acc[j]);
}

// The chunks of activation rows against one tile.
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

// Lane r = the sum of p[r]'s eight lanes.
__m256i reduce_rows(const __m256i* p) {
  const __m256i s0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i s4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  // s0123: rows 0-3's sums of lanes 0-3 | of lanes 4-7; s4567 the same for rows 4-7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20), _mm256_permute2x128_si256(s0123, s4567, 0x31));
}

// The weights are streamed from memory once, 8 rows in lockstep, which the hardware prefetcher
// follows poorly: while a tile's rows are multiplied, the next tile's (contiguous bytes) are
// requested a slice per block.
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

// One activation row against the file's rows (see reduce_rows): per lane the integer sum and the
// float operations of multiply_chunk.
template <class Format>
void multiply_one_row(const GemmArgs& args) {
  using Block = typename Format::Block;
  const int64_t n_blocks = args.k / kQK;
  const auto* records = reinterpret_cast<const typename Format::Record*>(args.activations);
  for (int64_t o = args.row_begin; o < args.row_end; o += kTileRows) {
    const TileRows<Block> rows(args.weights, args.weight_row_bytes, o, args.row_end);
    NextRowsPrefetch prefetch(args, o + kTileRows, n_blocks);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
      prefetch.step();
      const __m256i a = simd::load256(records[b].qs);
      __m256i partial[kTileRows];
      for (int r = 0; r < kTileRows; ++r) {
        const __m256i levels = Format::levels(rows.row[r][b]);
        partial[r] = Format::kSigned ? simd::dot_i8_i8(levels, a) : simd::dot_u8_i8(levels, a);
      }
      const __m256i sums = _mm256_add_epi32(initial_sum(records[b]), reduce_rows(partial));
      alignas(32) float m_w[kTileRows];
      if constexpr (Format::kHasMin) _mm256_store_ps(m_w, rows.halves(b, 2));
      acc = accumulate<Format>(acc, sums, Format::scales(rows, b), records[b], m_w);
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
  const int64_t n_blocks = args.k / kQK;
  const size_t bytes = tile_bytes<Format>(args.k);
  const bool prepacked = args.tiles != nullptr && args.row_begin % kTileRows == 0 && (args.n_rows > 1 || Format::kOneRowReadsTiles);
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
  repack_tile<Format>(TileRows<typename Format::Block>(weights, row_bytes, first_row, n_rows), k / kQK, out);
}

template <class Format>
constexpr GemmKernel gemm_kernel_of(const ActivationPacker* packer) {
  return {packer, kTileRows, multiply<Format>, tile_bytes<Format>, pack_tile<Format>, Format::kOneRowReadsTiles, false};
}

}  // namespace

const ActivationPacker kPackQ8_0{batch_bytes<RecordQ8_0>, pack_q8_0<0>};
const ActivationPacker kPackQ8_0Offset8{batch_bytes<RecordQ8_0>, pack_q8_0<8>};
const ActivationPacker kPackQ8_0Offset16{batch_bytes<RecordQ8_0>, pack_q8_0<16>};
const ActivationPacker kPackQ8_1{batch_bytes<RecordQ8_1>, pack_q8_1};

constinit const GemmKernel kGemmQ8_0 = gemm_kernel_of<Q8_0Format>(&kPackQ8_0);
constinit const GemmKernel kGemmQ4_0 = gemm_kernel_of<Q4_0Format>(&kPackQ8_0Offset8);
constinit const GemmKernel kGemmQ5_0 = gemm_kernel_of<Q5_0Format>(&kPackQ8_0Offset16);
constinit const GemmKernel kGemmQ4_1 = gemm_kernel_of<Q4_1Format>(&kPackQ8_1);
constinit const GemmKernel kGemmQ5_1 = gemm_kernel_of<Q5_1Format>(&kPackQ8_1);
constinit const GemmKernel kGemmIQ4_NL = gemm_kernel_of<IQ4_NLFormat>(&kPackQ8_0);
constinit const GemmKernel kGemmMXFP4 = gemm_kernel_of<MXFP4Format>(&kPackQ8_0);

}  // namespace mnemo::kernels::avx2
