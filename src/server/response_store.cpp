#include "server/response_store.h"

#include <sqlite3.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "server/store_health.h"
#include "util/bounded_json.h"

namespace mnemo::server {
namespace {

// A prepared statement, finalised on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { status_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return status_ == SQLITE_OK; }
  void bind(int index, const std::string& text) {
    sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  void bind_int64(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
  int step() { return sqlite3_step(stmt_); }
  int64_t column_int64(int index) { return sqlite3_column_int64(stmt_, index); }
  std::string column(int index) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, index));
    return text != nullptr ? std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, index))) : std::string();
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int status_ = SQLITE_ERROR;
};

Error sqlite_error(sqlite3* db, const char* what) { return make_error(ErrorCode::kIoError, "response store: {}: {}", what, sqlite3_errmsg(db)); }

}  // namespace

Result<std::unique_ptr<ResponseStore>> ResponseStore::open(const std::string& path) {
  // Before SQLite opens the files: its recovery rewrites the WAL, and drops what it cannot replay
  // without a word.
  StoreHealth health;
  if (path != ":memory:") {
    MNEMO_ASSIGN_OR_RETURN(health, check_store_file(path));
    if (!health.ok()) std::fprintf(stderr, "mnemo: response store %s: %s\n", path.c_str(), health.problem.c_str());
    if (health.wal_frames_dropped > 0) {  // the evidence, kept
      std::error_code ec;
      std::filesystem::copy_file(path + "-wal", path + "-wal.damaged", std::filesystem::copy_options::overwrite_existing, ec);
    }
    if (!health.header_ok) return make_error(ErrorCode::kCorruption, "response store {}: damaged: {}", path, health.problem);
  }
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    Error error = make_error(ErrorCode::kIoError, "response store {}: cannot open: {}", path, db != nullptr ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return error;
  }
  std::unique_ptr<ResponseStore> store(new ResponseStore(db));
  store->wal_frames_dropped_ = health.wal_frames_dropped;
  // A damaged file is found here, at start, not by the first turn that reads it.
  {
    MNEMO_ASSIGN_OR_RETURN(const std::string verdict, quick_check(db));
    if (verdict != "ok") return make_error(ErrorCode::kCorruption, "response store {}: damaged: {}", path, verdict);
  }
  MNEMO_RETURN_IF_ERROR(store->exec("PRAGMA journal_mode=WAL"));
  MNEMO_RETURN_IF_ERROR(store->exec("PRAGMA synchronous=FULL"));
  MNEMO_RETURN_IF_ERROR(store->exec(
      "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, previous_id TEXT NOT NULL, "
      "input_messages TEXT NOT NULL, response TEXT NOT NULL, cache_namespace INTEGER NOT NULL DEFAULT 0, "
      "tenant TEXT NOT NULL DEFAULT '')"));
  // Stores from before these columns: their conversations get namespace 0 and the tenant of a
  // single-tenant server.
  MNEMO_RETURN_IF_ERROR(store->add_column_if_missing("cache_namespace", "INTEGER NOT NULL DEFAULT 0"));
  MNEMO_RETURN_IF_ERROR(store->add_column_if_missing("tenant", "TEXT NOT NULL DEFAULT ''"));
  return store;
}

Status ResponseStore::add_column_if_missing(const char* column, const char* definition) {
  bool present = false;
  {
    Statement columns(db_, "PRAGMA table_info(responses)");
    if (!columns.ok()) return sqlite_error(db_, "read the table's columns");
    while (columns.step() == SQLITE_ROW) present = present || columns.column(1) == column;
  }
  if (present) return ok_status();
  const std::string sql = fmt::format("ALTER TABLE responses ADD COLUMN {} {}", column, definition);
  return exec(sql.c_str());
}

ResponseStore::~ResponseStore() { sqlite3_close(db_); }

Status ResponseStore::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    Error error = make_error(ErrorCode::kIoError, "response store: {}: {}", sql, message != nullptr ? message : "error");
    sqlite3_free(message);
    return error;
  }
  return ok_status();
}

Result<ResponseStore::Inserted> ResponseStore::insert(const StoredResponse& record) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_,
                 "INSERT INTO responses (id, previous_id, input_messages, response, cache_namespace, tenant) "
                 "VALUES (?, ?, ?, ?, ?, ?)");
  if (!stmt.ok()) return sqlite_error(db_, "prepare insert");
  stmt.bind(1, record.id);
  stmt.bind(2, record.previous_id);
  stmt.bind(3, record.input_messages.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  stmt.bind(4, record.response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  stmt.bind_int64(5, static_cast<int64_t>(record.cache_namespace));
  stmt.bind(6, record.tenant);
  const int rc = stmt.step();
  if (rc == SQLITE_DONE) return Inserted::kStored;
  if (rc == SQLITE_CONSTRAINT) return Inserted::kExists;
  if (rc == SQLITE_FULL) return Inserted::kNoSpace;
  return sqlite_error(db_, "insert");
}

Result<std::optional<StoredResponse>> ResponseStore::get(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "SELECT previous_id, input_messages, response, cache_namespace FROM responses WHERE id = ? AND tenant = ?");
  if (!stmt.ok()) return sqlite_error(db_, "prepare select");
  stmt.bind(1, id);
  stmt.bind(2, tenant);
  const int rc = stmt.step();
  if (rc == SQLITE_DONE) return std::optional<StoredResponse>();
  if (rc != SQLITE_ROW) return sqlite_error(db_, "select");
  StoredResponse record;
  record.id = id;
  record.tenant = tenant;
  record.previous_id = stmt.column(0);
  record.input_messages = parse_bounded_json_or_discarded(stmt.column(1));
  record.response = parse_bounded_json_or_discarded(stmt.column(2));
  record.cache_namespace = static_cast<uint64_t>(stmt.column_int64(3));
  if (record.input_messages.is_discarded() || record.response.is_discarded()) {
    return make_error(ErrorCode::kCorruption, "response store: record '{}' is corrupt", id);
  }
  return std::optional<StoredResponse>(std::move(record));
}

Result<bool> ResponseStore::remove(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "DELETE FROM responses WHERE id = ? AND tenant = ?");
  if (!stmt.ok()) return sqlite_error(db_, "prepare delete");
  stmt.bind(1, id);
  stmt.bind(2, tenant);
  if (stmt.step() != SQLITE_DONE) return sqlite_error(db_, "delete");
  return sqlite3_changes(db_) > 0;
}

}  // namespace mnemo::server
