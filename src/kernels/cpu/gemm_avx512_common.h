// Building blocks of the AVX-512 GEMM kernels (gemm_avx512*.cpp). Include only from translation
// units compiled with the AVX-512 flags. Everything has internal linkage (an unnamed namespace)
// for the reason given in avx2_helpers.h: no inline function or template instantiation made
// with these flags may become the program-wide copy.
//
// Layout of a weight tile: 16 weight rows side by side. Each run of 32 elements ("unit") of the
// 16 rows becomes 8 vectors; vector g holds, in lane r, the four levels 4g..4g+3 of row r as
// unsigned bytes. VNNI's dpbusd then multiplies each lane's four bytes by the same four
// activation bytes (a 32-bit broadcast straight from memory) and adds them to the lane: sixteen
// output elements advance by four products per instruction, and each lane only ever sees its own
// row.
#pragma once

#include <immintrin.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "util/token_mask.h"

namespace mnemo::kernels::avx512::gemm {
namespace {

inline constexpr int kTileRows = 16;
inline constexpr int kUnit = 32;        // elements per transposed unit
inline constexpr int kMaxChunkRows = 8; // activation rows whose accumulators stay in registers

inline size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }

// The pairing of rows in the vectors transpose_unit takes: vector p holds row kPairFirst[p] in
// its low 256 bits and row kPairFirst[p] + 4 in its high ones, so that the lanes come out in row
// order.
inline constexpr int kPairFirst[8] = {0, 1, 2, 3, 8, 9, 10, 11};

// z[p] = the 32 levels of rows kPairFirst[p] and kPairFirst[p] + 4. Writes out[g], lane r = bytes
// 4g..4g+3 of row r's levels: an 8x8 transpose of 32-bit words in each 256-bit half.
inline void transpose_unit(const __m512i* z, __m512i* out) {
  __m512i t[8];
  for (int p = 0; p < 8; p += 2) {
    t[p] = _mm512_unpacklo_epi32(z[p], z[p + 1]);
    t[p + 1] = _mm512_unpackhi_epi32(z[p], z[p + 1]);
  }
  // u[k] / v[k]: rows 0-7 / 8-15, groups k (low 128 bits of each half) and k + 4 (high).
  const __m512i u[4] = {_mm512_unpacklo_epi64(t[0], t[2]), _mm512_unpackhi_epi64(t[0], t[2]),
                        _mm512_unpacklo_epi64(t[1], t[3]), _mm512_unpackhi_epi64(t[1], t[3])};
  const __m512i v[4] = {_mm512_unpacklo_epi64(t[4], t[6]), _mm512_unpackhi_epi64(t[4], t[6]),
                        _mm512_unpacklo_epi64(t[5], t[7]), _mm512_unpackhi_epi64(t[5], t[7])};
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm512_shuffle_i32x4(u[k], v[k], _MM_SHUFFLE(2, 0, 2, 0));
    out[k + 4] = _mm512_shuffle_i32x4(u[k], v[k], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// The single-row path does not transpose the weights: per row it takes the dot product of a
// unit with the activations in the elements' own lanes (p[r], eight 32-bit partial sums), then
// reduces the 16 rows' partial sums into vectors with one row per lane. The integer sums are
// exact, so the per-lane values equal those of the transposed path.
// first_half, lane r = sum of p[r]'s lanes 0-3; second_half = sum of its lanes 4-7.
inline void reduce_rows(const __m256i* p, __m512i& first_half, __m512i& second_half) {
  __m256i q[8];
  for (int i = 0; i < 8; ++i) {
    // Per 128 bits: [row 2i: 0+2, row 2i+1: 0+2, row 2i: 1+3, row 2i+1: 1+3].
    q[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2 * i], p[2 * i + 1]),
                            _mm256_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  }
  __m256i r[4];
  for (int i = 0; i < 4; ++i) {
    // [rows 4i..4i+3: sums of lanes 0-3 | the same rows: sums of lanes 4-7].
    r[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(q[2 * i], q[2 * i + 1]),
                            _mm256_unpackhi_epi64(q[2 * i], q[2 * i + 1]));
  }
  const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(r[0]), r[1], 1);
  const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(r[2]), r[3], 1);
  first_half = _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0));
  second_half = _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1));
}

