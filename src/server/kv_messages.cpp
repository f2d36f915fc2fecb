#include "server/kv_messages.h"

#include <chrono>
#include <future>
#include <memory>
#include <random>

#include "kv/prefix_index.h"

namespace mnemo::server {
namespace {

constexpr auto kEngineWait = std::chrono::seconds(20);  // a step of the engine, with margin

}  // namespace

transfer::KvMessage kv_message_of(uint64_t ns, uint64_t layout_fingerprint, int32_t block_size,
                                  KvCache::ExportedPrefix&& exported, uint32_t n_layers, uint32_t layer_begin,
                                  uint32_t layer_end) {
  transfer::KvMessage message;
  static thread_local std::mt19937_64 rng(std::random_device{}());
  message.transfer_id = rng();
  message.ns = ns;
  message.layout_fingerprint = layout_fingerprint;
  message.n_layers = n_layers;
  message.layer_begin = layer_begin;
  message.layer_end = layer_end;
  if (exported.chunks == 0) return message;
  const auto bs = static_cast<size_t>(block_size);
  // Each chunk's part of the payload holds layer_end - layer_begin of its n_layers equal layers.
  const size_t chunk_part = exported.payload.size() / static_cast<size_t>(exported.chunks);
  message.block_bytes = static_cast<uint32_t>(chunk_part / (layer_end - layer_begin) * n_layers);
  uint64_t key = exported.parent_key;
  for (int32_t i = 0; i < exported.chunks; ++i) {
    transfer::KvChunkMeta meta;
    meta.position = exported.first_chunk + i;
    meta.parent_key = key;
    const auto begin = exported.tokens.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(i) * bs);
    meta.tokens.assign(begin, begin + static_cast<ptrdiff_t>(bs));
    meta.key = PrefixIndex::chunk_key(key, ns, meta.tokens);
    key = meta.key;
    message.chunks.push_back(std::move(meta));
  }
  message.payload = std::move(exported.payload);
  return message;
}

void insert_kv_message_then(Engine& engine, uint64_t layout_fingerprint, transfer::KvMessage&& message,
                            std::function<void(Status)> done) {
  if (!message.whole()) {
    return done(make_error("layers [{}, {}) of {} of the chunks: only whole chunks are inserted (a KvReceiver gathers "
                           "layer slices first)",
                           message.layer_begin, message.layer_end, message.n_layers));
  }
  if (message.layout_fingerprint != layout_fingerprint) {
    return done(make_error("KV of layout {:016x}; this instance's is {:016x} (another model or KV type)",
                           message.layout_fingerprint, layout_fingerprint));
  }
  const auto block_size = static_cast<size_t>(engine.config().block_size);
  // The chunks hang below the one keyed chunks[0].parent_key (0: they start the prefix); each
  // record's key must be the hash of its path, so what is inserted is what the sender had.
  const uint64_t parent_key = message.chunks.empty() ? 0 : message.chunks.front().parent_key;
  const int32_t first_position = message.chunks.empty() ? 0 : message.chunks.front().position;
  std::vector<TokenId> tokens;
  tokens.reserve(message.chunks.size() * block_size);
  uint64_t key = parent_key;
  for (size_t i = 0; i < message.chunks.size(); ++i) {
    const transfer::KvChunkMeta& chunk = message.chunks[i];
    if (chunk.tokens.size() != block_size) {
      return done(make_error("a chunk of {} tokens; this instance's chunks have {}", chunk.tokens.size(), block_size));
    }
    if (chunk.position != first_position + static_cast<int32_t>(i) || chunk.parent_key != key) {
      return done(make_error("chunk {} of the message does not follow the one before it", i));
    }
    key = PrefixIndex::chunk_key(key, message.ns, chunk.tokens);
    if (chunk.key != key) return done(make_error("chunk {} of the message: its key does not match its tokens", i));
    tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
  }
  engine.import_prefix_then(message.ns, std::move(tokens), std::move(message.payload), parent_key, first_position,
                            [done = std::move(done)](Result<int32_t> inserted) {
                              done(inserted.ok() ? ok_status() : Status(inserted.error()));
                            });
}

Status insert_kv_message(Engine& engine, uint64_t layout_fingerprint, transfer::KvMessage&& message) {
  auto inserted = std::make_shared<std::promise<Status>>();
  std::future<Status> result = inserted->get_future();
  insert_kv_message_then(engine, layout_fingerprint, std::move(message),
                         [inserted](Status status) { inserted->set_value(std::move(status)); });
  if (result.wait_for(kEngineWait) != std::future_status::ready) {
    return make_error(ErrorCode::kUnavailable, "the engine did not take the KV in time");
  }
  // import_prefix_then answers exactly once, shut down or not: the promise is never broken.
  return result.get();
}

}  // namespace mnemo::server
