#include "server/kv_receiver.h"

#include <algorithm>
#include <cstring>

#include "server/kv_messages.h"

namespace mnemo::server {

void KvReceiver::set_layout_fingerprint(uint64_t fingerprint) {
  std::lock_guard lock(mutex_);
  layout_fingerprint_ = fingerprint;
}

void KvReceiver::receive(transfer::KvMessage&& message, transfer::Acknowledge acknowledge) {
  uint64_t layout = 0;
  {
    std::lock_guard lock(mutex_);
    layout = layout_fingerprint_;
  }
  if (layout == 0) return acknowledge(make_error(ErrorCode::kUnavailable, "this instance does not take KV yet (starting)"));
  if (message.whole()) return insert_kv_message_then(engine_, layout, std::move(message), std::move(acknowledge));
  auto taken = take_slice(std::move(message), layout);
  if (!taken.ok()) return acknowledge(Status(taken.error()));
  if (!taken->has_value()) return acknowledge(ok_status());
  insert_kv_message_then(engine_, layout, std::move(**taken), std::move(acknowledge));
}

Result<std::optional<transfer::KvMessage>> KvReceiver::take_slice(transfer::KvMessage&& slice, uint64_t layout_fingerprint) {
  // Checked here, before anything is kept: the insert checks the rest (keys against tokens).
  if (slice.layout_fingerprint != layout_fingerprint) {
    return make_error("KV of layout {:016x}; this instance's is {:016x} (another model or KV type)",
                      slice.layout_fingerprint, layout_fingerprint);
  }
  if (slice.chunks.empty()) return make_error("a layer slice of no chunks");
  const Key key{slice.ns, slice.chunks.front().key, slice.chunks.size()};
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  drop_stale_locked(now);
  auto it = assemblies_.find(key);
  if (it == assemblies_.end()) {
    if (assemblies_.size() >= kMaxAssemblies) {
      const auto oldest = std::min_element(assemblies_.begin(), assemblies_.end(),
                                           [](const auto& a, const auto& b) { return a.second.started < b.second.started; });
      assemblies_.erase(oldest);
      ++stats_.abandoned;
    }
    Assembly assembly;
    assembly.whole.transfer_id = slice.transfer_id;
    assembly.whole.ns = slice.ns;
    assembly.whole.layout_fingerprint = slice.layout_fingerprint;
    assembly.whole.block_bytes = slice.block_bytes;
    assembly.whole.chunks = slice.chunks;
    assembly.whole.payload.resize(slice.chunks.size() * size_t{slice.block_bytes});
    assembly.have.assign(slice.n_layers, false);
    assembly.missing = slice.n_layers;
    assembly.started = now;
    it = assemblies_.emplace(key, std::move(assembly)).first;
  }
  Assembly& a = it->second;
  if (a.whole.block_bytes != slice.block_bytes || a.have.size() != slice.n_layers || a.whole.chunks != slice.chunks) {
    return make_error("a layer slice that disagrees with the earlier slices of its chunks (chunk size, layers, tokens)");
  }
  const size_t layer_bytes = slice.block_bytes / slice.n_layers;
  const size_t slice_bytes = slice.slice_bytes();
  for (size_t i = 0; i < slice.chunks.size(); ++i) {
    std::memcpy(a.whole.payload.data() + i * slice.block_bytes + slice.layer_begin * layer_bytes,
                slice.payload.data() + i * slice_bytes, slice_bytes);
  }
  for (uint32_t layer = slice.layer_begin; layer < slice.layer_end; ++layer) {
    if (!a.have[layer]) {
      a.have[layer] = true;
      --a.missing;
    }
  }
  ++stats_.slices;
  if (a.missing > 0) return std::optional<transfer::KvMessage>{};
  transfer::KvMessage whole = std::move(a.whole);
  assemblies_.erase(it);
  ++stats_.assembled;
  return std::optional<transfer::KvMessage>(std::move(whole));
}

void KvReceiver::drop_stale_locked(std::chrono::steady_clock::time_point now) {
  for (auto it = assemblies_.begin(); it != assemblies_.end();) {
    if (now - it->second.started > kAssemblyTtl) {
      it = assemblies_.erase(it);
      ++stats_.abandoned;
    } else {
      ++it;
    }
  }
}

KvReceiver::Stats KvReceiver::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.pending = assemblies_.size();
  return s;
}

}  // namespace mnemo::server
