// Decoding what etcd's gateway and other instances send, without an etcd: exact results for the
// shapes etcd 3.4 writes (copied from curl sessions against it), clear errors for garbage, and a
// randomized loop of mutated inputs that must never crash or throw.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cluster/etcd_client.h"
#include "cluster/etcd_wire.h"
#include "cluster/membership.h"

namespace mnemo::cluster {
namespace {

// Replies as etcd 3.4.23 wrote them.
constexpr const char* kRangeReply =
    R"({"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"4","raft_term":"2"},)"
    R"("kvs":[{"key":"L2EveQ==","create_revision":"4","mod_revision":"4","version":"1","value":"dg==","lease":"4111120329529414159"}],"count":"1"})";
constexpr const char* kEmptyRangeReply =
    R"({"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"2","raft_term":"2"}})";
constexpr const char* kWatchCreated =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"5","raft_term":"2"},"created":true}})";
constexpr const char* kWatchPut =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"6","raft_term":"2"},)"
    R"("events":[{"kv":{"key":"L3cvYQ==","create_revision":"6","mod_revision":"6","version":"1","value":"MQ=="}}]}})";
constexpr const char* kWatchDelete =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"8","raft_term":"2"},)"
    R"("events":[{"type":"DELETE","kv":{"key":"L3cvYQ==","mod_revision":"8"}}]}})";
constexpr const char* kWatchCompacted =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","raft_term":"2"},"canceled":true,"compact_revision":"7"}})";
constexpr const char* kGatewayError =
    R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})";

TEST(ParseRangeReply, ReadsEtcdsReply) {
  int64_t revision = 0;
  auto kvs = parse_range_reply(kRangeReply, &revision);
  ASSERT_TRUE(kvs.ok()) << kvs.error().message();
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_EQ((*kvs)[0].key, "/a/y");
  EXPECT_EQ((*kvs)[0].value, "v");
  EXPECT_EQ((*kvs)[0].mod_revision, 4);
  EXPECT_EQ((*kvs)[0].lease, 4111120329529414159);
  EXPECT_EQ(revision, 4);

  auto none = parse_range_reply(kEmptyRangeReply, &revision);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());  // proto3 leaves the empty "kvs" out
  EXPECT_EQ(revision, 2);
}

TEST(ParseRangeReply, RejectsGarbageNamingWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not JSON"},
      {"{", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {"\"kvs\"", "not a JSON object"},
      {kGatewayError, "etcd error: etcdserver: requested lease not found"},
      {R"({"kvs":[]})", "no header"},
      {R"({"header":{"revision":"x1"}})", "header: revision: \"x1\" is not an int64"},
      {R"({"header":{"revision":1.5}})", "header: revision: expected an int64"},
      {R"({"header":{"revision":"99999999999999999999"}})", "not an int64"},
      {R"({"header":{"revision":18446744073709551615}})", "out of the int64 range"},
      {R"({"header":{"revision":"1"},"kvs":{}})", "kvs: expected an array"},
      {R"({"header":{"revision":"1"},"kvs":[1]})", "kvs[0]: expected an object"},
      {R"({"header":{"revision":"1"},"kvs":[{"value":"dg=="}]})", "kvs[0]: no key"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":""}]})", "kvs[0]: empty key"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":"L2E="},{"key":"!!!!"}]})", "kvs[1]: key: base64: invalid byte '!' at offset 0"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":"L2E=","value":7}]})", "kvs[0]: value: expected a base64 string, got number"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":"L2E=","lease":[]}]})", "kvs[0]: lease: expected an int64"},
  };
  for (const auto& [body, expected] : cases) {
    auto kvs = parse_range_reply(body, nullptr);
    ASSERT_FALSE(kvs.ok()) << body;
    EXPECT_NE(kvs.error().message().find(expected), std::string::npos) << body << " -> " << kvs.error().message();
  }
}

TEST(ParseWatchChunk, ReadsEtcdsStreamObjects) {
  auto created = parse_watch_chunk(kWatchCreated);
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(created->empty());

  auto put = parse_watch_chunk(kWatchPut);
  ASSERT_TRUE(put.ok()) << put.error().message();
  ASSERT_EQ(put->size(), 1u);
  EXPECT_FALSE((*put)[0].deleted);  // a PUT has no "type": it is proto3's default enum value
  EXPECT_EQ((*put)[0].kv.key, "/w/a");
  EXPECT_EQ((*put)[0].kv.value, "1");
  EXPECT_EQ((*put)[0].kv.mod_revision, 6);

  auto deleted = parse_watch_chunk(kWatchDelete);
  ASSERT_TRUE(deleted.ok());
  ASSERT_EQ(deleted->size(), 1u);
  EXPECT_TRUE((*deleted)[0].deleted);
  EXPECT_EQ((*deleted)[0].kv.key, "/w/a");
  EXPECT_EQ((*deleted)[0].kv.value, "");
  EXPECT_EQ((*deleted)[0].kv.mod_revision, 8);
}

