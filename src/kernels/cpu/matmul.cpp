// matmul: quantise the activations once per activation format, then hand out tiles of weight
// rows to the pool's threads on demand. Each tile's weights are read once and used for every
// activation row, so a batch costs one pass over the weights.
//
// With a GEMM kernel (gemm.h) the activations are packed in its layout; otherwise each element
// is one vec_dot of the weight row and the quantised activation row. Either way an output
// element is computed by one thread, in an order fixed by the kernel, which is what makes the
// result independent of the batch and of the threads.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {
namespace {

// Below this many multiply-adds, waking the pool costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 16;
// Packing many rows is worth spreading over the pool (at 1 << 16 the batch-32 products of the
// default model's attention output, 1024 wide, packed on one thread: 5% slower).
constexpr int64_t kMinParallelPackElements = 1 << 13;
// Tiles a thread takes at a time from its share (ThreadPool::parallel_shares): a few kernel tile
// groups, so that a thread that is done with its share steals in steps short enough not to be
// waited for long.
constexpr int64_t kShareGrainTiles = 8;
// Rows of a tile on the vec_dot path (a multiple of every GEMM kernel's tile_rows is not
// needed there).
constexpr int64_t kFallbackTileRows = 16;

// How one task's activations are prepared and multiplied.
struct TaskPlan {
  const GemmKernel* gemm = nullptr;          // null: vec_dot per element
  const TypeKernels* weight_kernels = nullptr;
  const uint8_t* activations = nullptr;      // the packed batch or the quantised rows
  size_t activation_row_bytes = 0;           // of the quantised rows (vec_dot path)
  int64_t tile_rows = kFallbackTileRows;
  int64_t first_tile = 0;                    // in the concatenated tile numbering
};

// One activation format in use: either a GEMM packer or a vec_dot_type's quantiser.
struct Format {
  const ActivationPacker* packer = nullptr;
  const TypeKernels* quantizer = nullptr;  // when packer is null; null too for F32 (x as is)
  size_t row_bytes = 0;    // of a quantised row (quantizer formats)
  size_t batch_bytes = 0;  // of all n_rows rows
  size_t offset = 0;       // in scratch, bytes
};

// argmax_rows / argmax_lanes: as GemmArgs's (this thread's lanes), for a kernel that folds them.
void multiply_tiles(const MatmulTask& task, const TaskPlan& plan, int64_t n_rows, int64_t row_begin, int64_t row_end,
                    int64_t stream_row_end, const uint8_t* argmax_rows, ArgmaxLanes* argmax_lanes,
                    const uint64_t* const* argmax_masks) {
  const WeightMatrix& w = *task.w;
  if (plan.gemm != nullptr) {
    const GemmArgs args{w.data,  w.row_bytes(),  w.tiles,          w.in_features, row_begin,    row_end,
                        plan.activations, n_rows, task.y, w.out_features, stream_row_end, argmax_rows,
                        argmax_lanes,     argmax_masks};
    plan.gemm->multiply(args);
    return;
  }
  const auto vec_dot = plan.weight_kernels->vec_dot;
  const size_t weight_row_bytes = w.row_bytes();
  for (int64_t o = row_begin; o < row_end; ++o) {
    const uint8_t* weight_row = w.data + static_cast<size_t>(o) * weight_row_bytes;
    for (int64_t r = 0; r < n_rows; ++r) {
      task.y[r * w.out_features + o] =
          vec_dot(w.in_features, weight_row, plan.activations + static_cast<size_t>(r) * plan.activation_row_bytes);
    }
  }
}

}  // namespace

