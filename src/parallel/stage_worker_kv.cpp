// StageWorker's replication and restores (stage_worker.h): KV out to a replica holder after each
// microbatch, into the pool or a replica store as it arrives, a restore onto a spare, and the
// coordinator's KV cache pulling, pushing and copying blocks.
#include <algorithm>
#include <cstring>

#include "parallel/stage_worker.h"
#include "parallel/token_kv.h"

namespace mnemo::parallel {
namespace {

// Stores each slot's token KV into `pool`; every slot checked first.
Status scatter_slots(const StageKv& kv, KvStorage& pool, std::vector<uint8_t>& written) {
  const uint32_t token_bytes = token_kv_bytes(pool.layout(), pool.layout().n_layers);
  if (kv.token_bytes != token_bytes) return make_error("KV of {} bytes a token where this layout has {}", kv.token_bytes, token_bytes);
  for (const auto& [block, slot] : kv.slots) {
    if (block < 0 || block >= pool.n_blocks() || slot < 0 || slot >= pool.layout().block_size) {
      return make_error("KV for slot {} of block {}, outside a pool of {} blocks of {}", slot, block, pool.n_blocks(),
                        pool.layout().block_size);
    }
  }
  for (size_t i = 0; i < kv.slots.size(); ++i) {
    scatter_token_kv(pool, kv.slots[i].first, kv.slots[i].second, kv.bytes.data() + i * token_bytes);
    written[static_cast<size_t>(kv.slots[i].first)] = 1;
  }
  return ok_status();
}

// Every written block of `pool` as kv frames of at most kMaxKvFrameBytes, stamped `step`.
std::vector<StageFrame> gather_blocks(const KvStorage& pool, const std::vector<uint8_t>& written, const StageKv& what,
                                      uint64_t step) {
  std::vector<StageFrame> frames;
  const uint32_t token_bytes = token_kv_bytes(pool.layout(), pool.layout().n_layers);
  const int32_t block_size = pool.layout().block_size;
  const size_t blocks_per_frame = std::max<size_t>(1, kMaxKvFrameBytes / (static_cast<size_t>(token_bytes) * block_size));
  for (BlockId block = 0; block < pool.n_blocks(); ++block) {
    if (written[static_cast<size_t>(block)] == 0) continue;
    if (frames.empty() || frames.back().kv.slots.size() >= blocks_per_frame * static_cast<size_t>(block_size)) {
      StageFrame frame;
      frame.kind = StageFrameKind::kKv;
      frame.step = step;
      // What the target keeps it as: a stage's own KV is a replica there, a replica its own.
      frame.kv = {what.layer_begin, what.layer_end, !what.replica, {}, token_bytes, {}, pool.layout().n_kv_heads};
      frames.push_back(std::move(frame));
    }
    StageKv& kv = frames.back().kv;
    for (int32_t slot = 0; slot < block_size; ++slot) {
      kv.slots.emplace_back(block, slot);
      kv.bytes.resize(kv.bytes.size() + token_bytes);
      gather_token_kv(pool, block, slot, kv.bytes.data() + kv.bytes.size() - token_bytes);
    }
  }
  return frames;
}

}  // namespace

Status StageWorker::take_kv(const StageFrame& frame) {
  const StageKv& kv = frame.kv;
  if (!kv.replica) {
    std::lock_guard lock(model_mutex_);
    if (model_ == nullptr) return make_error("stage at {} is not set up for KV", endpoint());
    if (kv.layer_begin != setup_.layer_begin || kv.layer_end != setup_.layer_end ||
        (kv.kv_heads != 0 && kv.kv_heads != kv_->layout().n_kv_heads)) {
      return make_error("KV of layers [{}, {}), {} KV heads, for a stage of [{}, {}), {}", kv.layer_begin, kv.layer_end, kv.kv_heads,
                        setup_.layer_begin, setup_.layer_end, kv_->layout().n_kv_heads);
    }
    return scatter_slots(kv, *kv_, written_);
  }
  std::lock_guard lock(replica_mutex_);
  if (model_layers_ == 0) return make_error("stage at {} is not set up for KV", endpoint());
  if (kv.layer_end > model_layers_) {
    return make_error("a replica of layers [{}, {}) of a model of {}", kv.layer_begin, kv.layer_end, model_layers_);
  }
  const int32_t kv_heads = kv.kv_heads > 0 ? kv.kv_heads : replica_layout_.n_kv_heads;
  auto it = replicas_.find(kv.layer_begin);
  if (it == replicas_.end() || it->second.layer_end != kv.layer_end || it->second.kv->layout().n_kv_heads != kv_heads) {
    KvLayout layout = replica_layout_;
    layout.n_layers = kv.layer_end - kv.layer_begin;
    layout.n_kv_heads = kv_heads;
    const int32_t n_blocks = replica_n_blocks_;
    ReplicaStore store{kv.layer_end, std::make_unique<KvStorage>(layout, n_blocks),
                       std::vector<uint8_t>(static_cast<size_t>(n_blocks), 0)};
    it = replicas_.insert_or_assign(kv.layer_begin, std::move(store)).first;
  }
  return scatter_slots(kv, *it->second.kv, it->second.written);
}

Status StageWorker::replicate(const StageFrame& rows, const std::string& holder) {
  StageFrame frame;
  frame.kind = StageFrameKind::kKv;
  frame.step = rows.step;
  frame.microbatch = rows.microbatch;
  {
    std::lock_guard lock(model_mutex_);
    frame.kv.layer_begin = setup_.layer_begin;
    frame.kv.layer_end = setup_.layer_end;
    frame.kv.replica = true;
    frame.kv.token_bytes = token_kv_bytes(kv_->layout(), kv_->layout().n_layers);
    frame.kv.kv_heads = kv_->layout().n_kv_heads;
    frame.kv.slots = written_slots(rows.sequences, setup_.block_size);
    frame.kv.bytes.resize(frame.kv.slots.size() * frame.kv.token_bytes);
    for (size_t i = 0; i < frame.kv.slots.size(); ++i) {
      gather_token_kv(*kv_, frame.kv.slots[i].first, frame.kv.slots[i].second, frame.kv.bytes.data() + i * frame.kv.token_bytes);
    }
  }
  const Status sent = link_->send(holder, frame, options_.send_timeout_seconds);
  if (!sent.ok()) return make_error("stage at {}: replica holder {}: {}", endpoint(), holder, sent.error().message());
  tokens_replicated_ += frame.kv.slots.size();
  return ok_status();
}

// Sends every block written of the KV asked for (this stage's own, or a replica it holds) to
// route[0] in frames of at most kMaxKvFrameBytes, then says so to the coordinator.
Status StageWorker::restore(const StageFrame& request) {
  const std::string& target = request.route.front();
  std::vector<StageFrame> frames;
  if (!request.kv.replica) {
    std::lock_guard lock(model_mutex_);
    if (model_ == nullptr) return make_error("stage at {} is not set up: nothing to restore", endpoint());
    if (request.kv.layer_begin != setup_.layer_begin || request.kv.layer_end != setup_.layer_end) {
      return make_error("a restore of layers [{}, {}) from a stage of [{}, {})", request.kv.layer_begin, request.kv.layer_end,
                        setup_.layer_begin, setup_.layer_end);
    }
    frames = gather_blocks(*kv_, written_, request.kv, request.step);
  } else {
    std::lock_guard lock(replica_mutex_);
    const auto it = replicas_.find(request.kv.layer_begin);
    if (it == replicas_.end() || it->second.layer_end != request.kv.layer_end) {
      return make_error("stage at {} holds no replica of layers [{}, {})", endpoint(), request.kv.layer_begin,
                        request.kv.layer_end);
    }
    frames = gather_blocks(*it->second.kv, it->second.written, request.kv, request.step);
  }
  for (const StageFrame& frame : frames) {
    const Status sent = link_->send(target, frame, options_.send_timeout_seconds);
    if (!sent.ok()) return make_error("stage at {}: restore onto {}: {}", endpoint(), target, sent.error().message());
  }
  {
    std::lock_guard lock(queue_mutex_);
    ++stats_.restores;
  }
  StageFrame done;
  done.kind = StageFrameKind::kRestored;
  done.step = request.step;
  return link_->send(request.route.back(), done, options_.send_timeout_seconds);
}

Status StageWorker::run_block_op(const StageFrame& request) {
  Status done = request.kind == StageFrameKind::kPull   ? pull(request)
                : request.kind == StageFrameKind::kPush ? push(request)
                                                        : copy_blocks(request);
  if (!done.ok() || request.kind == StageFrameKind::kPull) return done;  // a pull's answer is its KV
  StageFrame ack;
  ack.kind = StageFrameKind::kRestored;
  ack.step = request.step;
  ack.microbatch = request.microbatch;
  return link_->send(request.route.back(), ack, options_.send_timeout_seconds);
}

Status StageWorker::pull(const StageFrame& request) {
  StageFrame answer;
  answer.kind = StageFrameKind::kKv;
  answer.step = request.step;
  answer.microbatch = request.microbatch;
  {
    std::lock_guard lock(model_mutex_);
    if (model_ == nullptr) return make_error("stage at {} is not set up: no KV to pull", endpoint());
    const KvLayout& layout = kv_->layout();
    if (request.kv.layer_begin != setup_.layer_begin || request.kv.layer_end != setup_.layer_end ||
        request.kv.kv_heads != layout.n_kv_heads) {
      return make_error("a pull of layers [{}, {}), {} KV heads, from a stage of [{}, {}), {}", request.kv.layer_begin,
                        request.kv.layer_end, request.kv.kv_heads, setup_.layer_begin, setup_.layer_end, layout.n_kv_heads);
    }
    const uint32_t token_bytes = token_kv_bytes(layout, layout.n_layers);
    const size_t bytes = request.blocks.size() * static_cast<size_t>(layout.block_size) * token_bytes;
    if (bytes > kMaxKvFrameBytes) return make_error("a pull of {} bytes of KV: at most {} a frame", bytes, kMaxKvFrameBytes);
    for (BlockId block : request.blocks) {
      if (block < 0 || block >= kv_->n_blocks()) return make_error("a pull of block {} of a pool of {}", block, kv_->n_blocks());
    }
    answer.kv = {setup_.layer_begin, setup_.layer_end, false, {}, token_bytes, std::vector<uint8_t>(bytes), layout.n_kv_heads};
    uint8_t* out = answer.kv.bytes.data();
    for (BlockId block : request.blocks) {
      for (int32_t slot = 0; slot < layout.block_size; ++slot, out += token_bytes) {
        answer.kv.slots.emplace_back(block, slot);
        gather_token_kv(*kv_, block, slot, out);
      }
    }
  }
  return link_->send(request.route.back(), answer, options_.send_timeout_seconds);
}

Status StageWorker::push(const StageFrame& request) {
  MNEMO_RETURN_IF_ERROR(take_kv(request));  // into this stage's own pool (the frame's kv is not a replica's)
  if (request.replicas.empty()) return ok_status();
  StageFrame replica;
  replica.kind = StageFrameKind::kKv;
  replica.step = request.step;
  replica.kv = request.kv;
  replica.kv.replica = true;
  const Status sent = link_->send(request.replicas.front(), replica, options_.send_timeout_seconds);
  if (!sent.ok()) return make_error("stage at {}: replica holder {}: {}", endpoint(), request.replicas.front(), sent.error().message());
  return ok_status();
}

Status StageWorker::copy_blocks(const StageFrame& request) {
  std::lock_guard lock(model_mutex_);
  if (model_ == nullptr) return make_error("stage at {} is not set up: no KV to copy", endpoint());
  for (const auto& [from, to] : request.block_copies) {
    if (from < 0 || from >= kv_->n_blocks() || to < 0 || to >= kv_->n_blocks() || from == to) {
      return make_error("a copy of block {} into {} in a pool of {}", from, to, kv_->n_blocks());
    }
  }
  const auto copy_in = [&](KvStorage& pool, std::vector<uint8_t>& written) {
    for (const auto& [from, to] : request.block_copies) {
      std::memcpy(pool.block(to), pool.block(from), pool.block_bytes());
      written[static_cast<size_t>(to)] = written[static_cast<size_t>(from)];
    }
  };
  copy_in(*kv_, written_);
  // The replicas this stage holds are of the same block ids: the copy is made there too, so a
  // spare restored from one has it.
  std::lock_guard replica_lock(replica_mutex_);
  for (auto& [layer_begin, store] : replicas_) copy_in(*store.kv, store.written);
  return ok_status();
}

}  // namespace mnemo::parallel
