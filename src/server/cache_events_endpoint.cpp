// GET /v1/internal/cache_events: the cache's insert and evict events (kv/cache_events.h), for a
// router's prompt trees (SPEC M7). A long poll: it answers at once when there are events after
// `after`, else within `wait_ms`.
//
//   query: epoch=<from the last reply, 0 at first>&after=<its "next">&wait_ms=<0..5000, 2000>
//   reply: {"epoch": E, "next": N, "snapshot": bool,
//           "held": [keys with every layer], "compact": [keys with the global layers only] (if snapshot),
//           "events": [[key, hold], ...], "chunk_tokens": C, "sliding_window": W}
// Keys are PrefixIndex::chunk_key values (unsigned 64-bit); a hold is 0 (no copy left), 1
// (compact: global layers only) or 2 (every layer), as kv/chunk_reuse.h's ChunkHold. W is the
// model's sliding window in tokens (0: none), which decides where compact chunks are usable.
#include <algorithm>
#include <charconv>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/server.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxWaitMs = 5000;

}  // namespace

void Server::handle_cache_events(const http::Request& req, http::Response& res) {
  // Which prompts are cached is every tenant's business: peers only.
  if (auto caller = peer_of(req); std::holds_alternative<ApiError>(caller)) return send_error(res, std::get<ApiError>(caller));
  uint64_t epoch = 0, after = 0, wait_ms = 0;
  if (!req.query_number("epoch", 0, UINT64_MAX, epoch) || !req.query_number("after", 0, UINT64_MAX, after) ||
      !req.query_number("wait_ms", 2000, kMaxWaitMs, wait_ms)) {
    return send_error(res, ApiError{400, "epoch, after and wait_ms (at most 5000) must be unsigned integers",
                                    "invalid_request_error", "", ""});
  }
  const CacheEventLog::Batch batch = engine_.cache_events().read(epoch, after, std::chrono::milliseconds(wait_ms));
  json events = json::array();
  for (const auto& [key, hold] : batch.events) events.push_back(json::array({key, static_cast<int>(hold)}));
  json reply = {{"epoch", batch.epoch},
                {"next", batch.next},
                {"snapshot", batch.snapshot},
                {"events", std::move(events)},
                {"chunk_tokens", engine_.config().block_size},
                {"sliding_window", std::max(0, engine_.model().config().sliding_window)}};
  if (batch.snapshot) {
    json whole = json::array(), compact = json::array();
    for (const auto& [key, hold] : batch.held) (hold == ChunkHold::kWhole ? whole : compact).push_back(key);
    reply["held"] = std::move(whole);
    reply["compact"] = std::move(compact);
  }
  res.status = 200;
  res.set_content(reply.dump(), "application/json");
}

}  // namespace mnemo::server