void matmul_many(std::span<const MatmulTask> tasks, const float* x, int64_t n_rows, ThreadPool& pool,
                 MatmulScratch& scratch, ArgmaxRows* argmax) {
  if (argmax != nullptr) argmax->folded = false;
  if (n_rows <= 0 || tasks.empty()) return;
  assert(argmax == nullptr || (tasks.size() == 1 && static_cast<int64_t>(argmax->wanted.size()) == n_rows));
  assert(argmax == nullptr || argmax->masks.empty() || static_cast<int64_t>(argmax->masks.size()) == n_rows);
  const int64_t k = tasks[0].w->in_features;

  // Plan every task and collect the distinct activation formats (at most a few).
  std::vector<TaskPlan> plans(tasks.size());
  std::vector<Format> formats;
  std::vector<size_t> format_of(tasks.size());
  size_t scratch_bytes = 0;
  int64_t total_tiles = 0;
  int64_t work = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const WeightMatrix& w = *tasks[t].w;
    assert(w.in_features == k);
    TaskPlan& plan = plans[t];
    plan.weight_kernels = type_kernels(w.type);
    assert(plan.weight_kernels != nullptr && plan.weight_kernels->vec_dot != nullptr);
    plan.gemm = gemm_kernel(w.type);
    Format format;
    if (plan.gemm != nullptr) {
      format.packer = plan.gemm->packer;
      format.batch_bytes = format.packer->batch_bytes(k, n_rows);
      plan.tile_rows = plan.gemm->tile_rows;
    } else if (plan.weight_kernels->vec_dot_type != DType::F32) {
      format.quantizer = type_kernels(plan.weight_kernels->vec_dot_type);
      assert(k % dtype_info(plan.weight_kernels->vec_dot_type).block_elems == 0);
      format.row_bytes = row_bytes(plan.weight_kernels->vec_dot_type, k);
      format.batch_bytes = static_cast<size_t>(n_rows) * format.row_bytes;
    }
    const auto same = [&](const Format& f) { return f.packer == format.packer && f.quantizer == format.quantizer; };
    auto found = std::find_if(formats.begin(), formats.end(), same);
    if (found == formats.end()) {
      format.offset = scratch_bytes;
      scratch_bytes += (format.batch_bytes + 63) / 64 * 64;
      formats.push_back(format);
      found = formats.end() - 1;
    }
    format_of[t] = static_cast<size_t>(found - formats.begin());
    plan.first_tile = total_tiles;
    total_tiles += (w.out_features + plan.tile_rows - 1) / plan.tile_rows;
    work += w.out_features * k * n_rows;
  }

  // Quantise (pack) the activations once per format.
  if (scratch.activations.size() * 64 < scratch_bytes) scratch.activations.resize(scratch_bytes / 64 + 1);
  // Empty where every format takes x as is (F32 without a GEMM): nothing is packed then.
  uint8_t* base = scratch.activations.empty() ? nullptr : scratch.activations.front().bytes;
  const auto pack_rows = [&](int64_t begin, int64_t end, int) {
    for (const Format& f : formats) {
      for (int64_t r = begin; r < end; ++r) {
        if (f.packer != nullptr) {
          f.packer->pack(x + r * k, k, r, n_rows, base + f.offset);
        } else if (f.quantizer != nullptr) {
          f.quantizer->quantize_activations(x + r * k, base + f.offset + static_cast<size_t>(r) * f.row_bytes, k);
        }
      }
    }
  };
  if (pool.size() > 1 && n_rows * k >= kMinParallelPackElements) {
    pool.parallel_for(n_rows, pack_rows);
  } else {
    pack_rows(0, n_rows, 0);
  }
  for (size_t t = 0; t < tasks.size(); ++t) {
    const Format& f = formats[format_of[t]];
    const bool raw = f.packer == nullptr && f.quantizer == nullptr;
    plans[t].activations = raw ? reinterpret_cast<const uint8_t*>(x) : base + f.offset;
    plans[t].activation_row_bytes = raw ? static_cast<size_t>(k) * sizeof(float) : f.row_bytes;
  }

  // Rows wanted only through their largest output: folded by the kernel where it can, into a
  // set of lanes per thread.
  const bool fold = argmax != nullptr && plans[0].gemm != nullptr && plans[0].gemm->folds_argmax;
  if (fold) {
    argmax->folded = true;
    argmax->sets = pool.size();
    argmax->lanes.resize(static_cast<size_t>(argmax->sets * n_rows));
    for (ArgmaxLanes& lanes : argmax->lanes) lanes.clear();
  }

  // Tiles of all tasks, numbered one after the other; [begin, end) of them, the caller going on
  // to stream_end.
  const auto run_tiles = [&](int64_t begin, int64_t end, int64_t stream_end, int thread) {
    size_t t = 0;
    while (begin < end) {
      while (plans[t].first_tile + (tasks[t].w->out_features + plans[t].tile_rows - 1) / plans[t].tile_rows <= begin) ++t;
      const TaskPlan& plan = plans[t];
      const int64_t task_tiles = (tasks[t].w->out_features + plan.tile_rows - 1) / plan.tile_rows;
      const int64_t stop = std::min(end, plan.first_tile + task_tiles);
      const auto row_of = [&](int64_t tile) { return std::min(tasks[t].w->out_features, (tile - plan.first_tile) * plan.tile_rows); };
      multiply_tiles(tasks[t], plan, n_rows, row_of(begin), row_of(stop), row_of(std::min(stream_end, plan.first_tile + task_tiles)),
                     fold ? argmax->wanted.data() : nullptr, fold ? argmax->lanes.data() + thread * n_rows : nullptr,
                     fold && !argmax->masks.empty() ? argmax->masks.data() : nullptr);
      begin = stop;
    }
  };
  if (pool.size() == 1 || work < kMinParallelWork) {
    run_tiles(0, total_tiles, total_tiles, 0);
  } else {
    // Each thread streams one share of the weights front to back; one that is done helps with
    // the others' in short pieces from their backs.
    pool.parallel_shares(total_tiles, kShareGrainTiles,
                         [&](int64_t begin, int64_t end, int64_t stream_end, int t) { run_tiles(begin, end, stream_end, t); });
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  if (w.out_features <= 0) return;
  const MatmulTask task{&w, y};
  matmul_many({&task, 1}, x, n_rows, pool, scratch);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool,
            MatmulScratch& scratch, ArgmaxRows& argmax) {
  argmax.folded = false;
  if (w.out_features <= 0) return;
  const MatmulTask task{&w, y};
  matmul_many({&task, 1}, x, n_rows, pool, scratch, &argmax);
}

