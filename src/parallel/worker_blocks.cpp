#include "parallel/worker_blocks.h"

#include <algorithm>

namespace mnemo::parallel {
namespace {

// `blocks` cut into runs whose share of a worker fits one frame.
std::vector<std::span<const BlockId>> frame_runs(std::span<const BlockId> blocks, const KvLayout& layout, const KvShare& share) {
  const size_t block_bytes = static_cast<size_t>(token_share_bytes(layout, share)) * static_cast<size_t>(layout.block_size);
  const size_t per_frame = std::max<size_t>(1, kMaxKvFrameBytes / std::max<size_t>(1, block_bytes));
  std::vector<std::span<const BlockId>> runs;
  for (size_t i = 0; i < blocks.size(); i += per_frame) runs.push_back(blocks.subspan(i, std::min(per_frame, blocks.size() - i)));
  return runs;
}

StageKv share_header(const KvShare& share) {
  StageKv kv;
  kv.layer_begin = share.layer_begin;
  kv.layer_end = share.layer_end;
  kv.kv_heads = share.n_heads();
  return kv;
}

Status send(const WorkerGroup& group, size_t worker, const StageFrame& frame, std::string_view what) {
  const Status sent = group.link.send(group.workers[worker], frame, group.timeout_seconds);
  if (!sent.ok()) return make_error("{} to worker {} ({}): {}", what, worker, group.workers[worker], sent.error().message());
  return ok_status();
}

}  // namespace

Status pull_blocks(const WorkerGroup& group, std::span<const BlockId> blocks, KvStorage& into) {
  if (blocks.empty()) return ok_status();
  const KvLayout& layout = into.layout();
  const uint64_t step = group.answers.begin();
  struct Request {
    size_t worker;
    std::span<const BlockId> blocks;
  };
  std::vector<Request> requests;
  std::vector<bool> covered(static_cast<size_t>(layout.n_kv_heads), false);
  for (size_t w = 0; w < group.workers.size(); ++w) {
    const KvShare& share = group.shares[w];
    // A tensor rank (every layer) whose heads earlier ranks sent adds nothing.
    const bool every_layer = share.layer_begin == 0 && share.layer_end == layout.n_layers;
    const auto heads_begin = covered.begin() + share.head_begin, heads_end = covered.begin() + share.head_end;
    if (every_layer && std::all_of(heads_begin, heads_end, [](bool c) { return c; })) continue;
    if (every_layer) std::fill(heads_begin, heads_end, true);
    for (std::span<const BlockId> run : frame_runs(blocks, layout, share)) {
      StageFrame frame;
      frame.kind = StageFrameKind::kPull;
      frame.step = step;
      frame.microbatch = static_cast<uint32_t>(requests.size());
      frame.route = {group.link.endpoint()};
      frame.kv = share_header(share);
      frame.blocks.assign(run.begin(), run.end());
      MNEMO_RETURN_IF_ERROR(send(group, w, frame, "KV pull"));
      requests.push_back({w, run});
    }
  }
  MNEMO_RETURN_IF_ERROR(group.answers.await(requests.size(), group.timeout_seconds, "KV pull"));
  for (auto& [index, answer] : group.answers.take_arrived()) {
    if (index >= requests.size()) return make_error("KV pull {}: an answer to request {} of {}", step, index, requests.size());
    const Request& r = requests[index];
    const KvShare& share = group.shares[r.worker];
    const uint32_t token_bytes = token_share_bytes(layout, share);
    const size_t slots = r.blocks.size() * static_cast<size_t>(layout.block_size);
    if (answer.kind != StageFrameKind::kKv || answer.kv.token_bytes != token_bytes || answer.kv.slots.size() != slots ||
        answer.kv.bytes.size() != slots * token_bytes) {
      return make_error("KV pull {}: worker {} ({}) answered {} slots of {} bytes, not {} of {}", step, r.worker,
                        group.workers[r.worker], answer.kv.slots.size(), answer.kv.token_bytes, slots, token_bytes);
    }
    for (size_t i = 0; i < slots; ++i) {
      const BlockId block = r.blocks[i / static_cast<size_t>(layout.block_size)];
      const auto slot = static_cast<int32_t>(i % static_cast<size_t>(layout.block_size));
      if (answer.kv.slots[i] != std::make_pair(block, slot)) {
        return make_error("KV pull {}: worker {} sent slot {} of block {} for slot {} of block {}", step, r.worker,
                          answer.kv.slots[i].second, answer.kv.slots[i].first, slot, block);
      }
      scatter_token_share(into, share, block, slot, answer.kv.bytes.data() + i * token_bytes);
    }
  }
  return ok_status();
}

Status push_blocks(const WorkerGroup& group, std::span<const BlockId> blocks, const KvStorage& from) {
  if (blocks.empty()) return ok_status();
  const KvLayout& layout = from.layout();
  const uint64_t step = group.answers.begin();
  const size_t n = group.workers.size();
  uint32_t sent = 0;
  for (size_t w = 0; w < n; ++w) {
    const KvShare& share = group.shares[w];
    const uint32_t token_bytes = token_share_bytes(layout, share);
    for (std::span<const BlockId> run : frame_runs(blocks, layout, share)) {
      StageFrame frame;
      frame.kind = StageFrameKind::kPush;
      frame.step = step;
      frame.microbatch = sent;
      frame.route = {group.link.endpoint()};
      if (group.replicate && n > 1) frame.replicas = {group.workers[(w + 1) % n]};
      frame.kv = share_header(share);
      frame.kv.token_bytes = token_bytes;
      frame.kv.bytes.resize(run.size() * static_cast<size_t>(layout.block_size) * token_bytes);
      uint8_t* out = frame.kv.bytes.data();
      for (BlockId block : run) {
        for (int32_t slot = 0; slot < layout.block_size; ++slot, out += token_bytes) {
          frame.kv.slots.emplace_back(block, slot);
          gather_token_share(from, share, block, slot, out);
        }
      }
      MNEMO_RETURN_IF_ERROR(send(group, w, frame, "KV push"));
      ++sent;
    }
  }
  return group.answers.await(sent, group.timeout_seconds, "KV push");
}

Status copy_blocks(const WorkerGroup& group, std::span<const std::pair<BlockId, BlockId>> copies) {
  if (copies.empty()) return ok_status();
  StageFrame frame;
  frame.kind = StageFrameKind::kCopy;
  frame.step = group.answers.begin();
  frame.route = {group.link.endpoint()};
  frame.block_copies.assign(copies.begin(), copies.end());
  for (size_t w = 0; w < group.workers.size(); ++w) {
    frame.microbatch = static_cast<uint32_t>(w);
    MNEMO_RETURN_IF_ERROR(send(group, w, frame, "KV copy"));
  }
  return group.answers.await(group.workers.size(), group.timeout_seconds, "KV copy");
}

}  // namespace mnemo::parallel
