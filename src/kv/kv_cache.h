// The engine's KV memory pool (SPEC M1, V3-V6, P2-P5): a device tier the forward pass reads, a
// host tier (preempted sequences and cached chunks; on the CPU backend a separate region, so the
// paths a GPU machine takes run here too), an optional disk tier (kv/disk_tier.h), and the
// prefix index (SPEC V4, P3) that keeps finished sequences' chunks for reuse by any later
// request with the same prefix. Each sequence holds its chunks through a KvTable
// (kv/kv_table.h); this class alone grows, shares, copies-on-write, swaps and frees them.
//
// Retention (SPEC P3): when a tier needs room, the cached chunk that kv/eviction_order.h ranks
// lowest leaves it. From the device it moves
// to the host, from the host to the disk, from the disk it is dropped. A chunk that already has a
// copy in a lower tier leaves for free. Leading chunks are cheapest, so an idle conversation
// loses its head first; a later match recomputes the dropped head and reuses the rest (SPEC P5).
// Ahead of need (SPEC P4), when the device's free or freely reclaimable blocks fall below a
// threshold, the lowest-value chunks are copied to the host while the forward pass runs, so a
// later shortage reclaims them without a copy.
//
// Check, then commit: every operation that can run out of blocks reports it as a value and
// leaves the tables it was given unchanged.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/chunk_reuse.h"
#include "kv/cache_events.h"
#include "kv/compact_slabs.h"
#include "kv/cost_model.h"
#include "kv/disk_tier.h"
#include "kv/kv_codec.h"
#include "kv/eviction_order.h"
#include "kv/kv_storage.h"
#include "kv/kv_table.h"
#include "kv/prefix_index.h"
#include "kv/remote_device.h"
#include "kv/retention_model.h"

