// KV messages to and from this instance's cache (SPEC M2, M5): the chunks an export gathered,
// as one KvMessage whose records are named by position and by key (PrefixIndex::chunk_key, the
// hash of the whole path: the same on every instance), and a received message inserted into the
// cache below the chunk its first record names, after checking that every key matches its
// tokens.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/engine.h"
#include "transfer/kv_message.h"
#include "util/result.h"

namespace mnemo::server {

// `exported`'s payload may hold only layers [layer_begin, layer_end) of n_layers of each chunk
// (a prompt's KV streamed layer by layer, SPEC D3); by default it holds them all.
transfer::KvMessage kv_message_of(uint64_t ns, uint64_t layout_fingerprint, int32_t block_size,
                                  KvCache::ExportedPrefix&& exported, uint32_t n_layers = 1, uint32_t layer_begin = 0,
                                  uint32_t layer_end = 1);

// Inserts the message's chunks into the engine's cache (on its thread; waits for it); an Error
// names what is wrong (another layout, chunk size, a broken key chain, an unknown predecessor,
// no room) and changes nothing.
Status insert_kv_message(Engine& engine, uint64_t layout_fingerprint, transfer::KvMessage&& message);
// The same without waiting: `done` gets the outcome, at once when the message fails its checks,
// else on the engine thread once inserted (keep it short); with an error if the engine shuts down
// first.
void insert_kv_message_then(Engine& engine, uint64_t layout_fingerprint, transfer::KvMessage&& message,
                            std::function<void(Status)> done);

}  // namespace mnemo::server
