// Registration and MemberWatcher against a real etcd, including etcd crashing and coming back.
#include "cluster/membership.h"
#include "cluster/member_record.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cluster/etcd_fixture.h"
#include "cluster/wait_for.h"

namespace mnemo::cluster {
namespace {

using testing::EtcdTest;
using testing::wait_for;
using Clock = std::chrono::steady_clock;
using Members = std::vector<InstanceInfo>;

const std::string kPrefix = instances_prefix("test");

InstanceInfo instance(const std::string& id) {
  InstanceInfo info;
  info.id = id;
  info.address = "http://127.0.0.1:8000";
  info.capacity_tokens = 4096;
  return info;
}

std::unique_ptr<Registration> register_instance(const std::string& url, const std::string& id, int64_t ttl = 3) {
  auto registration = Registration::start(url, kPrefix, instance(id), ttl);
  EXPECT_TRUE(registration.ok()) << registration.error().message();
  return registration.ok() ? std::move(registration).value() : nullptr;
}

std::unique_ptr<MemberWatcher> watch_members(const std::string& url) {
  auto watcher = MemberWatcher::start(url, kPrefix);
  EXPECT_TRUE(watcher.ok()) << watcher.error().message();
  return watcher.ok() ? std::move(watcher).value() : nullptr;
}

bool has_ids(const Members& members, const std::vector<std::string>& ids) {
  if (members.size() != ids.size()) return false;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (members[i].id != ids[i]) return false;
  }
  return true;
}

TEST(MemberRecordTest, SealedUnderTheSecretAndTheKey) {
  const std::string secret(32, 's');
  const std::string key = kPrefix + "a";
  const std::string sealed = seal_member_record(key, instance("a"), secret);
  auto opened = open_member_record(key, sealed, secret);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EXPECT_EQ(*opened, instance("a"));
  // Another key (a replay under another member's name), another secret, a plain record, an
  // altered address under the old MAC: all refused.
  EXPECT_FALSE(open_member_record(kPrefix + "b", sealed, secret).ok());
  EXPECT_FALSE(open_member_record(key, sealed, std::string(32, 't')).ok());
  EXPECT_FALSE(open_member_record(key, instance("a").to_json(), secret).ok());
  std::string redirected = sealed;
  const size_t at = redirected.find("127.0.0.1");
  ASSERT_NE(at, std::string::npos);
  redirected.replace(at, 9, "10.6.6.66");
  EXPECT_FALSE(open_member_record(key, redirected, secret).ok());
  // Without a secret (a loopback cluster) the value is the plain record.
  EXPECT_EQ(seal_member_record(key, instance("a"), ""), instance("a").to_json());
  EXPECT_TRUE(open_member_record(key, instance("a").to_json(), "").ok());
}

TEST_F(EtcdTest, WithASecretAForgedMemberRecordIsRefusedAndCounted) {
  const std::string secret(32, 'k');
  auto watcher = MemberWatcher::start(url(), kPrefix, secret);
  ASSERT_TRUE(watcher.ok()) << watcher.error().message();
  auto sealed = Registration::start(url(), kPrefix, instance("a"), 3, secret);
  ASSERT_TRUE(sealed.ok()) << sealed.error().message();
  ASSERT_TRUE((*watcher)->wait_until([](const Members& m) { return has_ids(m, {"a"}); }, 3.0));
  // A writer without the secret: a plain record, and one sealed under another secret.
  auto client = EtcdClient::create(url());
  ASSERT_TRUE(client.ok());
  InstanceInfo attacker = instance("evil");
  attacker.address = "http://10.6.6.66:8000";
  ASSERT_TRUE(client->put(kPrefix + "evil", attacker.to_json()).ok());
  ASSERT_TRUE(client->put(kPrefix + "evil2", seal_member_record(kPrefix + "evil2", attacker, std::string(32, 'x'))).ok());
  ASSERT_TRUE(wait_for([&] { return (*watcher)->refused_records() >= 2; }, 3.0));
  EXPECT_TRUE(has_ids((*watcher)->members(), {"a"}));
}

TEST_F(EtcdTest, RegistrationAppearsAndItsLoadUpdatesPropagate) {
  auto watcher = watch_members(url());
  ASSERT_NE(watcher, nullptr);
  EXPECT_TRUE(watcher->members().empty());
  auto b = register_instance(url(), "b");
  auto a = register_instance(url(), "a");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return has_ids(m, {"a", "b"}); }, 3.0));
  EXPECT_EQ(watcher->members()[0], instance("a"));

  const uint64_t before = watcher->generation();
  a->update_load(5, 1200);
  ASSERT_TRUE(watcher->wait_until(
      [](const Members& m) { return m.size() == 2 && m[0].queued_requests == 5 && m[0].queued_tokens == 1200; },
      3.0));
  EXPECT_GT(watcher->generation(), before);
}

TEST_F(EtcdTest, GracefulLeaveRemovesTheMemberAtOnce) {
  auto watcher = watch_members(url());
  auto registration = register_instance(url(), "a", /*ttl=*/30);
  ASSERT_TRUE(watcher && registration);
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return m.size() == 1; }, 3.0));
  const auto left = Clock::now();
  registration.reset();
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return m.empty(); }, 3.0));
  EXPECT_LT(Clock::now() - left, std::chrono::seconds(1)) << "a TTL of 30 s: only revocation is this fast";
}

