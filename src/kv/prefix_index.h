// An index of cached KV by token prefix (SPEC V4, P2, P3, M1 index API): a trie whose edges are
// whole chunks of `chunk_tokens` tokens (one chunk = one KV block), keyed by a namespace (the
// tenant's cache salt) so that one tenant's prefix never matches another's.
//
// Each node records where copies of its chunk's KV (given the whole path above it) are: a device
// block, a host block, a disk extent, any of them at once (a chunk copied down a tier keeps its
// upper copy until that space is needed: reclaiming it is then free), or none: the chunk is
// DROPPED, its tokens known and its KV gone. Copies may be COMPACT: only the global layers of a
// sliding-window model, kept for chunks a window or more before the end of the last
// conversation through them (whose local layers no later query of it reads); on the device such
// a copy is a slot of a block shared with other compact copies (kv/compact_slabs.h). A dropped
// chunk stays in the trie while chunks below it still hold KV, so a later match reuses them and
// recomputes only the dropped ones (SPEC P5).
//
// Device-free metadata: the index maps token chunks to block ids and keeps the time of last use.
// Who holds references to blocks is the allocator's business; the manager adds a reference for
// every block the index keeps and drops it when the index lets the copy go.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/check.h"
#include "kv/chunk_reuse.h"
#include "kv/compact_slabs.h"
#include "kv/kv_layout.h"

namespace mnemo {

using TokenId = int32_t;

enum class Tier : uint8_t { kDevice, kHost, kDisk };

// The state of a chunk's disk extent: being written (not yet readable), or durable.
enum class DiskCopy : uint8_t { kNone, kWriting, kPresent };

class PrefixIndex {
 public:
  // A node's id: its slot in the node table (low 32 bits) and the slot's generation (high bits),
  // bumped whenever the slot's node is freed. A slot is reused, an id never: a stale id held
  // across an eviction is detected (live() is false; any other use fails MNEMO_CHECK) rather
  // than silently naming whatever chunk took its slot.
  using NodeId = int64_t;
  static size_t slot_of(NodeId id) { return static_cast<size_t>(static_cast<uint64_t>(id) & 0xffffffffu); }

  struct Chunk {
    NodeId node = -1;
    int32_t position = 0;  // index of the chunk in its sequence: tokens [position*C, (position+1)*C)
    BlockId device = kNoBlock;
    BlockId host = kNoBlock;
    DiskCopy disk = DiskCopy::kNone;
    bool host_compact = false;
    bool disk_compact = false;
    uint64_t key = 0;  // identifies the chunk's extent on disk
    uint64_t parent_key = 0;
    double last_use = 0;
    int32_t end_chunks = 0;  // where the last conversation cached through this chunk ended
    SlotId device_slot = kNoBlock;  // a compact copy on the device
    bool ended = false;  // the last request through it ended its conversation (set_ended)
    bool reused = false;  // a match found it after it was cached (recency-frequency policies)
    bool pinned = false;  // a client asked for it to be kept until pinned_until (pin())
    double pinned_until = 0;

    // A copy with every layer's KV exists (a device block always has).
    bool has_full() const {
      return device != kNoBlock || (host != kNoBlock && !host_compact) || (disk == DiskCopy::kPresent && !disk_compact);
    }

    bool has(Tier tier) const {
      return tier == Tier::kDevice ? device != kNoBlock : tier == Tier::kHost ? host != kNoBlock : disk == DiskCopy::kPresent;
    }
    bool dropped() const {
      return device == kNoBlock && device_slot == kNoBlock && host == kNoBlock && disk == DiskCopy::kNone;
    }
  };

  explicit PrefixIndex(int32_t chunk_tokens);

  int32_t chunk_tokens() const { return chunk_tokens_; }
  size_t size() const { return live_nodes_; }

  // The chunks along the longest indexed path matching `tokens` (whole chunks, at most
  // `max_chunks`), in order, dropped ones included but never at the end: the path stops at its
  // last chunk that has a copy somewhere. Marks the path used at `now` (seconds); the chunks
  // returned still carry their previous last_use.
  std::vector<Chunk> match(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks, double now);

