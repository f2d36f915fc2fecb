#include "router/cache_follower.h"
#include "router/router_http.h"
#include "util/thread_name.h"
#include "util/bounded_json.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr int kPollWaitMs = 2000;
constexpr auto kRetryAfterError = std::chrono::milliseconds(500);

// A JSON integer >= 0 (nlohmann keeps small non-negative ones either signed or unsigned).
bool is_unsigned(const json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

Result<uint64_t> unsigned_field(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || !is_unsigned(*it)) return make_error("cache events: '{}' missing or not unsigned", name);
  return it->get<uint64_t>();
}

}  // namespace

CacheFollower::CacheFollower(std::string address, std::string authorization, double pending_ttl_seconds)
    : address_(std::move(address)),
      authorization_(std::move(authorization)),
      pending_ttl_seconds_(pending_ttl_seconds),
      thread_([this] { run(); }) {}

void CacheFollower::request_stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (client_ != nullptr) client_->stop();
  }
  stop_requested_.notify_all();
}

CacheFollower::~CacheFollower() {
  request_stop();
  thread_.join();
}

size_t CacheFollower::matched_chunks(std::span<const uint64_t> keys, double now, bool include_pending) const {
  std::lock_guard lock(mutex_);
  if (!include_pending) {
    size_t n = 0;
    while (n < keys.size()) {
      const auto it = held_.find(keys[n]);
      if (it == held_.end() || it->second != ChunkHold::kWhole) break;
      ++n;
    }
    return n;
  }
  // What each chunk holds, up to the last one with a copy: a chunk below it without one is
  // dropped (the instance keeps a dropped chunk's tokens while chunks below it are cached, and
  // recomputes it in place). Pending chunks will have every layer.
  std::vector<ChunkHold> holds;
  size_t last_held = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ChunkHold hold = ChunkHold::kNone;
    if (const auto it = held_.find(keys[i]); it != held_.end()) {
      hold = it->second;
    } else if (const auto pending = pending_.find(keys[i]);
               pending != pending_.end() && now - pending->second <= pending_ttl_seconds_) {
      hold = ChunkHold::kWhole;
    }
    holds.push_back(hold);
    if (hold != ChunkHold::kNone) last_held = i + 1;
  }
  holds.resize(last_held);
  return static_cast<size_t>(reused_chunks(plan_chunk_use(holds, chunk_tokens_, sliding_window_)));
}

void CacheFollower::record_pending(std::span<const uint64_t> keys, double now) {
  std::lock_guard lock(mutex_);
  if (pending_.size() > 100000) {  // bounded: expired ones first, then all
    std::erase_if(pending_, [&](const auto& p) { return now - p.second > pending_ttl_seconds_; });
    if (pending_.size() > 100000) pending_.clear();
  }
  for (uint64_t key : keys) {
    if (held_.count(key) == 0) pending_[key] = now;
  }
}

Status CacheFollower::apply(const json& reply) {
  if (!reply.is_object()) return make_error("cache events: not a JSON object");
  MNEMO_ASSIGN_OR_RETURN(const uint64_t epoch, unsigned_field(reply, "epoch"));
  MNEMO_ASSIGN_OR_RETURN(const uint64_t next, unsigned_field(reply, "next"));
  MNEMO_ASSIGN_OR_RETURN(const uint64_t chunk_tokens, unsigned_field(reply, "chunk_tokens"));
  if (chunk_tokens < 1 || chunk_tokens > 65536) return make_error("cache events: chunk_tokens {} out of range", chunk_tokens);
  const auto snapshot = reply.find("snapshot");
  const auto events = reply.find("events");
  if (snapshot == reply.end() || !snapshot->is_boolean()) return make_error("cache events: 'snapshot' missing");
  if (events == reply.end() || !events->is_array()) return make_error("cache events: 'events' missing");
  MNEMO_ASSIGN_OR_RETURN(const uint64_t sliding_window, unsigned_field(reply, "sliding_window"));
  if (sliding_window > (uint64_t{1} << 30)) return make_error("cache events: sliding_window {} out of range", sliding_window);
  std::unordered_map<uint64_t, ChunkHold> fresh;
  if (snapshot->get<bool>()) {
    for (const auto& [name, hold] : {std::pair{"held", ChunkHold::kWhole}, std::pair{"compact", ChunkHold::kCompact}}) {
      const auto keys = reply.find(name);
      if (keys == reply.end() || !keys->is_array()) return make_error("cache events: a snapshot without '{}'", name);
      for (const json& key : *keys) {
        if (!is_unsigned(key)) return make_error("cache events: a '{}' key is not unsigned", name);
        fresh[key.get<uint64_t>()] = hold;
      }
    }
  }
  for (const json& e : *events) {
    if (!e.is_array() || e.size() != 2 || !is_unsigned(e[0]) || !is_unsigned(e[1]) || e[1].get<uint64_t>() > 2) {
      return make_error("cache events: an event is not [key, hold 0-2]");
    }
  }
  std::lock_guard lock(mutex_);
  if (snapshot->get<bool>()) {
    held_ = std::move(fresh);
    following_ = true;
  }
  for (const json& e : *events) {
    const auto key = e[0].get<uint64_t>();
    const auto hold = static_cast<ChunkHold>(e[1].get<uint64_t>());
    if (hold == ChunkHold::kNone) {
      held_.erase(key);
    } else {
      held_[key] = hold;
    }
    pending_.erase(key);
  }
  epoch_ = epoch;
  next_ = next;
  chunk_tokens_ = static_cast<int32_t>(chunk_tokens);
  sliding_window_ = static_cast<int32_t>(sliding_window);
  return ok_status();
}

void CacheFollower::run() {
  name_this_thread("mnemo-follower");
  httplib::Client client(address_);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::milliseconds(kPollWaitMs + 5000));
  bool failing = false;
  for (;;) {
    std::string path;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      client_ = &client;
      path = fmt::format("/v1/internal/cache_events?epoch={}&after={}&wait_ms={}", epoch_, next_, kPollWaitMs);
    }
    const auto reply = client.Get(path, upstream_headers(authorization_, "GET", path, ""));
    {
      std::lock_guard lock(mutex_);
      client_ = nullptr;
    }
    Status applied = make_error("{}", reply ? fmt::format("HTTP {}", reply->status) : httplib::to_string(reply.error()));
    if (reply && reply->status == 200) applied = apply(parse_bounded_json_or_discarded(reply->body));
    if (applied.ok()) {
      if (failing) std::fprintf(stderr, "mnemo route: following the cache of %s again\n", address_.c_str());
      failing = false;
      continue;
    }
    if (!failing) {
      std::fprintf(stderr, "mnemo route: cache events of %s: %s; retrying\n", address_.c_str(), applied.error().message().c_str());
    }
    failing = true;
    std::unique_lock lock(mutex_);
    if (stop_requested_.wait_for(lock, kRetryAfterError, [&] { return stopping_; })) return;
  }
}

bool CacheFollower::following() const {
  std::lock_guard lock(mutex_);
  return following_;
}

size_t CacheFollower::held_chunks() const {
  std::lock_guard lock(mutex_);
  return held_.size();
}

size_t CacheFollower::compact_chunks() const {
  std::lock_guard lock(mutex_);
  return static_cast<size_t>(
      std::count_if(held_.begin(), held_.end(), [](const auto& entry) { return entry.second == ChunkHold::kCompact; }));
}

int32_t CacheFollower::chunk_tokens() const {
  std::lock_guard lock(mutex_);
  return chunk_tokens_;
}

}  // namespace mnemo::router