TEST_F(EtcdTest, AbandonedRegistrationGoesWhenItsTtlRunsOut) {
  auto watcher = watch_members(url());
  auto registration = register_instance(url(), "a", /*ttl=*/2);
  ASSERT_TRUE(watcher && registration);
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return m.size() == 1; }, 3.0));
  // Outlive the TTL while the thread keeps the lease alive.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ASSERT_EQ(watcher->members().size(), 1u);

  const auto crashed = Clock::now();
  registration->abandon();
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return m.empty(); }, 2.0 + 1.5));
  // The last refresh was at most ttl/3 before abandon(), so the lease had at least 1.3 s left.
  EXPECT_GT(Clock::now() - crashed, std::chrono::milliseconds(1000));
}

TEST_F(EtcdTest, RegistrationSurvivesAnEtcdRestart) {
  auto registration = register_instance(url(), "a");
  ASSERT_NE(registration, nullptr);
  etcd().kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // a failed tick or two
  const std::string failure = etcd().start();
  ASSERT_TRUE(failure.empty()) << failure;

  // etcd keeps leases in its data directory and renews them on start: the same key, alive.
  auto client = EtcdClient::create(url());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(wait_for(
      [&] {
        auto got = client->get(kPrefix + "a");
        return got.ok() && got->has_value() && (*got)->lease == registration->lease() &&
               client->keep_alive(registration->lease()).ok();
      },
      5.0));
  // And it stays: the thread keeps the lease alive past its TTL.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  auto got = client->get(kPrefix + "a");
  ASSERT_TRUE(got.ok() && got->has_value());
}

TEST_F(EtcdTest, RegistrationComesBackAfterEtcdLosesItsData) {
  auto registration = register_instance(url(), "a");
  ASSERT_NE(registration, nullptr);
  registration->update_load(3, 300);
  const int64_t first_lease = registration->lease();
  etcd().kill();
  etcd().wipe_data();
  const std::string failure = etcd().start();
  ASSERT_TRUE(failure.empty()) << failure;

  // The lease is gone with the data: a new lease and the key put again, with the latest load.
  auto watcher = watch_members(url());
  ASSERT_NE(watcher, nullptr);
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return m.size() == 1 && m[0].queued_requests == 3; }, 5.0));
  EXPECT_NE(registration->lease(), first_lease);
}

TEST_F(EtcdTest, WatcherKeepsItsLastViewWhileEtcdIsDownAndResyncsAfter) {
  auto a = register_instance(url(), "a");  // TTL 3 s: it notices the new etcd within 1 s
  auto watcher = watch_members(url());
  ASSERT_TRUE(a && watcher);
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return has_ids(m, {"a"}); }, 3.0));

  etcd().kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the stream has broken, resyncs fail
  EXPECT_TRUE(has_ids(watcher->members(), {"a"}));

  // A new, empty etcd on the same address: "a" registers again, "b" appears, and the watcher
  // (whose revision is now ahead of the new store's) must resync rather than wait for it.
  etcd().wipe_data();
  const std::string failure = etcd().start();
  ASSERT_TRUE(failure.empty()) << failure;
  auto b = register_instance(url(), "b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return has_ids(m, {"a", "b"}); }, 5.0));
  b.reset();
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return has_ids(m, {"a"}); }, 3.0));
}

TEST_F(EtcdTest, WatcherSkipsMalformedValues) {
  auto client = EtcdClient::create(url());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client->put(kPrefix + "bad", "{not json").ok());
  ASSERT_TRUE(client->put(kPrefix + "good", instance("good").to_json()).ok());
  auto watcher = watch_members(url());
  ASSERT_NE(watcher, nullptr);
  EXPECT_TRUE(has_ids(watcher->members(), {"good"}));

  ASSERT_TRUE(client->put(kPrefix + "bad", instance("bad").to_json()).ok());
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return has_ids(m, {"bad", "good"}); }, 3.0));
  // A member whose value turns bad is dropped: what it said before is stale.
  ASSERT_TRUE(client->put(kPrefix + "good", R"({"id":"good","address":"","role":"colocated"})").ok());
  ASSERT_TRUE(watcher->wait_until([](const Members& m) { return has_ids(m, {"bad"}); }, 3.0));
}

TEST_F(EtcdTest, WaitUntilReturnsFalseAtItsTimeout) {
  auto watcher = watch_members(url());
  ASSERT_NE(watcher, nullptr);
  const auto started = Clock::now();
  EXPECT_FALSE(watcher->wait_until([](const Members& m) { return !m.empty(); }, 0.3));
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(2));
}

TEST(MembershipStart, FailsWithAClearError) {
  const std::string nowhere = "http://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  auto registration = Registration::start(nowhere, kPrefix, instance("a"));
  ASSERT_FALSE(registration.ok());
  EXPECT_NE(registration.error().message().find(nowhere + ": grant lease"), std::string::npos)
      << registration.error().message();

  auto watcher = MemberWatcher::start(nowhere, kPrefix);
  ASSERT_FALSE(watcher.ok());
  EXPECT_NE(watcher.error().message().find(nowhere + ": get prefix"), std::string::npos) << watcher.error().message();

  InstanceInfo no_address = instance("a");
  no_address.address.clear();
  auto invalid = Registration::start(nowhere, kPrefix, no_address);
  ASSERT_FALSE(invalid.ok());
  EXPECT_NE(invalid.error().message().find("address"), std::string::npos) << invalid.error().message();
}

}  // namespace
}  // namespace mnemo::cluster
