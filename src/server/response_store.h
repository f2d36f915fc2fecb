// Durable store of Responses API objects (SPEC P1 through the API): each stored response keeps
// its full JSON, the input messages of its turn and the id of the response it continues, so a
// conversation's history can be rebuilt from its last response id, across server restarts.
//
// SQLite in WAL mode with synchronous=FULL: a response is durable once put() returns (the commit
// is fsynced), so a kill -9 loses nothing acknowledged. Thread-safe (one connection, a mutex).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/result.h"

struct sqlite3;

namespace mnemo::server {

struct StoredResponse {
  std::string id;
  std::string previous_id;  // empty for the first turn
  nlohmann::json input_messages;  // this turn's messages, [{"role", "content"}] (no system)
  nlohmann::json response;        // the response object as returned to the client
  uint64_t cache_namespace = 0;   // the tenant's KV namespace (to delete the conversation's KV)
};

class ResponseStore {
 public:
  // Opens (creating if needed) the store in `path`; ":memory:" for a volatile one.
  static Result<std::unique_ptr<ResponseStore>> open(const std::string& path);
  ~ResponseStore();

  Status put(const StoredResponse& record);
  Result<std::optional<StoredResponse>> get(const std::string& id);
  // True if it existed.
  Result<bool> remove(const std::string& id);

 private:
  explicit ResponseStore(sqlite3* db) : db_(db) {}
  Status exec(const char* sql);

  std::mutex mutex_;
  sqlite3* db_;  // guarded by mutex_
};

}  // namespace mnemo::server