  // Records the whole chunks of `tokens` whose KV is in the device `blocks` (blocks[i] holds
  // chunk i). A chunk already indexed keeps its device copy; one without a device copy (dropped,
  // or only on host or disk) adopts the block unless `adoptable` refuses it (a block holding
  // only some layers' KV). Every chunk on the path records the path's length as its
  // conversation's end. Returns the blocks the index newly keeps, each of which the caller must
  // add a reference to; `path`, if given, receives the path's nodes.
  std::vector<BlockId> insert(uint64_t ns, std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                              double now, const std::function<bool(size_t chunk)>& adoptable = {},
                              std::vector<NodeId>* path = nullptr);

  // Rebuilds a chunk from its disk extent at start-up: its parent is the node with key
  // `parent_key` (0: the root). Returns the node, or nullopt when the parent is unknown or the
  // stored key does not match the tokens (a stale or foreign extent).
  std::optional<NodeId> restore(uint64_t ns, uint64_t parent_key, uint64_t key, std::span<const TokenId> chunk,
                                double now, bool compact = false);

  // Copies of a node's KV appear and disappear. Removing the last copy of a node without
  // children forgets it (and its parents that are dropped and childless): there is nothing left
  // to reuse below it.
  void set_device(NodeId node, BlockId block);
  void set_device_slot(NodeId node, SlotId slot);
  void set_host(NodeId node, BlockId block, bool compact = false);
  void set_disk(NodeId node, DiskCopy state, bool compact = false);
  Chunk chunk(NodeId node) const;
  bool live(NodeId node) const;
  uint64_t chunk_namespace(NodeId node) const { return at(node).ns; }
  std::span<const TokenId> chunk_tokens_of(NodeId node) const { return at(node).tokens; }
  // The node whose copy in `tier` is `block`.
  std::optional<NodeId> node_at(BlockId block, Tier tier) const;
  std::optional<NodeId> node_at_device_slot(SlotId slot) const;

  // The nodes along the longest indexed path matching `tokens` (whole chunks), dropped ones
  // included; unlike match(), leaves their last use alone.
  std::vector<NodeId> path(uint64_t ns, std::span<const TokenId> tokens) const;
  // The child of `parent` (kNoParent: the root) holding `chunk` at `position`, added without any
  // copy if missing: the caller gives it one at once (a node without copies or children is
  // forgotten by the next set_*).
  static constexpr NodeId kNoParent = -1;
  NodeId extend(NodeId parent, uint64_t ns, std::span<const TokenId> chunk, int32_t position, double now);
  // That child if it exists.
  std::optional<NodeId> child(NodeId parent, uint64_t ns, std::span<const TokenId> chunk) const;
  // Every node of `path` records the path's length as its conversation's end (as insert does).
  void mark_path_end(std::span<const NodeId> path);
  // The chunk's conversation was ended by its client (KvCache::end_conversation): it stays
  // cached, and ranks as ended (RankClass) until its next use, a match or an insert through it.
  void set_ended(NodeId node);
  // A client asked for the chunk to be kept until `until` (a request's cache_control ttl,
  // KvCache::pin_conversation): it ranks apart, above every unpinned chunk (RankFacts::pinned),
  // until then. A later pin extends it, never shortens it; an end (set_ended) lifts it.
  void pin(NodeId node, double until);
  // Lifts the pins that ran out by `now` (their chunks rank as before). Cheap when none did.
  void expire_pins(double now);
  size_t n_pinned() const { return static_cast<size_t>(pinned_count_); }
  // The nodes below `node` (not itself), children before their parents.
  std::vector<NodeId> descendants(NodeId node) const;
  int32_t n_children(NodeId node) const { return at(node).children; }

  // --- The eviction order's view (kv/eviction_order.h): victims found in O(classes x log n) ---
  // Copies of one kind: a tier's, or the compact copies in device slots.
  enum class Copies : uint8_t { kDevice, kHost, kDisk, kDeviceSlot };
  static Copies copies_in(Tier tier) { return static_cast<Copies>(tier); }
  // Groups the chunks into classes whose retention value falls with their idle time alone (a
  // function of the chunk's position, its conversation's end, whether that conversation was
  // ended, reused or pinned), so that a class's oldest copy is its lowest. Regroups every
  // chunk; `owner` is whoever the grouping is for.
  struct RankFacts {
    int32_t position = 0;
    int32_t end_chunks = 0;
    bool ended = false;
    bool reused = false;
    bool pinned = false;
  };
  using RankClass = std::function<int32_t(const RankFacts&)>;
  void set_rank_class(const void* owner, RankClass rank_class);
  const void* ranked_for() const { return rank_owner_; }
  // For each class with copies of this kind: its chunks oldest first (then the leading, then the
  // lowest slot first), until `take` returns true; then the next class.
  void visit_oldest_per_class(Copies kind, const std::function<bool(const Chunk&)>& take) const;
  size_t n_rank_classes(Copies kind) const { return ranked_[static_cast<size_t>(kind)].size(); }
  // The copies of this kind in one class.
  size_t class_size(Copies kind, int32_t cls) const {
    const auto& classes = ranked_[static_cast<size_t>(kind)];
    const auto group = classes.find(cls);
    return group == classes.end() ? 0 : group->second.size();
  }