// The same from pairs: p[i] holds row kPairFirst[i]'s eight partial sums in its low 256 bits and
// row kPairFirst[i] + 4's in its high ones (the layout transpose_unit takes).
inline void reduce_row_pairs(const __m512i* p, __m512i& first_half, __m512i& second_half) {
  __m512i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * i], p[2 * i + 1]), _mm512_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  }
  // r[j], 128 bits at a time: rows 8j..8j+3 (lanes 0-3 sums, lanes 4-7 sums), then rows
  // 8j+4..8j+7 (the same).
  __m512i r[2];
  for (int j = 0; j < 2; ++j) {
    r[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(q[2 * j], q[2 * j + 1]), _mm512_unpackhi_epi64(q[2 * j], q[2 * j + 1]));
  }
  first_half = _mm512_shuffle_i32x4(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0));
  second_half = _mm512_shuffle_i32x4(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1));
}

// Two rows' 32 bytes side by side.
inline __m512i join(__m256i low, __m256i high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

// 16 bytes of packed nibbles from each of two rows -> [low nibbles, high nibbles] per row (the
// element order of the 32-element formats and of a K format's 64-element run).
inline __m512i unpack_nibbles2(const uint8_t* a, const uint8_t* b) {
  const __m256i a2 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m256i b2 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m512i both = join(a2, b2);
  // Shift the second copy of each row (128-bit lanes 1 and 3) to bring its high nibbles down.
  const __m512i shifted = _mm512_mask_srli_epi32(both, 0xf0f0, both, 4);
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f));
}

// The 16 rows of a tile; rows past the end repeat the last one (their lanes are computed but
// never stored).
struct TileRows {
  const uint8_t* row[kTileRows];
  int valid;
  TileRows(const uint8_t* weights, size_t row_bytes, int64_t first, int64_t end) {
    valid = static_cast<int>(end - first < kTileRows ? end - first : kTileRows);
    for (int r = 0; r < kTileRows; ++r) {
      row[r] = weights + static_cast<size_t>(first + (r < valid ? r : valid - 1)) * row_bytes;
    }
  }
  __mmask16 store_mask() const { return static_cast<__mmask16>((1u << valid) - 1); }
  // The 32-bit word at byte `offset` of every row. Sixteen scalar loads through the stack beat
  // vpgatherdd on Zen 4 by a wide margin.
  __m512i gather_words(size_t offset) const {
    alignas(64) uint32_t words[kTileRows];
    for (int r = 0; r < kTileRows; ++r) std::memcpy(&words[r], row[r] + offset, sizeof(uint32_t));
    return _mm512_load_si512(words);
  }
  // The half at byte `offset` (low half of the word) of every row, as floats.
  __m512 gather_halves(size_t offset) const { return low_halves(gather_words(offset)); }
  static __m512 low_halves(__m512i words) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)); }
  static __m512 high_halves(__m512i words) { return low_halves(_mm512_srli_epi32(words, 16)); }
};

// Where the caller goes on streaming weight rows after this call (at least row_end).
inline int64_t stream_end(const GemmArgs& args) { return std::max(args.row_end, args.stream_row_end); }

// The weights are streamed from memory once, 16 rows in lockstep, which the hardware prefetcher
// follows poorly; so while a tile is repacked, its successor (contiguous bytes) is requested a
// slice per unit.
class NextTilePrefetch {
 public:
  NextTilePrefetch() = default;  // fetches nothing
  // [begin, begin + bytes), a slice per step over `steps` steps.
  NextTilePrefetch(const void* begin, size_t bytes, int64_t steps)
      : next_(static_cast<const char*>(begin)), end_(next_ + bytes) {
    const size_t lines = (bytes + 63) / 64;
    per_step_ = steps > 0 ? (lines + static_cast<size_t>(steps) - 1) / static_cast<size_t>(steps) : lines;
  }
  // The rows of the tile starting at next_row (none past where the caller streams to).
  NextTilePrefetch(const GemmArgs& args, int64_t next_row, int64_t n_units)
      : NextTilePrefetch(reinterpret_cast<const char*>(args.weights) + static_cast<size_t>(next_row) * args.weight_row_bytes,
                         static_cast<size_t>(std::clamp<int64_t>(stream_end(args) - next_row, 0, kTileRows)) * args.weight_row_bytes,
                         n_units) {}
  void step() {
    for (size_t i = 0; i < per_step_ && next_ < end_; ++i, next_ += 64) _mm_prefetch(next_, _MM_HINT_T1);
  }

