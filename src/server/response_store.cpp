#include "server/response_store.h"

#include <sqlite3.h>

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

Error sqlite_error(sqlite3* db, const char* what) { return make_error("response store: {}: {}", what, sqlite3_errmsg(db)); }

}  // namespace

Result<std::unique_ptr<ResponseStore>> ResponseStore::open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    Error error = make_error("response store {}: cannot open: {}", path, db != nullptr ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return error;
  }
  std::unique_ptr<ResponseStore> store(new ResponseStore(db));
  MNEMO_RETURN_IF_ERROR(store->exec("PRAGMA journal_mode=WAL"));
  MNEMO_RETURN_IF_ERROR(store->exec("PRAGMA synchronous=FULL"));
  MNEMO_RETURN_IF_ERROR(store->exec(
      "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, previous_id TEXT NOT NULL, "
      "input_messages TEXT NOT NULL, response TEXT NOT NULL, cache_namespace INTEGER NOT NULL DEFAULT 0)"));
  // Stores from before the namespace was kept get the column (their conversations: namespace 0).
  bool has_namespace = false;
  {
    Statement columns(db, "PRAGMA table_info(responses)");
    if (!columns.ok()) return sqlite_error(db, "read the table's columns");
    while (columns.step() == SQLITE_ROW) has_namespace = has_namespace || columns.column(1) == "cache_namespace";
  }
  if (!has_namespace) {
    MNEMO_RETURN_IF_ERROR(store->exec("ALTER TABLE responses ADD COLUMN cache_namespace INTEGER NOT NULL DEFAULT 0"));
  }
  return store;
}

ResponseStore::~ResponseStore() { sqlite3_close(db_); }

Status ResponseStore::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    Error error = make_error("response store: {}: {}", sql, message != nullptr ? message : "error");
    sqlite3_free(message);
    return error;
  }
  return ok_status();
}

Status ResponseStore::put(const StoredResponse& record) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO responses (id, previous_id, input_messages, response, cache_namespace) "
                 "VALUES (?, ?, ?, ?, ?)");
  if (!stmt.ok()) return sqlite_error(db_, "prepare insert");
  stmt.bind(1, record.id);
  stmt.bind(2, record.previous_id);
  stmt.bind(3, record.input_messages.dump());
  stmt.bind(4, record.response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  stmt.bind_int64(5, static_cast<int64_t>(record.cache_namespace));
  if (stmt.step() != SQLITE_DONE) return sqlite_error(db_, "insert");
  return ok_status();
}

Result<std::optional<StoredResponse>> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "SELECT previous_id, input_messages, response, cache_namespace FROM responses WHERE id = ?");
  if (!stmt.ok()) return sqlite_error(db_, "prepare select");
  stmt.bind(1, id);
  const int rc = stmt.step();
  if (rc == SQLITE_DONE) return std::optional<StoredResponse>();
  if (rc != SQLITE_ROW) return sqlite_error(db_, "select");
  StoredResponse record;
  record.id = id;
  record.previous_id = stmt.column(0);
  record.input_messages = nlohmann::json::parse(stmt.column(1), nullptr, false);
  record.response = nlohmann::json::parse(stmt.column(2), nullptr, false);
  record.cache_namespace = static_cast<uint64_t>(stmt.column_int64(3));
  if (record.input_messages.is_discarded() || record.response.is_discarded()) {
    return make_error("response store: record '{}' is corrupt", id);
  }
  return std::optional<StoredResponse>(std::move(record));
}

Result<bool> ResponseStore::remove(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "DELETE FROM responses WHERE id = ?");
  if (!stmt.ok()) return sqlite_error(db_, "prepare delete");
  stmt.bind(1, id);
  if (stmt.step() != SQLITE_DONE) return sqlite_error(db_, "delete");
  return sqlite3_changes(db_) > 0;
}

}  // namespace mnemo::server
