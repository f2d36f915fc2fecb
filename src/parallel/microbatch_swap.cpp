#include "parallel/microbatch_swap.h"

#include <chrono>
#include <cstring>

#include "parallel/token_kv.h"
#include "util/thread_name.h"

namespace mnemo::parallel {

MicrobatchSwap::MicrobatchSwap(KvStorage& host, KvStorage& device, bool overlap)
    : host_(host),
      device_(device),
      overlap_(overlap),
      layer_bytes_(host.layout().layer_elems() * host.layout().element_bytes()),
      slot_of_(static_cast<size_t>(host.n_blocks()), kNoBlock),
      thread_([this] { copy_loop(); }) {}

MicrobatchSwap::~MicrobatchSwap() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MicrobatchSwap::copy_in(int32_t layer) {
  const size_t offset = static_cast<size_t>(layer) * layer_bytes_;
  for (size_t slot = 0; slot < in_.size(); ++slot) {
    std::memcpy(device_.block(static_cast<BlockId>(slot)) + offset, host_.block(in_[slot]) + offset, layer_bytes_);
  }
}

void MicrobatchSwap::copy_loop() {
  name_this_thread("mnemo-swap");
  uint64_t done = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || job_ != done; });
      if (stopping_) return;
      done = job_;
    }
    // in_ is the compute thread's until it publishes a job and again once every layer is in.
    for (int32_t layer = 0; layer < host_.layout().n_layers; ++layer) {
      copy_in(layer);
      std::lock_guard lock(mutex_);
      layers_copied_ = layer + 1;
      cv_.notify_all();
    }
  }
}

Status MicrobatchSwap::run(Batch& batch, int32_t first_layer, const std::function<Status(const Batch&)>& layers) {
  const int32_t block_size = host_.layout().block_size;
  // The blocks the ranges reach, each once (sequences may share a prefix's blocks).
  in_.clear();
  std::vector<std::vector<BlockId>> tables;
  std::vector<size_t> needed;  // per sequence: the blocks its ranges reach
  const auto forget_slots = [&] {  // slot_of_ is all kNoBlock between microbatches
    for (BlockId id : in_) slot_of_[static_cast<size_t>(id)] = kNoBlock;
  };
  for (SequenceInput& seq : batch.sequences) {
    const int32_t end = seq.ranges.empty() ? 0 : seq.ranges.back().end();
    needed.push_back(static_cast<size_t>((end + block_size - 1) / block_size));
    if (seq.block_table.size() < needed.back()) {
      forget_slots();
      return make_error("a block table of {} blocks does not reach position {}", seq.block_table.size(), end - 1);
    }
    for (size_t b = 0; b < needed.back(); ++b) {
      const BlockId id = seq.block_table[b];
      if (id < 0 || id >= host_.n_blocks()) {
        forget_slots();
        return make_error("block id {} outside the stage's {} blocks", id, host_.n_blocks());
      }
      if (slot_of_[static_cast<size_t>(id)] != kNoBlock) continue;
      slot_of_[static_cast<size_t>(id)] = static_cast<BlockId>(in_.size());
      in_.push_back(id);
    }
  }
  if (static_cast<int32_t>(in_.size()) > device_.n_blocks()) {
    forget_slots();
    return make_error("a microbatch of {} blocks, the stage's pool holds {}", in_.size(), device_.n_blocks());
  }
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    SequenceInput& seq = batch.sequences[s];
    tables.push_back(seq.block_table);
    seq.block_table.resize(needed[s]);
    for (BlockId& id : seq.block_table) id = slot_of_[static_cast<size_t>(id)];
  }
  {
    std::lock_guard lock(mutex_);
    layers_copied_ = 0;
    ++job_;
  }
  cv_.notify_all();
  double waited = 0;
  if (!overlap_) {
    const auto started = std::chrono::steady_clock::now();
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return layers_copied_ == host_.layout().n_layers; });
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  batch.before_layer = [&](int32_t layer) {
    const auto started = std::chrono::steady_clock::now();
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return layers_copied_ > layer - first_layer; });
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  Status status = layers(batch);
  {  // every layer in before in_ changes (a failed pass may not have waited for all)
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return layers_copied_ == host_.layout().n_layers; });
  }
  batch.before_layer = nullptr;
  // The blocks the ranges wrote go back whole (their other slots came in with them).
  std::vector<uint8_t> written(in_.size(), 0);
  for (const auto& [slot, position] : written_slots(batch.sequences, block_size)) written[static_cast<size_t>(slot)] = 1;
  for (size_t s = 0; s < batch.sequences.size(); ++s) batch.sequences[s].block_table = std::move(tables[s]);
  for (size_t slot = 0; status.ok() && slot < in_.size(); ++slot) {
    if (written[slot] == 0) continue;
    std::memcpy(host_.block(in_[slot]), device_.block(static_cast<BlockId>(slot)), host_.block_bytes());
    ++stats_.blocks_out;
  }
  stats_.blocks_in += in_.size();
  stats_.wait_seconds += waited;
  ++stats_.microbatches;
  forget_slots();
  return status;
}

}  // namespace mnemo::parallel