 private:
  const char* next_ = nullptr;
  const char* end_ = nullptr;
  size_t per_step_ = 0;
};

// A thread's repacked tile, reused across calls (grows to the largest k seen).
class TileBuffer {
 public:
  uint8_t* get(size_t bytes) {
    if (storage_.size() * sizeof(Line) < bytes) storage_.resize((bytes + sizeof(Line) - 1) / sizeof(Line));
    return storage_.data()->bytes;
  }

 private:
  struct alignas(64) Line {
    uint8_t bytes[64];
  };
  std::vector<Line> storage_;
};

inline TileBuffer& thread_tile_buffer() {
  thread_local TileBuffer buffer;
  return buffer;
}

// A second one, for the single-row path's partial sums.
inline TileBuffer& thread_partial_buffer() {
  thread_local TileBuffer buffer;
  return buffer;
}

// Stores the valid lanes of a tile's outputs; masked stores are slow on Zen 4 even with a full
// mask, so a full tile uses the plain one.
inline void store_outputs(float* y, __mmask16 mask, __m512 v) {
  if (mask == 0xffff) {
    _mm512_storeu_ps(y, v);
  } else {
    _mm512_mask_storeu_ps(y, mask, v);
  }
}

// Folds a tile's outputs o..o+15 (the `valid` lanes) into a row's lanes: the larger value, on a
// tie the lower index, so that the order in which a thread meets the tiles does not matter.
inline void fold_argmax(ArgmaxLanes& lanes, __mmask16 valid, int64_t o, __m512 v) {
  v = _mm512_min_ps(_mm512_set1_ps(FLT_MAX), v);  // +inf counts as the largest float; NaN stays NaN
  const __m512 best = _mm512_load_ps(lanes.value);
  const __m512i best_index = _mm512_load_si512(lanes.index);
  const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(o)),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 larger = _mm512_mask_cmp_ps_mask(valid, v, best, _CMP_GT_OQ);
  const __mmask16 tie_lower = _mm512_mask_cmp_ps_mask(valid, v, best, _CMP_EQ_OQ) & _mm512_cmplt_epi32_mask(index, best_index);
  _mm512_store_ps(lanes.value, _mm512_mask_mov_ps(best, larger | tie_lower, v));
  _mm512_store_si512(lanes.index, _mm512_mask_mov_epi32(best_index, larger | tie_lower, index));
}

// A tile's outputs o..o+15 of activation row `row`: to y, or folded into the row's argmax lanes.
inline void finish_outputs(const GemmArgs& args, int64_t row, int64_t o, __mmask16 mask, __m512 v) {
  if (args.argmax_rows != nullptr && args.argmax_rows[row] != 0) {
    const uint64_t* allowed = args.argmax_masks != nullptr ? args.argmax_masks[row] : nullptr;
    if (allowed != nullptr) mask &= static_cast<__mmask16>(mask_bits16(allowed, o));
    fold_argmax(args.argmax_lanes[row], mask, o, v);
  } else {
    store_outputs(args.y + row * args.y_stride + o, mask, v);
  }
}

// acc + dpbusd(w, the four activation bytes at p in every lane). (GCC 12 issues the broadcast
// as a separate load; folding it into the instruction by hand measured no faster on Zen 4.)
inline __m512i dpbusd_broadcast(__m512i acc, __m512i w, const int8_t* p) {
  int32_t word;
  std::memcpy(&word, p, sizeof(word));
  return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(word));
}

// A batch of packed activations: rows in groups of kMaxChunkRows (the last group shorter); a
// group block by block; in a block, the group's rows one fixed-size record after another. A
// chunk of the batched kernels is one group: it walks a single pointer and finds each row's
// record at an offset known at compile time. (With a pointer per row and field the chunk needed
// more general registers than there are and reloaded them from the stack in its inner loop.)
template <class Record>
struct ActivationBatch {
  static size_t bytes(int64_t n_blocks, int64_t n_rows) {
    return round_up_64(sizeof(Record) * static_cast<size_t>(n_blocks * n_rows));
  }
  // Row `row` of n_rows, block b.
  static Record* record(void* batch, int64_t n_blocks, int64_t n_rows, int64_t row, int64_t b) {
    const int64_t first = row / kMaxChunkRows * kMaxChunkRows;
    const int64_t in_group = std::min<int64_t>(kMaxChunkRows, n_rows - first);
    return static_cast<Record*>(batch) + (first * n_blocks + b * in_group + (row - first));
  }
  // Block 0 of the group that starts at first_row (a multiple of kMaxChunkRows); block b of it
  // is kRows records further per block, kRows being the group's rows.
  static const Record* group(const uint8_t* batch, int64_t n_blocks, int64_t first_row) {
    return reinterpret_cast<const Record*>(batch) + first_row * n_blocks;
  }
};