TEST(ParseWatchChunk, RejectsGarbageNamingWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not JSON"},
      {"null", "not a JSON object"},
      {kWatchCompacted, "watch cancelled by etcd: history before revision 7 was compacted"},
      {R"({"result":{"canceled":true,"cancel_reason":"no leader"}})", "watch cancelled by etcd: no leader"},
      {R"({"error":{"grpc_code":14,"message":"etcdserver: no leader"}})", "etcd error: etcdserver: no leader"},
      {R"({"result":7})", "no result object"},
      {R"({})", "no result object"},
      {R"({"result":{"events":{}}})", "events: expected an array"},
      {R"({"result":{"events":[{"type":"PUT"}]}})", "events[0]: no kv"},
      {R"({"result":{"events":[{"type":"MOVE","kv":{"key":"L2E="}}]}})", "events[0]: type: unknown event type \"MOVE\""},
      {R"({"result":{"events":[{"kv":{"key":"L2E="}},{"kv":{"key":"L2E"}}]}})", "events[1]: kv: key: base64: length 3"},
      {R"({"result":{"events":[{"kv":{"key":"L2E=","mod_revision":"-"}}]}})", "events[0]: kv: mod_revision: \"-\" is not an int64"},
  };
  for (const auto& [body, expected] : cases) {
    auto events = parse_watch_chunk(body);
    ASSERT_FALSE(events.ok()) << body;
    EXPECT_NE(events.error().message().find(expected), std::string::npos) << body << " -> " << events.error().message();
  }
}

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::mt19937 rng(7);
  for (size_t length = 0; length < 70; ++length) {
    std::string bytes(length, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    auto decoded = base64_decode(base64_encode(bytes));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message();
    EXPECT_EQ(*decoded, bytes);
  }
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("\xff\xfe"), "//4=");
}

TEST(Base64, RejectsMalformedText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Zg=", "length 3 is not a multiple of 4"},
      {"Z", "length 1"},
      {"Zg=a", "invalid byte '=' at offset 2"},
      {"====", "invalid byte '=' at offset 0"},
      {"Z===", "invalid byte '=' at offset 1"},
      {"Zm9v!A==", "invalid byte '!' at offset 4"},
      {"Zm9-", "invalid byte '-' at offset 3"},  // base64url is not what the gateway writes
      {std::string("Zm\0v", 4), "invalid byte '\\x00' at offset 2"},
      {"Zm9v\n", "length 5"},
  };
  for (const auto& [text, expected] : cases) {
    auto decoded = base64_decode(text);
    ASSERT_FALSE(decoded.ok()) << text;
    EXPECT_NE(decoded.error().message().find(expected), std::string::npos) << text << " -> " << decoded.error().message();
  }
}

TEST(PrefixRangeEnd, IncrementsTheLastByteThatCan) {
  EXPECT_EQ(prefix_range_end("/a/"), "/a0");
  EXPECT_EQ(prefix_range_end("a\xff"), "b");
  EXPECT_EQ(prefix_range_end("a\xff\xff"), "b");
  EXPECT_EQ(prefix_range_end("\xff"), std::string(1, '\0'));
  EXPECT_EQ(prefix_range_end(""), std::string(1, '\0'));
}

TEST(JsonObjectSplitter, SplitsObjectsArrivingInPieces) {
  const std::string stream = std::string(kWatchCreated) + "\n" + kWatchPut + "\r\n" +
                             R"({"s":"a } in a string, \" and \\"})" + kWatchDelete;
  for (size_t piece : {size_t{1}, size_t{3}, size_t{17}, stream.size()}) {
    wire::JsonObjectSplitter splitter;
    std::vector<std::string> objects;
    for (size_t at = 0; at < stream.size(); at += piece) {
      ASSERT_TRUE(splitter.feed(std::string_view(stream).substr(at, piece), objects).ok());
    }
    ASSERT_EQ(objects.size(), 4u) << "piece " << piece;
    EXPECT_EQ(objects[0], kWatchCreated);
    EXPECT_EQ(objects[1], kWatchPut);
    EXPECT_EQ(objects[2], R"({"s":"a } in a string, \" and \\"})");
    EXPECT_EQ(objects[3], kWatchDelete);
  }
  wire::JsonObjectSplitter splitter;
  std::vector<std::string> objects;
  Status garbage = splitter.feed("{}x", objects);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.error().message().find("expected a JSON object, got byte 0x78"), std::string::npos);
}