namespace mnemo {

struct KvPoolConfig {
  int32_t device_blocks = 0;
  int32_t host_blocks = 0;
  RetentionPolicy policy = RetentionPolicy::kMnemo;
  NextUse next_use;  // the oracle policy's knowledge of the future (simulations only)
  CostModel cost;
  RetentionOptions retention;  // for kMnemo
  // Ghosts: the index keeps chunks with no copy left (their key, tokens and facts), up to this
  // many per chunk the pool holds (device, host and compact host blocks, disk extents), and
  // kMnemo goes on observing them: a prompt that contains one again reports a return, and only its
  // forgetting censors it, so eviction does not teach the model that what it evicted never comes
  // back. 0: a drop censors (chunks with cached chunks below them stay indexed anyway).
  // `serve` and `simulate` keep kGhostsPerChunk.
  int32_t ghosts_per_chunk = 0;
  // Copy cached chunks to the host ahead of need when the device's free plus freely reclaimable
  // blocks fall below this share of the pool (0: only on demand).
  float swap_out_threshold = 0.25f;
  int32_t max_background_copies = 64;  // per step
  // Host chunks a match brings back are copied layer by layer beside the forward pass (the engine
  // sets this); otherwise at once, inside match_prefix.
  bool layerwise_swap_in = false;
  std::shared_ptr<DiskTier> disk;      // optional; chunks computed here are written through to it when cached
  std::function<double()> clock;       // seconds; default: a steady clock
  // Sliding-window models (SPEC item: SWA): a chunk a window or more before the end of its
  // conversation keeps only its global layers, a fraction of the bytes. When the device needs
  // room such chunks are the first to give it up: they shrink in place to a slot of a device
  // block shared with other compact copies (compact_on_device), and from the device go to a host
  // pool of compact blocks (and compact disk extents).
  int32_t sliding_window = 0;           // tokens; 0: every layer is global
  std::vector<int32_t> global_layers;   // the layers that attend to the whole context
  int32_t host_compact_blocks = 0;
  bool compact_on_device = true;
  // The element types the host tier (its whole and compact blocks) and the disk tier hold
  // (kv/kv_codec.h); nullopt: the device's. Chunks are converted as they are demoted and again
  // as they come back. A host of a lossy type keeps `host_exact_blocks` more blocks of the
  // device's type for what must come back unchanged: preempted sequences (swap_out) and other
  // instances' chunks (import_prefix: a replica resumes a stream token for token). Check the
  // geometry first with KvCache::check_types.
  std::optional<KvType> host_type;
  std::optional<KvType> disk_type;
  int32_t host_exact_blocks = 0;
  // The device tier's bytes are other processes' (model parallelism's workers; kv/remote_device.h):
  // the cache pulls them before it reads a device block and pushes them after it writes one.
  // Chunks then come back to the device whole at match time (not layer by layer beside the
  // pass), and do not shrink in place on the device (their compact copies go to the host).
  RemoteDevice* remote_device = nullptr;
};

// Ghosts per cached chunk (KvPoolConfig::ghosts_per_chunk) where `serve` runs the learnt policy:
// measured in `mnemo simulate` (docs/benchmarks.md, "Through the serving cache"), ghosts lowered
// mnemo's recompute against LRU's; 4 chunks' bytes of index (~300 bytes each) per 576 KiB chunk.
inline constexpr int32_t kGhostsPerChunk = 4;

// A sliding-window model's pool: `global_layers` attend to the whole context, the others to the
// last `window` tokens; a chunk's value per byte then depends on its conversation's length, which
// the learnt policy's options allow for (kv/retention_model.h).
void use_sliding_window(KvPoolConfig& config, int32_t window, std::vector<int32_t> global_layers);

struct PrefixMatch {
  KvTable table;                         // device blocks for the first table.size() chunks
  std::vector<int32_t> recompute;        // chunk positions whose blocks are fresh: KV to compute
  // Chunk positions whose blocks hold only the global layers (their local layers are zero and
  // no query of this sequence reads them); they must not be offered back to the cache.
  std::vector<int32_t> partial;
  int32_t device_chunks = 0;             // chunks reused from each tier
  int32_t host_chunks = 0;
  int32_t disk_chunks = 0;
};

class KvCache {
 public:
  KvCache(const KvLayout& layout, KvPoolConfig config);
  // Convenience for the common two-tier pool.
  KvCache(const KvLayout& layout, int32_t device_blocks, int32_t host_blocks);
  ~KvCache();
  // Whether the layout's geometry fits the element types the config names.
  static Status check_types(const KvLayout& layout, const KvPoolConfig& config);
  // The payload of a disk extent for this layout and config: a whole chunk, and a compact one
  // (0 without a sliding window), of the disk's element type (DiskTier::open takes them).
  struct DiskPayload {
    size_t whole = 0;
    size_t compact = 0;
  };
  static DiskPayload disk_payload(const KvLayout& layout, const KvPoolConfig& config);

  const KvLayout& layout() const { return device_.layout(); }
  KvStorage& device() { return device_; }
  const KvStorage& device() const { return device_; }
  int32_t block_size() const { return device_.layout().block_size; }
  int32_t n_free() const { return device_alloc_.n_free(); }
  int32_t n_blocks() const { return device_alloc_.n_blocks(); }
  int32_t n_host_free() const { return host_alloc_.n_free(); }
  int32_t n_host_blocks() const { return host_alloc_.n_blocks(); }
  int32_t n_host_compact_free() const { return compact_alloc_.n_free(); }
  int32_t n_host_exact_blocks() const { return exact_alloc_.n_blocks(); }
  int32_t n_host_exact_free() const { return exact_alloc_.n_free(); }
  KvTypes kv_types() const { return {device_codec_.type(), host_codec_.type(), disk_codec_.type()}; }
  // A compact copy in the device's form (a device slot's bytes).
  size_t compact_bytes() const { return compact_buffer_.size(); }
  const DiskTier* disk() const { return config_.disk.get(); }

