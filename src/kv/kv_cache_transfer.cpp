// KvCache, transfer between instances (SPEC M1, M2, M5): a cached prefix or a running sequence's
// chunks gathered into one region, and another instance's chunks inserted into the host tier.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "kv/kv_cache.h"
#include "kv/chunk_reuse.h"

namespace mnemo {
namespace {

// The key of chunk `chunks - 1` of `tokens` (0 for none): the chain of PrefixIndex::chunk_key.
uint64_t key_of_prefix(uint64_t ns, std::span<const TokenId> tokens, size_t chunk_tokens, size_t chunks) {
  uint64_t key = 0;
  for (size_t i = 0; i < chunks; ++i) key = PrefixIndex::chunk_key(key, ns, tokens.subspan(i * chunk_tokens, chunk_tokens));
  return key;
}
}  // namespace

KvCache::ExportedPrefix KvCache::export_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks,
                                                   int32_t first_chunk, std::vector<uint8_t> staging) {
  take_disk_completions();
  ExportedPrefix out;
  out.payload = std::move(staging);
  out.payload.clear();
  out.first_chunk = std::max(0, first_chunk);
  const std::vector<PrefixIndex::NodeId> path = index_.path(ns, tokens);
  const size_t n = std::min(path.size(), static_cast<size_t>(std::max(0, max_chunks)));
  const auto first = static_cast<size_t>(out.first_chunk);
  if (n <= first) return out;
  out.payload.reserve((n - first) * chunk_bytes());
  for (size_t i = first; i < n; ++i) {
    const PrefixIndex::Chunk c = index_.chunk(path[i]);
    const size_t at = out.payload.size();
    out.payload.resize(at + chunk_bytes());
    uint8_t* to = out.payload.data() + at;
    // Sent in the device's form whatever tier holds it: the receiver converts for its own tiers.
    const auto read_disk = [&] {
      if (disk_codec_.is_identity()) return config_.disk->read(c.key, {to, chunk_bytes()}).ok();
      if (!config_.disk->read(c.key, {disk_buffer_.data(), disk_codec_.block_bytes()}).ok()) return false;
      disk_codec_.decode(disk_buffer_.data(), to, layout().n_layers);
      return true;
    };
    if (c.device != kNoBlock && pull_device(std::span<const BlockId>(&c.device, 1))) {
      std::memcpy(to, device_.block(c.device), chunk_bytes());
    } else if (c.host != kNoBlock && !c.host_compact) {
      const HostCopy copy = host_copy(c);
      copy.codec->decode(copy.bytes, to, layout().n_layers);
    } else if (c.disk != DiskCopy::kPresent || c.disk_compact || !read_disk()) {
      out.payload.resize(at);  // a gap: the chunks after it are useless without it
      break;
    }
    ++out.chunks;
  }
  const auto bs = static_cast<size_t>(block_size());
  out.parent_key = first == 0 ? 0 : index_.chunk(path[first - 1]).key;
  out.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(first * bs),
                    tokens.begin() + static_cast<ptrdiff_t>((first + static_cast<size_t>(out.chunks)) * bs));
  counters_.exported_chunks += out.chunks;
  return out;
}

KvCache::ExportedPrefix KvCache::export_blocks(uint64_t ns, std::span<const TokenId> tokens, const KvTable& table,
                                                   int32_t first_chunk, int32_t end_chunk, std::vector<uint8_t> staging) {
  ExportedPrefix out;
  out.payload = std::move(staging);
  out.payload.clear();
  const auto bs = static_cast<size_t>(block_size());
  const size_t end = std::min({static_cast<size_t>(std::max(0, end_chunk)), table.size(), tokens.size() / bs});
  const auto first = static_cast<size_t>(std::max(0, first_chunk));
  out.first_chunk = static_cast<int32_t>(first);
  if (end <= first || !pull_device(table.blocks().subspan(first, end - first))) return out;
  out.chunks = static_cast<int32_t>(end - first);
  out.parent_key = key_of_prefix(ns, tokens, bs, first);
  out.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(first * bs), tokens.begin() + static_cast<ptrdiff_t>(end * bs));
  out.payload.resize((end - first) * chunk_bytes());
  for (size_t i = first; i < end; ++i) std::memcpy(out.payload.data() + (i - first) * chunk_bytes(), device_.block(table[i]), chunk_bytes());
  counters_.exported_chunks += out.chunks;
  return out;
}