// Calls f.template operator()<N>(first_row) over [0, n_rows) in chunks of kMaxChunkRows rows and
// one shorter chunk, so that each chunk's accumulators are a fixed-size array in registers.
template <class F>
inline void for_each_row_chunk(int64_t n_rows, F&& f) {
  int64_t j = 0;
  for (; j + kMaxChunkRows <= n_rows; j += kMaxChunkRows) f.template operator()<kMaxChunkRows>(j);
  switch (n_rows - j) {
    case 1: f.template operator()<1>(j); break;
    case 2: f.template operator()<2>(j); break;
    case 3: f.template operator()<3>(j); break;
    case 4: f.template operator()<4>(j); break;
    case 5: f.template operator()<5>(j); break;
    case 6: f.template operator()<6>(j); break;
    case 7: f.template operator()<7>(j); break;
    default: break;
  }
}

// The lanes of the tile starting at row o that hold rows before row_end.
inline __mmask16 tile_store_mask(int64_t o, int64_t row_end) {
  const int64_t valid = std::min<int64_t>(kTileRows, row_end - o);
  return static_cast<__mmask16>((1u << valid) - 1);
}

// Batched products take the weight tiles a group at a time and multiply each chunk of
// activation rows by every tile of the group before the next chunk: the chunk's activations stay
// in the L1 cache while the group's tiles (in L2) are reused. A tile at a time cycled all the
// activation rows (32 x ~900 bytes: more than L1) through L1 for every tile, and the output
// projection's batch-32 product took 22.3 ms instead of about 18 on 2 threads (prepacked).
inline constexpr int64_t kGroupTiles = 4;
// Up to this many chunks of rows (a decode batch of 32), a call's first group goes tile by tile.
inline constexpr int64_t kColdTileByTileChunks = 4;

// f(first, end) over [row_begin, row_end) in groups of kGroupTiles tiles.
template <class F>
inline void for_each_tile_group(int64_t row_begin, int64_t row_end, F&& f) {
  for (int64_t g = row_begin; g < row_end; g += kGroupTiles * kTileRows) f(g, std::min(row_end, g + kGroupTiles * kTileRows));
}

inline int64_t tiles_in(int64_t first, int64_t end) { return (end - first + kTileRows - 1) / kTileRows; }

// How many chunks for_each_row_chunk makes of n_rows.
inline int64_t row_chunks(int64_t n_rows) { return (n_rows + kMaxChunkRows - 1) / kMaxChunkRows; }

