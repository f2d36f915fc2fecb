// ResponseStore: records survive reopening the file (as after a restart or a kill), deletes are
// durable, a record is its tenant's alone and never replaced, and a corrupt record is an error,
// not a crash.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>

#include "server/response_store.h"

namespace mnemo::server {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid()) + ".sqlite";
}

TEST(ResponseStore, RecordsSurviveReopening) {
  const std::string path = temp_path("store");
  {
    auto store = ResponseStore::open(path);
    ASSERT_TRUE(store.ok()) << store.error().message();
    auto first = (*store)->insert({"resp_1", "", "", nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}}),
                                   {{"id", "resp_1"}, {"object", "response"}}});
    ASSERT_TRUE(first.ok() && *first == ResponseStore::Inserted::kStored);
    auto second = (*store)->insert({"resp_2", "", "resp_1", nlohmann::json::array(), {{"id", "resp_2"}}});
    ASSERT_TRUE(second.ok() && *second == ResponseStore::Inserted::kStored);
  }
  auto store = ResponseStore::open(path);
  ASSERT_TRUE(store.ok());
  auto first = (*store)->get("resp_1", "");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->previous_id, "");
  EXPECT_EQ((*first)->input_messages[0]["content"], "hi");
  EXPECT_EQ((*first)->response["object"], "response");
  auto second = (*store)->get("resp_2", "");
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->previous_id, "resp_1");
  auto removed = (*store)->remove("resp_1", "");
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  EXPECT_FALSE(*(*store)->remove("resp_1", ""));
  EXPECT_FALSE((*store)->get("resp_1", "")->has_value());
  EXPECT_FALSE((*store)->get("nope", "")->has_value());
  std::remove(path.c_str());
}

TEST(ResponseStore, KeepsTheCacheNamespaceAndMigratesOlderStores) {
  const std::string path = temp_path("namespace");
  {
    // A store written before the namespace column existed.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE responses (id TEXT PRIMARY KEY, previous_id TEXT NOT NULL, "
                           "input_messages TEXT NOT NULL, response TEXT NOT NULL);"
                           "INSERT INTO responses VALUES ('resp_old', '', '[]', '{\"id\":\"resp_old\"}');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = ResponseStore::open(path);
  ASSERT_TRUE(store.ok()) << store.error().message();
  auto old = (*store)->get("resp_old", "");
  ASSERT_TRUE(old.ok() && old->has_value());
  EXPECT_EQ((*old)->cache_namespace, 0u);
  StoredResponse record{"resp_new", "", "resp_old", nlohmann::json::array(), {{"id", "resp_new"}}, 0xfedcba9876543210ull};
  ASSERT_TRUE((*store)->insert(record).ok());
  store = ResponseStore::open(path);  // reopened: no second migration
  ASSERT_TRUE(store.ok()) << store.error().message();
  auto got = (*store)->get("resp_new", "");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->cache_namespace, 0xfedcba9876543210ull);
  std::remove(path.c_str());
}

TEST(ResponseStore, CorruptRecordIsAnError) {
  const std::string path = temp_path("corrupt");
  {
    auto store = ResponseStore::open(path);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->insert({"resp_x", "", "", nlohmann::json::array(), {{"id", "resp_x"}}}).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE responses SET response = '{not json'", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = ResponseStore::open(path);
  ASSERT_TRUE(store.ok());
  auto record = (*store)->get("resp_x", "");
  ASSERT_FALSE(record.ok());
  EXPECT_NE(record.error().message().find("corrupt"), std::string::npos);
  std::remove(path.c_str());
}

TEST(ResponseStore, ARecordIsItsTenantsAloneAndNeverReplaced) {
  const std::string path = temp_path("tenants");
  auto store = ResponseStore::open(path);
  ASSERT_TRUE(store.ok()) << store.error().message();
  auto stored = (*store)->insert({"resp_a", "alice", "", nlohmann::json::array(), {{"text", "alice's"}}});
  ASSERT_TRUE(stored.ok() && *stored == ResponseStore::Inserted::kStored);
  // Another tenant sees nothing, deletes nothing, and cannot take the id.
  EXPECT_FALSE((*store)->get("resp_a", "bob")->has_value());
  EXPECT_FALSE((*store)->get("resp_a", "")->has_value());
  EXPECT_FALSE(*(*store)->remove("resp_a", "bob"));
  auto taken = (*store)->insert({"resp_a", "bob", "", nlohmann::json::array(), {{"text", "injected"}}});
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(*taken, ResponseStore::Inserted::kExists);
  auto again = (*store)->insert({"resp_a", "alice", "", nlohmann::json::array(), {{"text", "replaced"}}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, ResponseStore::Inserted::kExists);
  auto mine = (*store)->get("resp_a", "alice");
  ASSERT_TRUE(mine.ok() && mine->has_value());
  EXPECT_EQ((*mine)->response["text"], "alice's");
  EXPECT_EQ((*mine)->tenant, "alice");
  EXPECT_TRUE(*(*store)->remove("resp_a", "alice"));
  std::remove(path.c_str());
}

TEST(ResponseStore, ADamagedFileIsAnErrorNamingIt) {
  const std::string path = temp_path("damaged");
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    for (int i = 0; i < 100; ++i) std::fputs("this is not a database", f);
    std::fclose(f);
  }
  auto store = ResponseStore::open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message().find("damaged"), std::string::npos) << store.error().message();
  std::remove(path.c_str());
}

TEST(ResponseStore, UnopenablePathIsAnError) {
  auto store = ResponseStore::open("/nonexistent-dir/x/responses.sqlite");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message().find("/nonexistent-dir/x/responses.sqlite"), std::string::npos);
}

}  // namespace
}  // namespace mnemo::server