  // The chunks that have a copy in `tier` (on the device: a whole block), in slot order, for an
  // exact scan.
  void for_each_in(Tier tier, const std::function<void(const Chunk&)>& visit) const;
  // The chunks with a compact copy on the device.
  void for_each_device_slot(const std::function<void(const Chunk&)>& visit) const;
  std::optional<NodeId> find_by_key(uint64_t key) const;
  // The key of the chunk `chunk` below the one keyed `parent_key` (0: the root): a hash of the
  // whole path, the same on every instance, so a chunk's key names its prefix across a cluster.
  static uint64_t chunk_key(uint64_t parent_key, uint64_t ns, std::span<const TokenId> chunk);

  // Called whenever what a chunk holds changes: KV in some tier with every layer (kWhole), only
  // its global layers (kCompact), or no copy left (kNone). What the router's prompt trees follow
  // (kv/cache_events.h). On the index's thread.
  void set_observer(std::function<void(uint64_t key, ChunkHold hold)> observer) { observer_ = std::move(observer); }
  // Called with each chunk the index forgets (no copy left, nothing below it), as it was.
  void set_forget_listener(std::function<void(const Chunk&)> listener) { on_forget_ = std::move(listener); }
  // Ghosts: a chunk left with no copy and nothing below it is kept (its key, tokens and facts)
  // while the chunks without a copy (ghosts, and dropped chunks with cached ones below) number at
  // most `capacity`; beyond it the earliest ghost goes, with its dropped parents left empty.
  // match() then reports the ghosts at the end of a path too. 0 (the default): such chunks are
  // forgotten at once.
  void keep_ghosts(size_t capacity);
  // Forgets a chunk with no copy and nothing below it now, ghost or not (a deleted conversation).
  void forget_now(NodeId node);
  size_t n_ghosts() const { return ghost_count_; }

  // Whether the index keeps this block of this tier.
  bool holds(BlockId block, Tier tier) const;
  size_t size(Tier tier) const;
  size_t n_device_slots() const { return static_cast<size_t>(device_slot_count_); }
  size_t n_dropped() const;

 private:
  static constexpr NodeId kRoot = -1;
  // Location keys of compact copies, pools of their own.
  static constexpr Tier kCompactHost = static_cast<Tier>(3);
  static constexpr Tier kDeviceSlot = static_cast<Tier>(4);
  struct Node {
    NodeId parent = kRoot;
    uint64_t ns = 0;
    uint64_t key = 0;              // hash of (parent key, namespace, chunk tokens)
    std::vector<TokenId> tokens;   // the chunk, to rule out hash collisions
    int32_t position = 0;
    BlockId device = kNoBlock;
    BlockId host = kNoBlock;
    DiskCopy disk = DiskCopy::kNone;
    bool host_compact = false;
    bool disk_compact = false;
    int32_t end_chunks = 0;
    SlotId device_slot = kNoBlock;
    bool ended = false;
    bool reused = false;
    bool pinned = false;
    double pinned_until = 0;
    int32_t rank_class = 0;  // as ranked now (set_rank_class)
    int32_t children = 0;
    double last_use = 0;
    bool live = false;
    bool ghost = false;         // kept without copies or children (keep_ghosts)
    uint32_t ghost_epoch = 0;   // which of its ghost_queue_ entries is current
    uint32_t generation = 0;  // of its slot: bumped when the node is freed (max 2^31, then wraps)
  };

