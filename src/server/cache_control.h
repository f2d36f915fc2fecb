// A request's cache_control: what its client says about the conversation's future, for the cache
// to keep or let go of its KV (docs/kv.md, "A client's end and keep-alive").
//
//   {"type": "end"}                        this turn ends the conversation: its own cached chunks
//                                          leave first (KvCache::end_conversation)
//   {"type": "ephemeral"}                  the client will come back within 5 minutes ...
//   {"type": "ephemeral", "ttl": "1h"}     ... or within this: the conversation's chunks are kept
//                                          ahead of every unpinned chunk until then
//                                          (KvCache::pin_conversation); a soft pin
//
// "ephemeral" with a "ttl" is the shape Anthropic's API and Dynamo's nvext.cache_control give a
// cache hint. A ttl is "<n>s", "<n>m" or "<n>h", or a number of seconds; whether it is within
// the server's --max-cache-ttl is the server's check.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"

namespace mnemo::server {

inline constexpr double kDefaultCacheTtlSeconds = 300;

// Reads `control` into the request's end_conversation / cache_ttl_seconds; a 400 naming
// cache_control for anything else.
std::optional<ApiError> read_cache_control(const nlohmann::json& control, GenerationRequest& out);

}  // namespace mnemo::server
