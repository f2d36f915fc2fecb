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
  std::string tenant;       // who stored it: only this tenant may read, continue or delete it
  std::string previous_id;  // empty for the first turn
  nlohmann::json input_messages;  // this turn's messages, [{"role", "content"}] (no system)
  nlohmann::json response;        // the response object as returned to the client
  uint64_t cache_namespace = 0;   // the tenant's KV namespace (to delete the conversation's KV)
};

class ResponseStore {
 public:
  // Opens (creating if needed) the store in `path`; ":memory:" for a volatile one. The files are
  // checked first (server/store_health.h): committed WAL frames that SQLite's recovery would drop
  // are logged, counted (wal_frames_dropped) and the WAL kept aside as `<path>-wal.damaged`; a
  // damaged database is an Error (the server then serves without the Responses API).
  static Result<std::unique_ptr<ResponseStore>> open(const std::string& path);
  // Committed WAL frames found dropped when the store was opened.
  uint64_t wal_frames_dropped() const { return wal_frames_dropped_; }
  ~ResponseStore();

  enum class Inserted { kStored, kExists, kNoSpace };
  // Stores a new record, durably once it returns kStored. Never replaces one: an id taken
  // already (by any tenant) is kExists; a full disk is kNoSpace; other failures an Error.
  Result<Inserted> insert(const StoredResponse& record);
  // The tenant's record (nullopt if there is none, or it is another tenant's).
  Result<std::optional<StoredResponse>> get(const std::string& id, const std::string& tenant);
  // True if the tenant's record existed.
  Result<bool> remove(const std::string& id, const std::string& tenant);

 private:
  explicit ResponseStore(sqlite3* db) : db_(db) {}
  Status exec(const char* sql);
  // Adds `column` (with its SQL definition) to stores written before it existed.
  Status add_column_if_missing(const char* column, const char* definition);

  uint64_t wal_frames_dropped_ = 0;
  std::mutex mutex_;
  sqlite3* db_;  // guarded by mutex_
};

}  // namespace mnemo::server