  NodeId find_child(NodeId parent, uint64_t key, std::span<const TokenId> chunk) const;
  NodeId add_node(NodeId parent, uint64_t ns, uint64_t key, std::span<const TokenId> chunk, int32_t position,
                  double now);
  Chunk to_chunk(NodeId id) const;
  void forget_if_empty(NodeId node);
  bool empty(const Node& n) const {
    return n.children == 0 && n.device == kNoBlock && n.device_slot == kNoBlock && n.host == kNoBlock &&
           n.disk == DiskCopy::kNone;
  }
  // Forgets an empty node, and its parents left empty.
  void erase_empty(NodeId node);
  static int64_t location_key(Tier tier, BlockId block) {
    return (static_cast<int64_t>(tier) << 32) | static_cast<uint32_t>(block);
  }
  // Keeps the per-tier counts and the ranked view: -1 before a node's copies, last use or
  // conversation end change, +1 after.
  void tally(Node& n, int sign);
  // A match (`reused`) or an insert through the node.
  void set_last_use(Node& n, double now, bool reused = false);
  void set_end_chunks(Node& n, int32_t end_chunks);
  struct RankKey {
    double last_use;
    int32_t position;
    uint32_t slot;
    auto operator<=>(const RankKey&) const = default;
  };
  void rank(Node& n, int sign);
  // A disk extent still being written counts: it is complete within moments.
  static ChunkHold hold_of(const Node& n) {
    if (n.device != kNoBlock || (n.host != kNoBlock && !n.host_compact) || (n.disk != DiskCopy::kNone && !n.disk_compact)) {
      return ChunkHold::kWhole;
    }
    return n.device_slot != kNoBlock || n.host != kNoBlock || n.disk != DiskCopy::kNone ? ChunkHold::kCompact
                                                                                        : ChunkHold::kNone;
  }
  // Tells the observer if what a node holds changed from `before`.
  void notify(const Node& n, ChunkHold before) const {
    if (!observer_) return;
    const ChunkHold now = hold_of(n);
    if (now != before) observer_(n.key, now);
  }
  static uint32_t generation_of(NodeId id) { return static_cast<uint32_t>(static_cast<uint64_t>(id) >> 32); }
  NodeId id_of(size_t slot) const {
    return static_cast<NodeId>((static_cast<uint64_t>(nodes_[slot].generation) << 32) | slot);
  }
  Node& at(NodeId id) { return const_cast<Node&>(std::as_const(*this).at(id)); }
  const Node& at(NodeId id) const {
    MNEMO_CHECK(id >= 0 && slot_of(id) < nodes_.size(), "node id {} out of range", id);
    const Node& n = nodes_[slot_of(id)];
    MNEMO_CHECK(n.generation == generation_of(id), "stale node id {} (slot {} is at generation {})", id, slot_of(id),
                n.generation);
    return n;
  }

  int32_t chunk_tokens_;
  std::vector<Node> nodes_;
  std::vector<size_t> free_slots_;
  std::unordered_multimap<uint64_t, NodeId> by_key_;
  std::unordered_map<int64_t, NodeId> by_location_;
  size_t live_nodes_ = 0;
  // Live nodes with a device copy, a host copy, a durable disk copy, and with none (dropped).
  int64_t device_count_ = 0, host_count_ = 0, disk_count_ = 0, dropped_count_ = 0;
  int64_t device_slot_count_ = 0;
  std::function<void(uint64_t key, ChunkHold hold)> observer_;
  std::function<void(const Chunk&)> on_forget_;
  size_t ghost_capacity_ = 0;
  size_t ghost_count_ = 0;
  struct GhostEntry {
    NodeId node;
    uint32_t epoch;
  };
  std::deque<GhostEntry> ghost_queue_;  // oldest first; stale entries skipped
  struct PinEntry {
    double until;
    NodeId node;
    bool operator>(const PinEntry& other) const { return until > other.until; }
  };
  // Pins by their end, earliest first; an entry whose node is gone or was pinned again since is
  // skipped.
  std::priority_queue<PinEntry, std::vector<PinEntry>, std::greater<PinEntry>> pin_queue_;
  int64_t pinned_count_ = 0;  // live nodes pinned
  // Per kind of copy, per rank class: the chunks, oldest first. Empty classes are erased.
  std::array<std::map<int32_t, std::set<RankKey>>, 4> ranked_;
  RankClass rank_class_;
  const void* rank_owner_ = nullptr;
};

}  // namespace mnemo
