// EtcdClient against a real etcd: keys, leases and the prefix watch.
#include "cluster/etcd_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "cluster/etcd_fixture.h"
#include "cluster/wait_for.h"

namespace mnemo::cluster {
namespace {

using testing::EtcdTest;
using testing::wait_for;
using Clock = std::chrono::steady_clock;
using namespace std::string_literals;

// Every byte value, in a key and in a value: the gateway carries bytes as base64.
std::string all_bytes() {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  return bytes;
}

EtcdClient client_for(const std::string& url) {
  auto client = EtcdClient::create(url);
  EXPECT_TRUE(client.ok()) << client.error().message();
  return std::move(client).value();
}

TEST(EtcdClientCreate, ValidatesTheUrl) {
  EXPECT_TRUE(EtcdClient::create("http://127.0.0.1:2379").ok());
  EXPECT_TRUE(EtcdClient::create("http://localhost:2379/").ok());
  EXPECT_TRUE(EtcdClient::create("http://[::1]:2379").ok());
  EXPECT_TRUE(EtcdClient::create("https://127.0.0.1:2379").ok());
  for (const char* bad : {"", "127.0.0.1:2379", "ftp://127.0.0.1:2379", "http://127.0.0.1", "http://:2379",
                          "http://127.0.0.1:0", "http://127.0.0.1:65536", "http://127.0.0.1:12ab",
                          "http://127.0.0.1:2379/v3", "http://a/b:2379"}) {
    auto client = EtcdClient::create(bad);
    ASSERT_FALSE(client.ok()) << bad;
    EXPECT_NE(client.error().message().find("http://host:port"), std::string::npos) << client.error().message();
  }
  EXPECT_FALSE(EtcdClient::create("http://127.0.0.1:2379", 0.0).ok());
  // TLS files belong to an https URL, a client certificate to its key, and each must be readable.
  EtcdEndpoint plain("http://127.0.0.1:2379");
  plain.ca_file = "/etc/hostname";
  EXPECT_FALSE(EtcdClient::create(plain).ok());
  EtcdEndpoint half("https://127.0.0.1:2379");
  half.cert_file = "/etc/hostname";
  EXPECT_FALSE(EtcdClient::create(half).ok());
  EtcdEndpoint missing("https://127.0.0.1:2379");
  missing.ca_file = "/nonexistent/ca.pem";
  EXPECT_FALSE(EtcdClient::create(missing).ok());
}

TEST(EtcdClientCreate, UnreachableServerNamesServerAndOperation) {
  EtcdClient client = client_for("http://127.0.0.1:" + std::to_string(testing::free_loopback_port()));
  Status put = client.put("/k", "v");
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.error().message().find(client.url() + ": put /k: "), std::string::npos) << put.error().message();
}

TEST_F(EtcdTest, PutGetPrefixDeleteRoundTripArbitraryBytes) {
  EtcdClient client = client_for(url());
  const std::string prefix = "/test/\xff\x00/"s;
  const std::string key = prefix + all_bytes();
  ASSERT_TRUE(client.put(key, all_bytes()).ok());
  ASSERT_TRUE(client.put(prefix + "empty", "").ok());
  ASSERT_TRUE(client.put("/test/outside", "x").ok());

  auto got = client.get(key);
  ASSERT_TRUE(got.ok()) << got.error().message();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->key, key);
  EXPECT_EQ((*got)->value, all_bytes());
  EXPECT_GT((*got)->mod_revision, 0);
  EXPECT_EQ((*got)->lease, 0);

  int64_t revision = 0;
  auto listed = client.get_prefix(prefix, &revision);
  ASSERT_TRUE(listed.ok()) << listed.error().message();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, key);  // key order: "\0..." sorts before "empty"
  EXPECT_EQ((*listed)[1].key, prefix + "empty");
  EXPECT_EQ((*listed)[1].value, "");
  EXPECT_GE(revision, (*listed)[1].mod_revision);

  ASSERT_TRUE(client.delete_key(key).ok());
  ASSERT_TRUE(client.delete_key(key).ok()) << "deleting a missing key is not an error";
  auto after = client.get(key);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
  auto rest = client.get_prefix(prefix);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->size(), 1u);
}

TEST_F(EtcdTest, KeyUnderLeaseStaysWhileKeptAliveAndGoesWithinTtlAfter) {
  EtcdClient client = client_for(url());
  auto lease = client.grant_lease(2);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  ASSERT_TRUE(client.put("/leased", "v", *lease).ok());
  auto present = [&] {
    auto got = client.get("/leased");
    return got.ok() && got->has_value();
  };
  // 3 s of refreshes every 0.5 s: longer than the TTL, so only the refreshes keep the key.
  for (const auto until = Clock::now() + std::chrono::seconds(3); Clock::now() < until;) {
    ASSERT_TRUE(client.keep_alive(*lease).ok());
    ASSERT_TRUE(present());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  auto got = client.get("/leased");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->lease, *lease);

  const auto stopped = Clock::now();
  ASSERT_TRUE(wait_for([&] { return !present(); }, 3.0)) << "the key outlived TTL + 1 s";
  EXPECT_GT(Clock::now() - stopped, std::chrono::milliseconds(1000)) << "the key went before its TTL";

  Status refresh = client.keep_alive(*lease);
  ASSERT_FALSE(refresh.ok());
  EXPECT_NE(refresh.error().message().find("lease not found"), std::string::npos) << refresh.error().message();
}