// A batched product over tiles repacked per call, a group at a time: the group's tiles are
// repacked into the thread's buffer, then each chunk of activation rows meets every one of them.
// The chunks request the whole next group from memory; the first group's repacks each request
// their next tile. The format supplies
//   repack(const TileRows& rows, uint8_t* out, NextTilePrefetch prefetch), `repack_steps` steps;
//   chunk.template operator()<kRows>(tile, first_row, o, store_mask, NextTilePrefetch&), which
//   steps the prefetch once per block of `n_blocks`.
template <class Repack, class Chunk>
void multiply_in_groups(const GemmArgs& args, int64_t n_blocks, size_t tile_bytes, int64_t repack_steps, Repack&& repack,
                        Chunk&& chunk) {
  uint8_t* group = thread_tile_buffer().get(static_cast<size_t>(kGroupTiles) * tile_bytes);
  const auto rows_from = [&](int64_t from, int64_t to) {  // the bytes of weight rows [from, to)
    return static_cast<size_t>(std::max<int64_t>(0, to - from)) * args.weight_row_bytes;
  };
  const auto row_at = [&](int64_t o) { return args.weights + static_cast<size_t>(o) * args.weight_row_bytes; };
  const auto tile_in_group = [&](int64_t first, int64_t o) { return group + static_cast<size_t>((o - first) / kTileRows) * tile_bytes; };
  for_each_tile_group(args.row_begin, args.row_end, [&](int64_t first, int64_t end) {
    for (int64_t o = first; o < end; o += kTileRows) {
      const int64_t next = o + kTileRows;
      const size_t next_bytes = first == args.row_begin ? rows_from(next, std::min(end, next + kTileRows)) : 0;
      repack(TileRows(args.weights, args.weight_row_bytes, o, args.row_end), tile_in_group(first, o),
             NextTilePrefetch(row_at(next), next_bytes, repack_steps));
    }
    NextTilePrefetch next_group(row_at(end), rows_from(end, std::min(stream_end(args), end + kGroupTiles * kTileRows)),
                                n_blocks * row_chunks(args.n_rows) * tiles_in(first, end));
    for_each_row_chunk(args.n_rows, [&]<int kRows>(int64_t first_row) {
      for (int64_t o = first; o < end; o += kTileRows) {
        chunk.template operator()<kRows>(tile_in_group(first, o), first_row, o, tile_store_mask(o, args.row_end), next_group);
      }
    });
  });
}

// A batched product over tiles repacked at load (GemmArgs::tiles), a group at a time as
// multiply_in_groups takes them; each group requests the next one from memory over its work, the
// last one the group after the range when the caller streams on (GemmArgs::stream_row_end). The
// first group goes tile by tile (see below). Every output element is computed by the same chunk
// call in either order.
template <class Chunk>
void multiply_prepacked(const GemmArgs& args, int64_t n_blocks, size_t tile_bytes, Chunk&& chunk) {
  const auto tile_at = [&](int64_t o) { return args.tiles + static_cast<size_t>(o / kTileRows) * tile_bytes; };
  for_each_tile_group(args.row_begin, args.row_end, [&](int64_t first, int64_t end) {
    const int64_t next_end = std::min(stream_end(args), end + kGroupTiles * kTileRows);
    if (first == args.row_begin && row_chunks(args.n_rows) > 1 && row_chunks(args.n_rows) <= kColdTileByTileChunks) {
      // The first group comes from memory (unless the caller's previous call fetched it): tile
      // by tile, each meeting every chunk of rows while the rest of the group and the next one
      // arrive, rather than every tile cold for the first chunk. (7% faster for the default
      // model's K-format matrices at batch 32, with their weights from memory.) With many
      // chunks (a prefill) the cold pass is a small part of the group's work, and tile by tile
      // would cycle all the rows' activations through L1 for every tile.
      NextTilePrefetch prefetch(tile_at(first + kTileRows), static_cast<size_t>(tiles_in(first + kTileRows, next_end)) * tile_bytes,
                                n_blocks * row_chunks(args.n_rows) * tiles_in(first, end));
      for (int64_t o = first; o < end; o += kTileRows) {
        for_each_row_chunk(args.n_rows, [&]<int kRows>(int64_t first_row) {
          chunk.template operator()<kRows>(tile_at(o), first_row, o, tile_store_mask(o, args.row_end), prefetch);
        });
      }
      return;
    }
    NextTilePrefetch prefetch(tile_at(end), static_cast<size_t>(tiles_in(end, next_end)) * tile_bytes,
                              n_blocks * row_chunks(args.n_rows) * tiles_in(first, end));
    for_each_row_chunk(args.n_rows, [&]<int kRows>(int64_t first_row) {
      for (int64_t o = first; o < end; o += kTileRows) {
        chunk.template operator()<kRows>(tile_at(o), first_row, o, tile_store_mask(o, args.row_end), prefetch);
      }
    });
  });
}

// Whether a call reads the tiles repacked at load: matmul's ranges always start on a tile; a
// single activation row reads them only where they are no larger than the file's rows (that
// product is bound by the bytes it reads).
inline bool reads_prepacked(const GemmArgs& args, bool one_row_reads_tiles) {
  return args.tiles != nullptr && args.row_begin % kTileRows == 0 && (args.n_rows > 1 || one_row_reads_tiles);
}

static_assert(kMaxChunkRows == 8, "for_each_row_chunk lists the shorter chunks by hand");

}  // namespace
}  // namespace mnemo::kernels::avx512::gemm