  // Blocks that writing positions [begin, end) would need: new ones past the table's end plus
  // copies of shared ones (copy-on-write).
  int32_t blocks_needed(const KvTable& table, int32_t begin, int32_t end) const;
  // Makes positions [begin, end) of a device table writable by it alone. False (and no change)
  // if the pool lacks the blocks.
  bool prepare_write(KvTable& table, int32_t begin, int32_t end);

  // Gives back the device table's blocks past those covering positions [0, n_positions): what
  // a rejected speculative draft wrote beyond the kept tokens.
  void truncate(KvTable& table, int32_t n_positions);

  // Another reference to every block of a device table (a forked sequence shares them).
  KvTable share(const KvTable& table);
  // Gives back the table's blocks, whichever tier holds them; the table is left empty.
  void release(KvTable& table);

  // Moves a table's blocks device -> host (swap_out) and back. False (and no change) without
  // room.
  bool swap_out(KvTable& table);
  bool swap_in(KvTable& table);

  // The longest cached prefix of `tokens` (whole chunks, at most max_chunks), brought to the
  // device: each block of the table carries a new reference for the caller. Chunks that were
  // dropped, or whose disk extent turned out damaged, get fresh blocks listed in `recompute`.
  PrefixMatch match_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks);
  // Offers the whole chunks of a sequence's first `n_valid` tokens (their KV computed) to the
  // index, and writes newly cached ones through to the disk tier.
  void cache_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t n_valid, const KvTable& table,
                    std::span<const int32_t> partial_chunks = {});
  // Deletes a conversation from the cache, every tier (SPEC M1's index delete): the chunks along
  // `tokens`' indexed path from chunk `keep_chunks` on, and everything cached below the path's
  // end (the conversation's own continuation, whose tokens a re-rendered history may not match
  // exactly). Spared: chunks another branch still goes through, chunks a running sequence
  // holds, and disk extents still being written. Returns the chunks forgotten.
  int32_t forget(uint64_t ns, std::span<const TokenId> tokens, int32_t keep_chunks);
  // The client says the conversation along `tokens` is over (a request's cache_control end): its
  // own chunks (from the path's end back to where another branch leaves it) stay cached, ranked
  // to leave before every other chunk by a policy that honours the end (EvictionOrder), until a
  // request uses them again. Returns the chunks marked.
  int32_t end_conversation(uint64_t ns, std::span<const TokenId> tokens);
  // The client says it will come back to the conversation along `tokens` within `ttl_seconds` (a
  // request's cache_control ttl): every chunk of the indexed path, shared ones included, is kept
  // until then ahead of every unpinned chunk by a policy that honours pins (EvictionOrder);
  // a soft pin, so pinned chunks still leave, oldest first, once nothing else can. A later
  // request's ttl extends the pin; an end lifts it. Returns the chunks pinned.
  int32_t pin_conversation(uint64_t ns, std::span<const TokenId> tokens, double ttl_seconds);
  size_t n_pinned_chunks() const { return index_.n_pinned(); }
  // The conversations whose first chunk the index has forgotten since the last call, as
  // (namespace, that chunk's key, PrefixIndex::chunk_key(0, ns, first chunk)): no copy of it and
  // nothing below it is left in any tier, so the cache has let every conversation that starts
  // there go (a delete, or eviction). What else keeps state per conversation follows it.
  std::vector<std::pair<uint64_t, uint64_t>> take_forgotten_conversations() { return std::exchange(forgotten_conversations_, {}); }
  // --- Transfer between instances (SPEC M1/M2: transfer, transfer_with_insert) ---
  // Chunks [first_chunk, first_chunk + chunks) of a prefix; earlier chunks are named by the key
  // of the last of them (PrefixIndex::chunk_key), so a receiver that already holds them (an
  // earlier increment of a replica) takes only the new ones.
  struct ExportedPrefix {
    int32_t first_chunk = 0;
    int32_t chunks = 0;
    uint64_t parent_key = 0;       // of chunk first_chunk - 1; 0 when first_chunk is 0
    std::vector<TokenId> tokens;   // the exported chunks' tokens: chunks x block_size()
    std::vector<uint8_t> payload;  // chunk i's KV at (i - first_chunk) x chunk bytes: one region (SPEC M5)
  };
  // The longest cached prefix of `tokens` (at most max_chunks) whose every chunk from
  // `first_chunk` on has all its layers in some tier, those chunks gathered into one buffer (the
  // ones before need only be indexed). The cache is left as it was. Both exports gather into
  // `staging`'s storage (a sender's reused buffer) when it is large enough.
  ExportedPrefix export_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks, int32_t first_chunk = 0,
                               std::vector<uint8_t> staging = {});
  // Chunks [first_chunk, end_chunk) of a running sequence's device blocks (`table[i]` holds
  // chunk i of `tokens`), for a replica of a request in flight (SPEC D7).
  ExportedPrefix export_blocks(uint64_t ns, std::span<const TokenId> tokens, const KvTable& table,
                               int32_t first_chunk, int32_t end_chunk, std::vector<uint8_t> staging = {});
  // Inserts another instance's chunks into the host tier (the device if there is no host
  // tier), so the next request with this prefix finds them (not written through to disk: the
  // sender keeps the durable copy; they reach the disk when the host tier evicts them). `tokens`
  // are whole chunks, the first at position `first_position` below the indexed chunk keyed
  // `parent_key` (0 and 0: from the root); KV in `payload` as exported. Chunks already cached
  // are kept as they are. Returns the chunks inserted, or an Error (bad sizes, an unknown
  // parent, no room) that changes nothing.
  Result<int32_t> import_prefix(uint64_t ns, std::span<const TokenId> tokens, std::span<const uint8_t> payload,
                                uint64_t parent_key = 0, int32_t first_position = 0);
  size_t chunk_bytes_of_transfer() const { return chunk_bytes(); }
  // Layer `layer` of the device blocks `blocks[first_chunk, first_chunk + chunks)`, one slice
  // after another: a prompt's KV streamed out layer by layer as it is computed (SPEC D3). Not
  // with a remote device (a sharded coordinator serves outside a cluster: no disaggregation).
  std::vector<uint8_t> layer_slices(std::span<const BlockId> blocks, int32_t first_chunk, int32_t chunks,
                                    int32_t layer) const;

  // Free blocks plus blocks only the index holds (what an allocation could get).
  int32_t n_available() const;
  // Chunks every tier can hold: device, host (whole, exact and compact blocks) and disk extents.
  // Fixed at construction.
  int64_t capacity_chunks() const;
  size_t n_cached_blocks(Tier tier) const { return index_.size(tier); }
  size_t n_dropped_chunks() const { return index_.n_dropped(); }
  int32_t n_host_compact_blocks() const { return compact_alloc_.n_blocks(); }
  int32_t n_host_compact_used() const { return compact_alloc_.n_blocks() - compact_alloc_.n_free(); }
  // Compact copies on the device, and the device blocks their slots take.
  int32_t n_device_slots_used() const { return slabs_.n_used(); }
  int32_t n_device_slabs() const { return slabs_.n_slabs(); }

  // Once per engine step, around the forward pass: host chunks matched this step are copied to
  // the device layer by layer while it runs (SPEC P8; the pass calls wait_for_layer before each
  // layer's attention), then copies ahead of need (SPEC P4) run; both are committed after it.
  // Finished disk writes are taken in.
  void begin_background_work();
  void wait_for_layer(int32_t layer);
  void end_background_work();
  bool has_pending_loads() const { return !pending_loads_.empty(); }
  // Completes matched chunks' copies now (when no forward pass follows).
  void finish_loads();
  // Rebuilds the index from the disk tier's extents (at start-up). Returns the chunks restored.
  size_t restore_from_disk();
  // Every chunk gaining or losing its last KV copy, for the router (thread-safe to read).
  CacheEventLog& cache_events() const { return *events_; }

  struct Counters {
    int64_t device_hit_chunks = 0;   // matched chunks found on the device
    int64_t host_hit_chunks = 0;     // matched chunks brought back from the host
    int64_t disk_hit_chunks = 0;     // matched chunks read from the disk
    int64_t recomputed_chunks = 0;   // matched but dropped chunks, computed again
    int64_t demoted_chunks = 0;      // cached chunks moved device -> host on demand
    int64_t device_compacted_chunks = 0;  // cached chunks shrunk on the device to their global layers
    int64_t ahead_copied_chunks = 0; // cached chunks copied device -> host ahead of need
    int64_t disk_written_chunks = 0; // extents made durable
    int64_t disk_corrupt_chunks = 0; // extents that failed their checksum or read, dropped
    int64_t evicted_chunks = 0;      // copies that left a tier: the sum of the three below
    int64_t evicted_device_copies = 0;  // blocks and compact slots
    int64_t evicted_host_copies = 0;
    int64_t evicted_disk_copies = 0;
    int64_t dropped_chunks = 0;      // chunks whose last copy went
    int64_t forgotten_chunks = 0;    // chunks deleted with their conversation
    int64_t ended_chunks = 0;        // chunks whose conversation its client ended
    int64_t pinned_chunks = 0;       // chunks pinned (or their pin extended) by a client's ttl
    int64_t exported_chunks = 0;     // chunks sent to another instance
    int64_t imported_chunks = 0;     // chunks received from another instance
    int64_t bytes_device_to_host = 0;
    int64_t bytes_host_to_device = 0;
    int64_t bytes_to_disk = 0;
    int64_t bytes_disk_to_device = 0;
    // With a remote device: blocks pulled from and pushed to the workers, and operations the
    // workers could not do (their chunks dropped or recomputed instead).
    int64_t remote_pulled_blocks = 0;
    int64_t remote_pushed_blocks = 0;
    int64_t remote_failures = 0;
  };
  const Counters& counters() const { return counters_; }
  const RetentionModel& retention_model() const { return eviction_.model(); }
  int64_t swapped_out_blocks() const { return swapped_out_blocks_; }

 private:
  double now() const;
  // A remote device's bytes of `blocks` into device_ before they are read, and device_'s out to
  // it after they were written; false (counted) when the workers could not. True without one.
  bool pull_device(std::span<const BlockId> blocks);
  bool push_device(std::span<const BlockId> blocks);
  size_t chunk_bytes() const { return layout().block_bytes(); }
  // The last copy of `c` left: counted, and (without ghosts) the retention model stops observing it.
  void note_dropped(const PrefixIndex::Chunk& c);
  // The cached chunk with a copy in `tier` that leaves it first; `eligible` filters.
  std::optional<PrefixIndex::Chunk> lowest_value(Tier tier,
                                                 const std::function<bool(const PrefixIndex::Chunk&)>& eligible) const {
    return eviction_.lowest(index_, tier, eligible, now());
  }
  bool index_only_device(const PrefixIndex::Chunk& c) const;
  // Whether the chunk's device block can leave without copying it out whole: another copy stays,
  // or it shrinks to a device slot.
  bool leaves_device_cheaply(const PrefixIndex::Chunk& c) const;
  struct DeviceVictim {
    PrefixIndex::Chunk chunk;
    bool slot = false;  // its compact copy on the device, not its block
  };
  // What leaves the device next: among blocks only the index holds, those that leave cheaply
  // first; then the lowest value among those blocks and the device's compact copies.
  std::optional<DeviceVictim> next_device_victim() const;
  bool make_room(int32_t n);
  // Room in the host pool, or (`exact`, a lossy host) in its exact pool.
  bool make_host_room(int32_t n, bool exact = false);
  bool make_compact_room(int32_t n);
  // Whether a device victim whose only lower copy is a disk extent gets a host copy too: the host
  // has a free block, or holds a chunk worth less whose copy can leave for free (then it leaves).
  bool host_takes_instead_of_disk(const PrefixIndex::Chunk& c);
  // A whole copy of a device chunk into the host pool, which has a free block.
  void demote_to_host(const PrefixIndex::Chunk& c);
  // A whole host copy in the pool asked for (`exact`: a lossy host's exact blocks) that no one
  // but the index holds; and whether another copy stays when it leaves.
  bool evictable_host_copy(const PrefixIndex::Chunk& c, bool exact) const;
  static bool copy_outside_host(const PrefixIndex::Chunk& c) { return c.device != kNoBlock || c.has(Tier::kDisk); }
  bool make_disk_room(size_t bytes);
  void evict_device_copy(const PrefixIndex::Chunk& c);
  // A compact copy (`compact`: global layers, packed) into the compact host pool, which has room.
  void demote_compact(const PrefixIndex::Chunk& c, const uint8_t* compact);
  bool compacts_on_device() const { return slabs_.enabled(); }  // slabs exist only for sliding-window models
  // The chunk's block is replaced by a compact copy in a device slot; if no slab has one free,
  // the block itself becomes a slab.
  void compact_on_device(const PrefixIndex::Chunk& c);
  void evict_device_slot(const PrefixIndex::Chunk& c);
  // Frees a slot; its slab's block goes back once empty, or once its copies fit elsewhere.
  void free_device_slot(SlotId slot);
  // Moves a slab's copies to other slabs' free slots if they all fit, so that its block goes back.
  void drain_slab(BlockId slab);
  uint8_t* slot_bytes(SlotId slot) {
    return device_.block(slabs_.slab_of(slot)) + static_cast<size_t>(slabs_.index_in_slab(slot)) * compact_bytes();
  }
  int32_t n_global_layers() const { return static_cast<int32_t>(config_.global_layers.size()); }
  void evict_host_copy(const PrefixIndex::Chunk& c);
  // A host copy as the index names it (`host`, whole or compact): its pool and block there (the
  // exact pool's blocks are numbered after the host pool's), its bytes and their element type.
  struct HostCopy {
    BlockAllocator* pool;
    BlockId block;
    uint8_t* bytes;
    const KvCodec* codec;
  };
  HostCopy host_copy(BlockId host, bool compact);
  HostCopy host_copy(const PrefixIndex::Chunk& c) { return host_copy(c.host, c.host_compact); }
  // A reference to a host copy more or less, in whichever pool holds it.
  void add_host_ref(BlockId host, bool compact = false) {
    const HostCopy copy = host_copy(host, compact);
    copy.pool->add_ref(copy.block);
  }
  void release_host(BlockId host, bool compact = false) {
    const HostCopy copy = host_copy(host, compact);
    copy.pool->release(copy.block);
  }
  bool in_exact_pool(BlockId host, bool compact) const { return !compact && lossy_host_ && host >= host_alloc_.n_blocks(); }
  // lossy_host_: the host's type is not the device's own (exact blocks are kept beside it).
  int32_t host_ref_count(const PrefixIndex::Chunk& c) const;
  // Where what must come back unchanged goes: the exact pool when the host is lossy, else the
  // host pool. Returns index-numbered blocks, or nullopt without room.
  std::optional<std::vector<BlockId>> allocate_exact_host(int32_t n);
  bool has_exact_host() const { return lossy_host_ ? exact_alloc_.n_blocks() > 0 : host_alloc_.n_blocks() > 0; }
  // `bytes` (whole, or compact: the global layers) held as `codec` holds them, written to disk
  // as the disk holds them (converted on the disk's writer thread).
  void write_to_disk(const PrefixIndex::Chunk& c, const uint8_t* bytes, bool compact, const KvCodec& codec);
  void take_disk_completions();
  // Whether no later query of the conversation through this chunk reads its local layers.
  bool compactable(const PrefixIndex::Chunk& c) const;
  // The global layers of a block into a compact copy, both held as `codec` holds them; and a
  // compact copy held so into a device block (its local layers zero).
  void pack_global_layers(const uint8_t* block, uint8_t* compact, const KvCodec& codec) const;
  void unpack_global_layers(const uint8_t* compact, uint8_t* block, const KvCodec& codec) const;
  // Brings a chunk to the device into `block`: all of its layers, only the global ones, or none.
  enum class Loaded { kFull, kCompact, kNothing };
  Loaded load_chunk(const PrefixIndex::Chunk& c, BlockId block, bool allow_compact, Tier& from);
  // match_prefix's steps: the chain's chunks brought to device blocks (appended to `table`) until
  // the pool has no room; returns how many. Then the hits and recomputes counted.
  size_t bring_to_device(const std::vector<PrefixIndex::Chunk>& chain, std::vector<ChunkUse>& use, std::vector<Tier>& from,
                         KvTable& table);
  // With a remote device: the chunks loaded into the table's blocks at `loaded` pushed to it;
  // if that fails they are recomputed instead.
  void push_loaded(const std::vector<PrefixIndex::Chunk>& chain, const std::vector<size_t>& loaded, std::vector<ChunkUse>& use,
                   const KvTable& table);
  void account_match(const std::vector<ChunkUse>& use, const std::vector<Tier>& from, PrefixMatch& result);
  // import_prefix's steps: the node the chunks hang below, the part of their path indexed now,
  // and their insertion into the blocks made room for. Returns the chunks inserted.
  std::optional<PrefixIndex::NodeId> import_parent(uint64_t ns, uint64_t parent_key, int32_t first_position) const;
  std::vector<PrefixIndex::NodeId> indexed_path(PrefixIndex::NodeId parent, uint64_t ns, std::span<const TokenId> tokens) const;
  int32_t insert_imported(uint64_t ns, std::span<const TokenId> tokens, std::span<const uint8_t> payload,
                          PrefixIndex::NodeId parent, int32_t first_position, const std::vector<BlockId>& blocks);

  KvPoolConfig config_;
  KvCodec device_codec_;  // the identity
  KvCodec host_codec_;
  KvCodec disk_codec_;
  bool lossy_host_;
  KvStorage device_;
  BlockAllocator device_alloc_;
  KvStorage host_;  // of the host's type
  BlockAllocator host_alloc_;
  KvStorage exact_;  // of the device's type, beside a lossy host (else empty)
  BlockAllocator exact_alloc_;
  KvStorage compact_;  // host blocks of a sliding-window model's global layers, of the host's type
  BlockAllocator compact_alloc_;
  CompactSlabs slabs_;  // device blocks holding compact copies
  std::vector<uint8_t> compact_buffer_;  // a compact copy in the device's form, on its way somewhere
  std::vector<uint8_t> disk_buffer_;     // an extent's payload of the disk's type read, on its way to the device
  // Before index_: the index's observer records here.
  std::unique_ptr<CacheEventLog> events_ = std::make_unique<CacheEventLog>();
  PrefixIndex index_;
  std::unordered_set<uint64_t> extents_to_delete_;  // keys of deleted chunks whose extent is still being written
  EvictionOrder eviction_;
  Counters counters_;
  std::vector<std::pair<uint64_t, uint64_t>> forgotten_conversations_;  // bounded: see the constructor
  int64_t swapped_out_blocks_ = 0;

  class BackgroundCopier;
  std::unique_ptr<BackgroundCopier> copier_;
  struct PendingCopy {
    PrefixIndex::NodeId node;
    BlockId device;
    BlockId host;
  };
  std::vector<PendingCopy> pending_copies_;
  struct PendingLoad {
    BlockId host;    // the index's number, pinned until the copy is done
    BlockId device;
  };
  std::vector<PendingLoad> pending_loads_;
  std::atomic<int32_t> layers_loaded_{0};
  bool loads_started_ = false;
  void plan_ahead_copies();
};

}  // namespace mnemo
