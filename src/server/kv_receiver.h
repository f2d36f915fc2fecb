// KV messages arriving for one engine (SPEC M2, D3). A message of whole chunks is inserted into
// the cache at once. A message carrying a slice of its chunks' layers (a prompt's KV streamed
// layer by layer while it was computed) is kept until every layer of those chunks has arrived,
// then inserted as one: the cache never holds a chunk with some of its layers missing.
//
// Assemblies are bounded: at most kMaxAssemblies at a time (a new one pushes out the oldest) and
// none kept past kAssemblyTtl after its first slice (a sender that died mid-stream); an abandoned
// assembly inserts nothing, and its sender's next increment starts again from what the cache
// holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "transfer/kv_message.h"
#include "transfer/kv_transport.h"

namespace mnemo::server {

class KvReceiver {
 public:
  static constexpr size_t kMaxAssemblies = 32;
  static constexpr std::chrono::seconds kAssemblyTtl{60};

  explicit KvReceiver(Engine& engine, uint64_t layout_fingerprint = 0)
      : engine_(engine), layout_fingerprint_(layout_fingerprint) {}
  // The KV layout this instance takes (model + KV type); messages of another are refused. Until
  // it is set (0), every message is.
  void set_layout_fingerprint(uint64_t fingerprint);

  // Acknowledges with the insert's outcome; a slice that completes no assembly yet, once kept
  // (or with the reason it cannot be).
  void receive(transfer::KvMessage&& message, transfer::Acknowledge acknowledge);

  struct Stats {
    uint64_t slices = 0;     // layer slices taken into an assembly
    uint64_t assembled = 0;  // assemblies completed and handed to the cache
    uint64_t abandoned = 0;  // assemblies pushed out or expired unfinished
    size_t pending = 0;      // assemblies waiting for layers now
  };
  Stats stats() const;

 private:
  // Which chunks an assembly is for: namespace, the first chunk's key, the chunk count.
  using Key = std::tuple<uint64_t, uint64_t, size_t>;
  struct Assembly {
    transfer::KvMessage whole;  // the chunks with every layer (payload filled as slices arrive)
    std::vector<bool> have;     // per layer
    uint32_t missing = 0;
    std::chrono::steady_clock::time_point started;
  };
  // The whole message once `slice` completes its assembly; nullopt while layers are missing; an
  // Error if the slice does not fit the assembly its chunks name.
  Result<std::optional<transfer::KvMessage>> take_slice(transfer::KvMessage&& slice, uint64_t layout_fingerprint);
  void drop_stale_locked(std::chrono::steady_clock::time_point now);

  Engine& engine_;
  mutable std::mutex mutex_;  // guards what follows
  uint64_t layout_fingerprint_;
  std::map<Key, Assembly> assemblies_;
  Stats stats_;
};

}  // namespace mnemo::server
