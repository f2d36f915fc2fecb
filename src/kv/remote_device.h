// The device tier's bytes when they live in other processes: under model parallelism each worker
// holds its share of every block (a pipeline stage its layers, a tensor rank its KV heads;
// parallel/), while the coordinator's KvCache keeps the bookkeeping and the host and disk tiers.
// The cache's own device storage is then a staging area: before it reads a device block's bytes
// (to demote it, write it through to disk, export it) it pulls them from the workers; after it
// writes some (a chunk brought back from the host or disk) it pushes them; a copy-on-write is a
// copy on every worker. So the tiers, the disk and their durability work across shards with
// one implementation of the cache's policy, at the price of a round trip to the workers per
// batch of blocks moved (docs/parallel.md).
//
// Failure behaviour: an operation returns an Error once the workers cannot do it (after any
// repair the implementation attempts); the cache then treats the chunks involved as lost (a
// chunk that was leaving the device is dropped and later recomputed, SPEC P5; a chunk that was
// coming back is recomputed), never as present with bytes it does not have.
#pragma once

#include <span>
#include <utility>

#include "kv/kv_layout.h"
#include "util/result.h"

namespace mnemo {

class KvStorage;

class RemoteDevice {
 public:
  virtual ~RemoteDevice() = default;
  // The workers' bytes of `blocks` into `into` (the cache's device storage, the full layout).
  virtual Status pull(std::span<const BlockId> blocks, KvStorage& into) = 0;
  // `from`'s bytes of `blocks` to the workers, each its share.
  virtual Status push(std::span<const BlockId> blocks, const KvStorage& from) = 0;
  // Each (from, to): block `to` becomes a copy of block `from` on every worker. No `to` is
  // also a `from`.
  virtual Status copy(std::span<const std::pair<BlockId, BlockId>> copies) = 0;
};

}  // namespace mnemo