PackedTiles prepack(WeightMatrix& w) {
  const GemmKernel* gemm = gemm_kernel(w.type);
  if (gemm == nullptr || gemm->pack_tile == nullptr || w.out_features <= 0) return {};
  const size_t tile_bytes = gemm->tile_bytes(w.in_features);
  const int64_t n_tiles = (w.out_features + gemm->tile_rows - 1) / gemm->tile_rows;
  PackedTiles packed(static_cast<size_t>(n_tiles) * tile_bytes);
  for (int64_t t = 0; t < n_tiles; ++t) {
    gemm->pack_tile(w.data, w.row_bytes(), w.in_features, t * gemm->tile_rows, w.out_features,
                    packed.data() + static_cast<size_t>(t) * tile_bytes);
  }
  w.tiles = packed.data();
  return packed;
}

size_t prepacked_bytes(const WeightMatrix& w) {
  const GemmKernel* gemm = gemm_kernel(w.type);
  if (gemm == nullptr || gemm->pack_tile == nullptr || w.out_features <= 0) return 0;
  const int64_t n_tiles = (w.out_features + gemm->tile_rows - 1) / gemm->tile_rows;
  return PackedTiles::allocated_bytes(static_cast<size_t>(n_tiles) * gemm->tile_bytes(w.in_features));
}

bool prepacked_tiles_replace_rows(const WeightMatrix& w) {
  const GemmKernel* gemm = gemm_kernel(w.type);
  return gemm != nullptr && gemm->one_row_reads_tiles;
}

void dequantize_row(const WeightMatrix& w, int64_t index, float* out) {
  assert(index >= 0 && index < w.out_features);
  const TypeKernels* kernels = type_kernels(w.type);
  assert(kernels != nullptr);
  kernels->to_float(w.data + static_cast<size_t>(index) * w.row_bytes(), out, w.in_features);
}

}  // namespace mnemo::kernels
