#include "kv/prefix_index.h"

#include <algorithm>

#include "util/check.h"
#include "util/mix64.h"

namespace mnemo {
namespace {

// SplitMix64's next output: cheap, well mixed; equal keys are confirmed by comparing tokens.
uint64_t mix(uint64_t x) { return mix64(x + kSplitMixGamma); }

}  // namespace

PrefixIndex::PrefixIndex(int32_t chunk_tokens) : chunk_tokens_(chunk_tokens) {
  MNEMO_CHECK(chunk_tokens > 0, "chunk size {}", chunk_tokens);
}

uint64_t PrefixIndex::chunk_key(uint64_t parent_key, uint64_t ns, std::span<const TokenId> chunk) {
  uint64_t h = mix(parent_key ^ mix(ns));
  for (TokenId t : chunk) h = mix(h ^ static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;  // 0 names the root
}

PrefixIndex::NodeId PrefixIndex::find_child(NodeId parent, uint64_t key, std::span<const TokenId> chunk) const {
  auto [begin, end] = by_key_.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    const Node& n = at(it->second);
    if (n.parent == parent && std::equal(n.tokens.begin(), n.tokens.end(), chunk.begin(), chunk.end())) return it->second;
  }
  return kRoot;
}

PrefixIndex::Chunk PrefixIndex::to_chunk(NodeId id) const {
  const Node& n = at(id);
  const uint64_t parent_key = n.parent == kRoot ? 0 : at(n.parent).key;
  return Chunk{id,           n.position, n.device,   n.host,     n.disk,       n.host_compact, n.disk_compact,
               n.key,        parent_key, n.last_use, n.end_chunks, n.device_slot, n.ended,       n.reused,
               n.pinned,     n.pinned_until};
}

std::vector<PrefixIndex::Chunk> PrefixIndex::match(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks,
                                                   double now) {
  std::vector<Chunk> out;
  NodeId parent = kRoot;
  uint64_t parent_key = 0;
  const int32_t n_chunks = std::min<int32_t>(max_chunks, static_cast<int32_t>(tokens.size()) / chunk_tokens_);
  for (int32_t c = 0; c < n_chunks; ++c) {
    const auto chunk = tokens.subspan(static_cast<size_t>(c) * static_cast<size_t>(chunk_tokens_), static_cast<size_t>(chunk_tokens_));
    const uint64_t key = chunk_key(parent_key, ns, chunk);
    const NodeId node = find_child(parent, key, chunk);
    if (node == kRoot || at(node).ns != ns) break;
    out.push_back(to_chunk(node));
    set_last_use(at(node), now, /*reused=*/true);
    parent = node;
    parent_key = key;
  }
  if (ghost_capacity_ == 0) {
    while (!out.empty() && out.back().dropped()) out.pop_back();
  }
  return out;
}

std::vector<PrefixIndex::NodeId> PrefixIndex::path(uint64_t ns, std::span<const TokenId> tokens) const {
  std::vector<NodeId> out;
  NodeId parent = kRoot;
  uint64_t parent_key = 0;
  const size_t n_chunks = tokens.size() / static_cast<size_t>(chunk_tokens_);
  for (size_t c = 0; c < n_chunks; ++c) {
    const auto chunk = tokens.subspan(c * static_cast<size_t>(chunk_tokens_), static_cast<size_t>(chunk_tokens_));
    const uint64_t key = chunk_key(parent_key, ns, chunk);
    const NodeId node = find_child(parent, key, chunk);
    if (node == kRoot || at(node).ns != ns) break;
    out.push_back(node);
    parent = node;
    parent_key = key;
  }
  return out;
}

PrefixIndex::NodeId PrefixIndex::extend(NodeId parent, uint64_t ns, std::span<const TokenId> chunk, int32_t position,
                                        double now) {
  MNEMO_CHECK(static_cast<int32_t>(chunk.size()) == chunk_tokens_, "a chunk of {} tokens", chunk.size());
  MNEMO_CHECK(parent == kRoot || at(parent).live, "extending dead node {}", parent);
  const uint64_t key = chunk_key(parent == kRoot ? 0 : at(parent).key, ns, chunk);
  const NodeId existing = find_child(parent, key, chunk);
  if (existing != kRoot) {
    set_last_use(at(existing), now);
    return existing;
  }
  return add_node(parent, ns, key, chunk, position, now);
}

std::optional<PrefixIndex::NodeId> PrefixIndex::child(NodeId parent, uint64_t ns, std::span<const TokenId> chunk) const {
  if (static_cast<int32_t>(chunk.size()) != chunk_tokens_ || (parent != kRoot && !at(parent).live)) return std::nullopt;
  const NodeId node = find_child(parent, chunk_key(parent == kRoot ? 0 : at(parent).key, ns, chunk), chunk);
  if (node == kRoot || at(node).ns != ns) return std::nullopt;
  return node;
}

void PrefixIndex::mark_path_end(std::span<const NodeId> path) {
  for (NodeId id : path) set_end_chunks(at(id), static_cast<int32_t>(path.size()));
}

std::vector<PrefixIndex::NodeId> PrefixIndex::descendants(NodeId node) const {
  // Nodes know their parent only: one pass gathers the children lists (a rare operation).
  std::unordered_multimap<NodeId, NodeId> children;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].live && nodes_[i].parent != kRoot) children.emplace(nodes_[i].parent, id_of(i));
  }
  std::vector<NodeId> out;
  // Depth first; a node is emitted once all its children are.
  std::vector<std::pair<NodeId, bool>> stack = {{node, false}};
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    stack.pop_back();
    if (expanded) {
      if (n != node) out.push_back(n);
      continue;
    }
    stack.emplace_back(n, true);
    const auto [begin, end] = children.equal_range(n);
    for (auto it = begin; it != end; ++it) stack.emplace_back(it->second, false);
  }
  return out;
}