Result<int32_t> KvCache::import_prefix(uint64_t ns, std::span<const TokenId> tokens, std::span<const uint8_t> payload,
                                       uint64_t parent_key, int32_t first_position) {
  const auto chunk_tokens = static_cast<size_t>(block_size());
  if (tokens.size() % chunk_tokens != 0) {
    return make_error("KV import: {} tokens are not whole chunks of {}", tokens.size(), chunk_tokens);
  }
  const size_t n = tokens.size() / chunk_tokens;
  if (payload.size() != n * chunk_bytes()) {
    return make_error("KV import: {} bytes of KV for {} chunks of {} bytes", payload.size(), n, chunk_bytes());
  }
  if ((parent_key == 0) != (first_position == 0) || first_position < 0) {
    return make_error("KV import: chunks from position {} need the key of the chunk before them", first_position);
  }
  take_disk_completions();
  std::optional<PrefixIndex::NodeId> parent = import_parent(ns, parent_key, first_position);
  if (!parent) return make_error(ErrorCode::kNotFound, "KV import: the chunk before position {} is not cached here", first_position);
  // Room first, for the chunks that lack a copy now. Making room may evict any cached chunk, this
  // path's too, so the path is walked only afterwards, rebuilt where eviction removed it; a chunk
  // found without a copy then takes one of the blocks, and the import stops where they run out
  // (never leaving a node without a copy and without children).
  int32_t wanted = 0;
  {
    const std::vector<PrefixIndex::NodeId> existing = indexed_path(*parent, ns, tokens);
    wanted = static_cast<int32_t>(n - existing.size());
    for (const PrefixIndex::NodeId node : existing) wanted += index_.chunk(node).dropped() ? 1 : 0;
  }
  // Into host blocks of the device's type: a replica resumes its stream token for token.
  const bool to_host = has_exact_host();
  if (!to_host && config_.remote_device != nullptr) {
    return make_error(ErrorCode::kUnavailable,
                      "KV import: the device tier is this coordinator's workers' and there is no host tier for the chunks");
  }
  std::vector<BlockId> blocks;
  if (wanted > 0) {
    std::optional<std::vector<BlockId>> got;
    if (to_host) {
      got = allocate_exact_host(wanted);
    } else if (make_room(wanted)) {
      got = device_alloc_.allocate(wanted);
    }
    if (!got) {
      return make_error(ErrorCode::kResourceExhausted, "KV import: no room for {} chunks in the {} tier", wanted,
                        to_host ? "host" : "device");
    }
    blocks = std::move(*got);
  }
  parent = import_parent(ns, parent_key, first_position);
  if (!parent) {  // making room dropped the parent's last trace
    for (BlockId b : blocks) {
      if (to_host) {
        release_host(b);
      } else {
        device_alloc_.release(b);
      }
    }
    return make_error(ErrorCode::kNotFound, "KV import: the chunk before position {} left the cache", first_position);
  }
  return insert_imported(ns, tokens, payload, *parent, first_position, blocks);
}

// Where imported chunks hang: the root, or an indexed chunk (dropped or not: a dropped parent is
// recomputed when used, SPEC P5) at the position before the first.
std::optional<PrefixIndex::NodeId> KvCache::import_parent(uint64_t ns, uint64_t parent_key, int32_t first_position) const {
  if (parent_key == 0) return PrefixIndex::kNoParent;
  const auto node = index_.find_by_key(parent_key);
  if (!node || index_.chunk_namespace(*node) != ns || index_.chunk(*node).position != first_position - 1) return std::nullopt;
  return node;
}