TEST_F(EtcdTest, RevokeDeletesTheLeasesKeysAtOnce) {
  EtcdClient client = client_for(url());
  auto lease = client.grant_lease(30);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(client.put("/a", "1", *lease).ok());
  ASSERT_TRUE(client.revoke_lease(*lease).ok());
  auto got = client.get("/a");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_FALSE(client.keep_alive(*lease).ok());

  // A put under a lease etcd does not have: the gateway's 404 with etcd's own words.
  Status put = client.put("/b", "2", *lease);
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.error().message().find("put /b: HTTP 404: etcdserver: requested lease not found"), std::string::npos)
      << put.error().message();
}

// Collects watch events from a watch_prefix running on its own thread.
class WatchRecorder {
 public:
  WatchRecorder(EtcdClient client, std::string prefix, int64_t start_revision)
      : thread_([this, client, prefix, start_revision]() mutable {
          result_ = client.watch_prefix(
              prefix, start_revision,
              [this](const EtcdClient::WatchEvent& event) {
                std::lock_guard lock(mutex_);
                events_.push_back(event);
              },
              [this] { return stop_.load(); });
          done_ = true;
        }) {}
  ~WatchRecorder() {
    stop_ = true;
    thread_.join();
  }

  std::vector<EtcdClient::WatchEvent> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }
  void stop() { stop_ = true; }
  bool done() const { return done_.load(); }
  const Status& result() const { return result_; }

 private:
  mutable std::mutex mutex_;
  std::vector<EtcdClient::WatchEvent> events_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  Status result_;
  std::thread thread_;
};

TEST_F(EtcdTest, WatchSeesPutsAndDeletesInOrderAndStopsPromptly) {
  EtcdClient client = client_for(url());
  int64_t revision = 0;
  ASSERT_TRUE(client.get_prefix("/w/", &revision).ok());
  WatchRecorder watch(client, "/w/", revision + 1);
  ASSERT_TRUE(client.put("/w/a", "1").ok());
  ASSERT_TRUE(client.put("/w/b", std::string("\0\xff", 2)).ok());
  ASSERT_TRUE(client.put("/x", "outside the prefix").ok());
  ASSERT_TRUE(client.delete_key("/w/a").ok());
  ASSERT_TRUE(client.put("/w/a", "again").ok());
  ASSERT_TRUE(wait_for([&] { return watch.events().size() >= 4; }, 5.0));

  const auto events = watch.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_FALSE(events[0].deleted);
  EXPECT_EQ(events[0].kv.key, "/w/a");
  EXPECT_EQ(events[0].kv.value, "1");
  EXPECT_EQ(events[1].kv.value, std::string("\0\xff", 2));
  EXPECT_TRUE(events[2].deleted);
  EXPECT_EQ(events[2].kv.key, "/w/a");
  EXPECT_FALSE(events[3].deleted);
  EXPECT_EQ(events[3].kv.value, "again");
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GT(events[i].kv.mod_revision, events[i - 1].kv.mod_revision);

  const auto asked = Clock::now();
  watch.stop();
  ASSERT_TRUE(wait_for([&] { return watch.done(); }, 2.0));
  EXPECT_LT(Clock::now() - asked, std::chrono::milliseconds(500));
  EXPECT_TRUE(watch.result().ok()) << watch.result().error().message();
}

TEST_F(EtcdTest, WatchReplaysHistoryFromItsStartRevision) {
  EtcdClient client = client_for(url());
  ASSERT_TRUE(client.put("/h/1", "a").ok());
  auto first = client.get("/h/1");
  ASSERT_TRUE(first.ok() && first->has_value());
  ASSERT_TRUE(client.put("/h/2", "b").ok());
  WatchRecorder watch(client, "/h/", (*first)->mod_revision);
  ASSERT_TRUE(wait_for([&] { return watch.events().size() >= 2; }, 5.0));
  EXPECT_EQ(watch.events()[0].kv.key, "/h/1");
  EXPECT_EQ(watch.events()[1].kv.key, "/h/2");
}

TEST_F(EtcdTest, WatchReturnsAnErrorWhenEtcdGoes) {
  EtcdClient client = client_for(url());
  WatchRecorder watch(client, "/w/", 1);
  ASSERT_TRUE(client.put("/w/a", "1").ok());
  ASSERT_TRUE(wait_for([&] { return watch.events().size() == 1; }, 5.0));
  etcd().kill();
  ASSERT_TRUE(wait_for([&] { return watch.done(); }, 3.0));
  ASSERT_FALSE(watch.result().ok());
  EXPECT_NE(watch.result().error().message().find("watch prefix /w/ from revision 1: stream broke"), std::string::npos)
      << watch.result().error().message();
}

TEST_F(EtcdTest, WatchOfCompactedHistoryIsAnError) {
  EtcdClient client = client_for(url());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.put("/c/k", std::to_string(i)).ok());
  auto latest = client.get("/c/k");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  httplib::Client raw("127.0.0.1", etcd().client_port());
  auto compacted = raw.Post("/v3/kv/compaction", "{\"revision\":\"" + std::to_string((*latest)->mod_revision) + "\"}",
                            "application/json");
  ASSERT_TRUE(compacted && compacted->status == 200);

  WatchRecorder watch(client, "/c/", 1);
  ASSERT_TRUE(wait_for([&] { return watch.done(); }, 3.0));
  ASSERT_FALSE(watch.result().ok());
  EXPECT_NE(watch.result().error().message().find("compacted"), std::string::npos) << watch.result().error().message();
}

TEST_F(EtcdTest, WatchStopsPromptlyWhileStillConnecting) {
  EtcdClient client = client_for(url());
  std::atomic<int> polls{0};
  const auto started = Clock::now();
  Status result = client.watch_prefix("/w/", 1, [](const EtcdClient::WatchEvent&) {}, [&] { return ++polls > 0; });
  EXPECT_TRUE(result.ok());
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(500));
}

}  // namespace
}  // namespace mnemo::cluster