PrefixIndex::NodeId PrefixIndex::add_node(NodeId parent, uint64_t ns, uint64_t key, std::span<const TokenId> chunk,
                                          int32_t position, double now) {
  size_t slot;
  if (free_slots_.empty()) {
    slot = nodes_.size();
    nodes_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  const uint32_t generation = nodes_[slot].generation;
  nodes_[slot] = Node{};
  nodes_[slot].generation = generation;
  const NodeId id = id_of(slot);
  Node& n = at(id);
  n.parent = parent;
  n.ns = ns;
  n.key = key;
  n.tokens.assign(chunk.begin(), chunk.end());
  n.position = position;
  n.last_use = now;
  n.live = true;
  if (parent != kRoot) ++at(parent).children;
  by_key_.emplace(key, id);
  ++live_nodes_;
  tally(n, +1);
  return id;
}

std::vector<BlockId> PrefixIndex::insert(uint64_t ns, std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                                         double now, const std::function<bool(size_t chunk)>& adoptable,
                                         std::vector<NodeId>* path) {
  std::vector<BlockId> kept;
  std::vector<NodeId> own_path;
  if (path == nullptr) path = &own_path;
  NodeId parent = kRoot;
  uint64_t parent_key = 0;
  const size_t n_chunks = std::min(blocks.size(), tokens.size() / static_cast<size_t>(chunk_tokens_));
  for (size_t c = 0; c < n_chunks; ++c) {
    const auto chunk = tokens.subspan(c * static_cast<size_t>(chunk_tokens_), static_cast<size_t>(chunk_tokens_));
    const uint64_t key = chunk_key(parent_key, ns, chunk);
    NodeId node = find_child(parent, key, chunk);
    const bool block_taken = by_location_.count(location_key(Tier::kDevice, blocks[c])) != 0;
    const bool may_adopt = !block_taken && (!adoptable || adoptable(c));
    if (node == kRoot) {
      if (!may_adopt) break;  // the block holds another chunk, or not all of this one's KV
      node = add_node(parent, ns, key, chunk, static_cast<int32_t>(c), now);
      set_device(node, blocks[c]);
      kept.push_back(blocks[c]);
    } else {
      set_last_use(at(node), now);
      if (at(node).device == kNoBlock && may_adopt) {
        set_device(node, blocks[c]);
        kept.push_back(blocks[c]);
      }
    }
    path->push_back(node);
    parent = node;
    parent_key = key;
  }
  for (NodeId id : *path) set_end_chunks(at(id), static_cast<int32_t>(path->size()));
  return kept;
}

std::optional<PrefixIndex::NodeId> PrefixIndex::restore(uint64_t ns, uint64_t parent_key, uint64_t key,
                                                        std::span<const TokenId> chunk, double now, bool compact) {
  if (static_cast<int32_t>(chunk.size()) != chunk_tokens_ || chunk_key(parent_key, ns, chunk) != key) return std::nullopt;
  NodeId parent = kRoot;
  int32_t position = 0;
  if (parent_key != 0) {
    const auto p = find_by_key(parent_key);
    if (!p || at(*p).ns != ns) return std::nullopt;
    parent = *p;
    position = at(parent).position + 1;
  }
  if (find_child(parent, key, chunk) != kRoot) return std::nullopt;  // already known
  const NodeId node = add_node(parent, ns, key, chunk, position, now);
  tally(at(node), -1);
  at(node).disk = DiskCopy::kPresent;
  at(node).disk_compact = compact;
  tally(at(node), +1);
  notify(at(node), ChunkHold::kNone);
  return node;
}

void PrefixIndex::set_device(NodeId node, BlockId block) {
  Node& n = at(node);
  MNEMO_CHECK(n.live, "device copy for dead node {}", node);
  const ChunkHold held = hold_of(n);
  tally(n, -1);
  if (n.device != kNoBlock) by_location_.erase(location_key(Tier::kDevice, n.device));
  n.device = block;
  if (block != kNoBlock) by_location_.emplace(location_key(Tier::kDevice, block), node);
  tally(n, +1);
  notify(n, held);
  forget_if_empty(node);
}

void PrefixIndex::set_device_slot(NodeId node, SlotId slot) {
  Node& n = at(node);
  MNEMO_CHECK(n.live, "device slot for dead node {}", node);
  const ChunkHold held = hold_of(n);
  tally(n, -1);
  if (n.device_slot != kNoBlock) by_location_.erase(location_key(kDeviceSlot, n.device_slot));
  n.device_slot = slot;
  if (slot != kNoBlock) by_location_.emplace(location_key(kDeviceSlot, slot), node);
  tally(n, +1);
  notify(n, held);
  forget_if_empty(node);
}

void PrefixIndex::set_host(NodeId node, BlockId block, bool compact) {
  Node& n = at(node);
  MNEMO_CHECK(n.live, "host copy for dead node {}", node);
  const ChunkHold held = hold_of(n);
  tally(n, -1);
  if (n.host != kNoBlock) by_location_.erase(location_key(n.host_compact ? kCompactHost : Tier::kHost, n.host));
  n.host = block;
  n.host_compact = compact && block != kNoBlock;
  if (block != kNoBlock) by_location_.emplace(location_key(n.host_compact ? kCompactHost : Tier::kHost, block), node);
  tally(n, +1);
  notify(n, held);
  forget_if_empty(node);
}

void PrefixIndex::set_disk(NodeId node, DiskCopy state, bool compact) {
  MNEMO_CHECK(at(node).live, "disk copy for dead node {}", node);
  const ChunkHold held = hold_of(at(node));
  tally(at(node), -1);
  at(node).disk = state;
  at(node).disk_compact = compact && state != DiskCopy::kNone;
  tally(at(node), +1);
  notify(at(node), held);
  forget_if_empty(node);
}

void PrefixIndex::forget_if_empty(NodeId node) {
  if (ghost_capacity_ == 0) {
    if (node != kRoot && empty(at(node))) erase_empty(node);
    return;
  }
  if (node != kRoot && empty(at(node)) && !at(node).ghost) {
    Node& n = at(node);
    n.ghost = true;
    ++ghost_count_;
    ghost_queue_.push_back({node, ++n.ghost_epoch});
  }
  // Entries of ghosts since erased or cached again are skipped when reached; where they pile up
  // (the count stays under the capacity), they are swept.
  if (ghost_queue_.size() > 2 * ghost_capacity_ + 64) {
    std::erase_if(ghost_queue_, [&](const GhostEntry& g) {
      return !live(g.node) || !at(g.node).ghost || at(g.node).ghost_epoch != g.epoch;
    });
  }
  // Chunks without a copy (ghosts, and dropped chunks with cached chunks below) beyond the
  // capacity: the earliest ghost goes, with its dropped parents left empty.
  while (dropped_count_ > static_cast<int64_t>(ghost_capacity_) && !ghost_queue_.empty()) {
    const GhostEntry oldest = ghost_queue_.front();
    ghost_queue_.pop_front();
    if (!live(oldest.node) || !at(oldest.node).ghost || at(oldest.node).ghost_epoch != oldest.epoch) continue;
    if (empty(at(oldest.node))) {
      erase_empty(oldest.node);
    } else {  // cached again, or a chunk below it since: an ordinary chunk now
      at(oldest.node).ghost = false;
      --ghost_count_;
    }
  }
}

void PrefixIndex::forget_now(NodeId node) {
  if (live(node) && empty(at(node))) erase_empty(node);
}

void PrefixIndex::keep_ghosts(size_t capacity) { ghost_capacity_ = capacity; }

void PrefixIndex::erase_empty(NodeId node) {
  while (node != kRoot) {
    Node& n = at(node);
    if (!empty(n)) return;
    if (n.ghost) {
      n.ghost = false;
      --ghost_count_;
    }
    if (on_forget_) on_forget_(to_chunk(node));
    auto [begin, end] = by_key_.equal_range(n.key);
    for (auto it = begin; it != end; ++it) {
      if (it->second == node) {
        by_key_.erase(it);
        break;
      }
    }
    const NodeId parent = n.parent;
    if (parent != kRoot) --at(parent).children;
    tally(n, -1);
    n.live = false;
    n.tokens.clear();
    n.generation = (n.generation + 1) & 0x7fffffffu;  // ids of this node are stale from now on
    free_slots_.push_back(slot_of(node));
    --live_nodes_;
    node = parent;  // a dropped parent left without children has nothing below it to serve
  }
}

PrefixIndex::Chunk PrefixIndex::chunk(NodeId node) const {
  MNEMO_CHECK(at(node).live, "dead node {}", node);
  return to_chunk(node);
}

bool PrefixIndex::live(NodeId node) const {
  if (node < 0 || slot_of(node) >= nodes_.size()) return false;
  const Node& n = nodes_[slot_of(node)];
  return n.generation == generation_of(node) && n.live;
}

void PrefixIndex::for_each_in(Tier tier, const std::function<void(const Chunk&)>& visit) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].live) continue;
    const Chunk c = to_chunk(id_of(i));
    if (c.has(tier)) visit(c);
  }
}