std::vector<PrefixIndex::NodeId> KvCache::indexed_path(PrefixIndex::NodeId parent, uint64_t ns,
                                                       std::span<const TokenId> tokens) const {
  const auto chunk_tokens = static_cast<size_t>(block_size());
  std::vector<PrefixIndex::NodeId> nodes;
  for (size_t i = 0; i < tokens.size() / chunk_tokens; ++i) {
    const auto child = index_.child(parent, ns, tokens.subspan(i * chunk_tokens, chunk_tokens));
    if (!child) break;
    nodes.push_back(parent = *child);
  }
  return nodes;
}

int32_t KvCache::insert_imported(uint64_t ns, std::span<const TokenId> tokens, std::span<const uint8_t> payload,
                                 PrefixIndex::NodeId parent, int32_t first_position, const std::vector<BlockId>& blocks) {
  const auto chunk_tokens = static_cast<size_t>(block_size());
  const bool to_host = has_exact_host();
  const double t = now();
  std::vector<PrefixIndex::NodeId> path;
  int32_t inserted = 0;
  size_t next_block = 0;
  for (size_t i = 0; i < tokens.size() / chunk_tokens; ++i) {
    const auto chunk = tokens.subspan(i * chunk_tokens, chunk_tokens);
    const PrefixIndex::NodeId at = path.empty() ? parent : path.back();
    const std::optional<PrefixIndex::NodeId> found = index_.child(at, ns, chunk);
    if (found && !index_.chunk(*found).dropped()) {
      path.push_back(*found);
      continue;
    }
    if (next_block == blocks.size()) break;  // eviction took more than was planned for
    const PrefixIndex::NodeId node = found ? *found : index_.extend(at, ns, chunk, first_position + static_cast<int32_t>(i), t);
    const BlockId block = blocks[next_block++];
    std::memcpy(to_host ? host_copy(block, false).bytes : device_.block(block), payload.data() + i * chunk_bytes(), chunk_bytes());
    if (to_host) {
      index_.set_host(node, block);
    } else {
      index_.set_device(node, block);  // the allocation's reference is the index's
    }
    path.push_back(node);
    ++inserted;
  }
  for (size_t b = next_block; b < blocks.size(); ++b) {
    if (to_host) {
      release_host(blocks[b]);
    } else {
      device_alloc_.release(blocks[b]);
    }
  }
  index_.mark_path_end(path);
  // Not written through, unlike the chunks computed here: an import is another instance's copy
  // (a replica, a transfer), which keeps its own durable one, and writing and syncing a file per
  // chunk received cost replication more than the copy. An imported chunk reaches this disk tier
  // when the host tier evicts it, as any host copy does.
  eviction_.observe_insert(first_position + static_cast<int32_t>(path.size()), static_cast<int32_t>(path.size()), t);
  counters_.imported_chunks += inserted;
  return inserted;
}

int32_t KvCache::n_available() const {
  int32_t index_only = 0;
  index_.for_each_in(Tier::kDevice, [&](const PrefixIndex::Chunk& c) { index_only += index_only_device(c) ? 1 : 0; });
  // A slab's copies can always leave (nothing pins them), and its block with them.
  return device_alloc_.n_free() + index_only + slabs_.n_slabs();
}

std::vector<uint8_t> KvCache::layer_slices(std::span<const BlockId> blocks, int32_t first_chunk, int32_t chunks,
                                           int32_t layer) const {
  const KvLayout& l = layout();
  const size_t layer_bytes = l.layer_elems() * l.element_bytes();
  std::vector<uint8_t> slices(static_cast<size_t>(chunks) * layer_bytes);
  for (int32_t i = 0; i < chunks; ++i) {
    const BlockId block = blocks[static_cast<size_t>(first_chunk + i)];
    std::memcpy(slices.data() + static_cast<size_t>(i) * layer_bytes,
                device_.block(block) + static_cast<size_t>(layer) * layer_bytes, layer_bytes);
  }
  return slices;
}

}  // namespace mnemo