TEST(InstanceInfo, RoundTripsThroughJson) {
  InstanceInfo info;
  info.id = "i-1";
  info.address = "http://10.0.0.1:8080";
  info.role = Role::kDecode;
  info.transfer_endpoint = "ucx://10.0.0.1:13337";
  info.capacity_tokens = 1 << 20;
  info.cache_capacity_tokens = int64_t{3} << 20;
  info.queued_requests = 3;
  info.queued_tokens = 900;
  info.prompt_fingerprint = "0123456789abcdef";
  info.state_id = "5f3c0a9e1b2d4c6e";
  auto back = InstanceInfo::from_json(info.to_json());
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, info);
  EXPECT_EQ(back->cost_profile, "");

  // A published profile travels as a JSON object (canonical text: keys sorted, compact).
  info.cost_profile = R"({"copy_bytes_per_second":1e10,"per_token_seconds":0.002})";
  const std::string published = info.to_json();
  EXPECT_NE(published.find(R"("cost_profile":{"copy_bytes_per_second")"), std::string::npos) << published;
  back = InstanceInfo::from_json(published);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->cost_profile, R"({"copy_bytes_per_second":10000000000.0,"per_token_seconds":0.002})");

  // Fields from a newer version are ignored; missing ones take their defaults.
  auto minimal = InstanceInfo::from_json(R"({"id":"x","address":"http://h:1","future_field":[1,2]})");
  ASSERT_TRUE(minimal.ok()) << minimal.error().message();
  EXPECT_EQ(minimal->role, Role::kColocated);
  EXPECT_EQ(minimal->queued_tokens, 0);
}

TEST(InstanceInfo, RejectsInvalidValues) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "instance info is not JSON"},
      {"{\"id\":", "instance info is not JSON"},
      {"[]", "not a JSON object"},
      {R"({"address":"http://h:1"})", "instance info: id: missing or empty"},
      {R"({"id":"","address":"http://h:1"})", "id: missing or empty"},
      {R"({"id":7,"address":"http://h:1"})", "id: expected a string, got number"},
      {R"({"id":"x"})", "instance x: address: missing or empty"},
      {R"({"id":"x","address":"http://h:1","role":"leader"})", "role: \"leader\" is not colocated, prefill or decode"},
      {R"({"id":"x","address":"http://h:1","queued_tokens":-1})", "queued_tokens: must be >= 0, got -1"},
      {R"({"id":"x","address":"http://h:1","capacity_tokens":1.5})", "capacity_tokens: expected a non-negative int64, got 1.5"},
      {R"({"id":"x","address":"http://h:1","queued_requests":"3"})", "queued_requests: expected a non-negative int64, got string"},
      {R"({"id":"x","address":"http://h:1","queued_requests":18446744073709551615})", "queued_requests: 18446744073709551615 is out of the int64 range"},
      {R"({"id":"x","address":"http://h:1","cost_profile":"fast"})", "cost_profile: expected an object, got string"},
      {R"({"id":"x","address":"http://h:1","prompt_fingerprint":7})", "prompt_fingerprint: expected a string, got number"},
      {R"({"id":"x","address":"http://h:1","state_id":[]})", "state_id: expected a string, got array"},
      {R"({"id":"x","address":"http://h:1","cost_profile":[1]})", "cost_profile: expected an object, got array"},
  };
  for (const auto& [text, expected] : cases) {
    auto info = InstanceInfo::from_json(text);
    ASSERT_FALSE(info.ok()) << text;
    EXPECT_NE(info.error().message().find(expected), std::string::npos) << text << " -> " << info.error().message();
  }
}

// Random edits of valid inputs: flipped, inserted, deleted and duplicated bytes, truncation.
std::string mutate(std::string text, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = text.empty() ? 0 : rng() % text.size();
    switch (rng() % 5) {
      case 0:
        if (!text.empty()) text[at] = static_cast<char>(rng());
        break;
      case 1: text.insert(at, 1, "{}[]\",:\\0-=eA/"[rng() % 14]); break;
      case 2:
        if (!text.empty()) text.erase(at, 1 + rng() % 8);
        break;
      case 3: text.insert(at, text.substr(at, rng() % 16)); break;
      default: text.resize(at); break;
    }
  }
  return text;
}

TEST(ClusterParsingFuzz, MutatedInputsNeverCrash) {
  const std::vector<std::string> seeds = {kRangeReply, kEmptyRangeReply, kWatchCreated,   kWatchPut,
                                          kWatchDelete, kWatchCompacted, kGatewayError,     "Zm9vYmFy",
                                          R"({"id":"x","address":"http://h:1","role":"prefill","queued_tokens":5})"};
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::string input = mutate(seeds[rng() % seeds.size()], rng);
    int64_t revision = 0;
    accepted += parse_range_reply(input, &revision).ok();
    accepted += parse_watch_chunk(input).ok();
    accepted += base64_decode(input).ok();
    accepted += InstanceInfo::from_json(input).ok();
    wire::JsonObjectSplitter splitter;
    std::vector<std::string> objects;
    (void)splitter.feed(input, objects);
  }
  EXPECT_GT(accepted, 0) << "the mutations should leave some inputs valid";
}

TEST(InstanceRole, NamesRoundTripAndOthersAreRefused) {
  for (Role role : {Role::kColocated, Role::kPrefill, Role::kDecode}) EXPECT_EQ(role_named(role_name(role)), role);
  EXPECT_EQ(role_name(Role::kDecode), "decode");
  EXPECT_EQ(role_named("leader"), std::nullopt);
  EXPECT_EQ(role_named("Decode"), std::nullopt);  // names are exact
}

}  // namespace
}  // namespace mnemo::cluster