void PrefixIndex::for_each_device_slot(const std::function<void(const Chunk&)>& visit) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].live && nodes_[i].device_slot != kNoBlock) visit(to_chunk(id_of(i)));
  }
}

std::optional<PrefixIndex::NodeId> PrefixIndex::find_by_key(uint64_t key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

std::optional<PrefixIndex::NodeId> PrefixIndex::node_at(BlockId block, Tier tier) const {
  auto it = by_location_.find(location_key(tier, block));
  if (it == by_location_.end()) return std::nullopt;
  return it->second;
}

std::optional<PrefixIndex::NodeId> PrefixIndex::node_at_device_slot(SlotId slot) const {
  return node_at(slot, kDeviceSlot);
}

bool PrefixIndex::holds(BlockId block, Tier tier) const { return by_location_.count(location_key(tier, block)) != 0; }

void PrefixIndex::set_last_use(Node& n, double now, bool reused) {
  if (n.last_use == now && !n.ended && (n.reused || !reused)) return;
  tally(n, -1);
  n.last_use = now;
  n.ended = false;  // used again: whoever ended its conversation, someone goes on with it
  n.reused = n.reused || reused;
  tally(n, +1);
}

void PrefixIndex::set_ended(NodeId node) {
  Node& n = at(node);
  if (n.ended) return;
  tally(n, -1);
  n.ended = true;
  n.pinned = false;  // its client's last word: the conversation is over
  n.pinned_until = 0;
  tally(n, +1);
}

void PrefixIndex::pin(NodeId node, double until) {
  Node& n = at(node);
  if (until <= n.pinned_until) return;
  tally(n, -1);
  n.pinned = true;
  n.pinned_until = until;
  tally(n, +1);
  pin_queue_.push({until, node});
  // Each extension leaves a stale entry behind: rebuild from the pinned nodes before those
  // outnumber the live ones.
  if (pin_queue_.size() > 2 * static_cast<size_t>(pinned_count_) + 1024) {
    std::vector<PinEntry> current;
    current.reserve(static_cast<size_t>(pinned_count_));
    for (size_t slot = 0; slot < nodes_.size(); ++slot) {
      if (nodes_[slot].live && nodes_[slot].pinned) current.push_back({nodes_[slot].pinned_until, id_of(slot)});
    }
    pin_queue_ = decltype(pin_queue_)(std::greater<PinEntry>(), std::move(current));
  }
}

void PrefixIndex::expire_pins(double now) {
  while (!pin_queue_.empty() && pin_queue_.top().until <= now) {
    const PinEntry due = pin_queue_.top();
    pin_queue_.pop();
    if (!live(due.node)) continue;
    Node& n = at(due.node);
    if (!n.pinned || n.pinned_until != due.until) continue;  // lifted, or extended since
    tally(n, -1);
    n.pinned = false;
    tally(n, +1);
  }
}

void PrefixIndex::set_end_chunks(Node& n, int32_t end_chunks) {
  if (n.end_chunks == end_chunks) return;
  tally(n, -1);
  n.end_chunks = end_chunks;
  tally(n, +1);
}

void PrefixIndex::rank(Node& n, int sign) {
  if (sign > 0) n.rank_class = rank_class_ ? rank_class_({n.position, n.end_chunks, n.ended, n.reused, n.pinned}) : 0;
  const auto slot = static_cast<uint32_t>(&n - nodes_.data());
  const RankKey key{n.last_use, n.position, slot};
  const bool present[] = {n.device != kNoBlock, n.host != kNoBlock, n.disk == DiskCopy::kPresent, n.device_slot != kNoBlock};
  for (size_t kind = 0; kind < ranked_.size(); ++kind) {
    if (!present[kind]) continue;
    auto& classes = ranked_[kind];
    if (sign > 0) {
      classes[n.rank_class].insert(key);
      continue;
    }
    const auto group = classes.find(n.rank_class);
    MNEMO_CHECK(group != classes.end() && group->second.erase(key) == 1, "chunk in slot {} was not ranked", slot);
    if (group->second.empty()) classes.erase(group);
  }
}

void PrefixIndex::set_rank_class(const void* owner, RankClass rank_class) {
  for (auto& classes : ranked_) classes.clear();
  rank_class_ = std::move(rank_class);
  rank_owner_ = owner;
  for (Node& n : nodes_) {
    if (n.live) rank(n, +1);
  }
}

void PrefixIndex::visit_oldest_per_class(Copies kind, const std::function<bool(const Chunk&)>& take) const {
  for (const auto& [cls, group] : ranked_[static_cast<size_t>(kind)]) {
    for (const RankKey& key : group) {
      if (take(to_chunk(id_of(key.slot)))) break;
    }
  }
}

void PrefixIndex::tally(Node& n, int sign) {
  rank(n, sign);
  device_count_ += n.device != kNoBlock ? sign : 0;
  host_count_ += n.host != kNoBlock ? sign : 0;
  disk_count_ += n.disk == DiskCopy::kPresent ? sign : 0;
  device_slot_count_ += n.device_slot != kNoBlock ? sign : 0;
  pinned_count_ += n.pinned ? sign : 0;
  dropped_count_ += n.device == kNoBlock && n.device_slot == kNoBlock && n.host == kNoBlock && n.disk == DiskCopy::kNone ? sign : 0;
}

size_t PrefixIndex::size(Tier tier) const {
  return static_cast<size_t>(tier == Tier::kDevice ? device_count_ : tier == Tier::kHost ? host_count_ : disk_count_);
}

size_t PrefixIndex::n_dropped() const { return static_cast<size_t>(dropped_count_); }

}  // namespace mnemo
