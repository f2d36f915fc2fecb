// Cluster membership on etcd. Each instance keeps one key, <prefix><id>, whose value is its
// InstanceInfo as JSON, attached to a lease it keeps alive (Registration). Liveness *is* the
// lease: an instance that stops refreshing it (crash, hang, partition) loses its key within the
// TTL, and an instance whose key is gone gets no new requests (SPEC M8). The router follows the
// prefix with a watch (MemberWatcher). There is no membership protocol of our own.
//
//   instance ──put key (lease L), keep L alive every ttl/3──▶ etcd ──watch prefix──▶ router
//
// Failure behaviour: both classes keep trying in their background thread while etcd is away;
// Registration re-grants a lease and puts its key again if the old lease is gone, MemberWatcher
// keeps its last view and resyncs (fresh get + watch) once etcd answers. Outages are logged to
// stderr once when they start and once when they end.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "util/result.h"

namespace mnemo::cluster {

// What an instance does in a disaggregated cluster (SPEC D4): everything (colocated), only
// prompts (prefill: their KV goes to a decode instance), or only the tokens after them (decode).
enum class Role { kColocated, kPrefill, kDecode };
// "colocated", "prefill", "decode": the name in member records and on the command line.
std::string_view role_name(Role role);
// The role of that name, nullopt if it is none.
std::optional<Role> role_named(std::string_view name);

struct InstanceInfo {
  std::string id;                   // unique per process start
  std::string address;              // "http://host:port" of its OpenAI API
  Role role = Role::kColocated;
  std::string transfer_endpoint;    // "" until KV transfer exists
  int64_t capacity_tokens = 0;      // device KV pool, tokens
  int64_t cache_capacity_tokens = 0;  // every tier of its KV cache (device, host, disk), tokens; 0: unknown
  int64_t queued_requests = 0;      // waiting + running
  int64_t queued_tokens = 0;        // prompt tokens admitted but not yet computed
  int64_t kv_bytes_per_token = 0;   // what moving a token's KV costs (0: unknown)
  // The instance's cost model as `mnemo profile` measured it (kv/cost_model.h, as JSON; "" if it
  // has none): the router's exec(x, y) for this instance (SPEC M6). Only its shape is checked
  // here (a JSON object); the router checks the numbers.
  std::string cost_profile;
  // server::prompt_fingerprint of its tokenizer and chat template, hex ("" if unknown): a router
  // that tokenizes follows its cache only if its own fingerprint is the same.
  std::string prompt_fingerprint;
  // Names the instance's durable state (its --state-dir: stored conversations, the KV disk
  // tier), the same across its restarts ("" without one): a restarted instance finds on its
  // disk what the failed process persisted there.
  std::string state_id;

  std::string to_json() const;
  // Validates: id and address non-empty, role one of the three, counts >= 0. Fields it does not
  // know are ignored and missing counts are 0, so instances of different versions can mix.
  static Result<InstanceInfo> from_json(std::string_view json);

  bool operator==(const InstanceInfo&) const = default;
};

inline std::string instances_prefix(const std::string& cluster_name = "default") {
  return "/mnemo/" + cluster_name + "/instances/";
}

// Keeps one instance's key, prefix + info.id, alive under a lease (SPEC M8: an instance whose
// lease expires gets no new requests). One background thread, woken every ttl/3 s: it refreshes
// the lease and publishes a changed load.
class Registration {
 public:
  // Grants the lease and puts the key before returning: an Error if etcd cannot be reached or
  // info is invalid. etcd raises a TTL below its minimum (2 s with default settings).
  // With a cluster secret its value is sealed (cluster/member_record.h).
  static Result<std::unique_ptr<Registration>> start(const EtcdEndpoint& etcd, const std::string& prefix,
                                                     InstanceInfo info, int64_t ttl_seconds = 3,
                                                     std::string cluster_secret = "");
  // Thread-safe; published at the next keep-alive tick (ticks every ttl/3 s).
  void update_load(int64_t queued_requests, int64_t queued_tokens);
  // If the lease was lost (etcd lost its data, a long pause), a new lease is granted and the key
  // put again at the next tick.
  ~Registration();  // graceful leave: stops the thread, revokes the lease (the key goes at once)
  void abandon();   // for tests: stop keeping alive WITHOUT revoking, as a crashed process would (the key goes when the TTL expires)
  int64_t lease() const { return lease_.load(); }

  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  Registration(EtcdClient client, std::string key, InstanceInfo info, int64_t ttl_seconds, int64_t lease,
               std::string cluster_secret);
  void run();
  void tick();
  void report_failure(const Error& error, std::string_view next_step);  // logs once per outage
  void stop_thread();

  EtcdClient client_;
  const std::string key_;
  const int64_t ttl_seconds_;
  const std::string cluster_secret_;
  std::atomic<int64_t> lease_;  // changes only on the thread (re-registration); read anywhere

  std::mutex mutex_;
  std::condition_variable wake_;
  InstanceInfo info_;            // guarded by mutex_
  bool publish_pending_ = false;  // guarded by mutex_: info_ changed, or a new lease has no key yet
  bool stopping_ = false;         // guarded by mutex_

  bool in_outage_ = false;  // thread only: the last tick failed (for logging once per outage)
  bool abandoned_ = false;  // owner only
  std::thread thread_;
};

// The router's view of the instances: the prefix's current members, kept by a watch (resynced
// with a fresh get + watch if the stream breaks or etcd is unreachable for a while; keeps the last
// view meanwhile). One background thread.
class MemberWatcher {
 public:
  // Reads the prefix once before returning (an Error if etcd cannot be reached), then watches.
  // With a cluster secret, a value not sealed under it (cluster/member_record.h) is refused:
  // logged, counted in refused_records(), never a member.
  static Result<std::unique_ptr<MemberWatcher>> start(const EtcdEndpoint& etcd, const std::string& prefix,
                                                      std::string cluster_secret = "");
  // Values refused as unsealed or forged (each time one is read).
  uint64_t refused_records() const { return refused_records_.load(); }
  // Thread-safe snapshot, sorted by id; malformed values are skipped (logged once to stderr).
  std::vector<InstanceInfo> members() const;
  uint64_t generation() const;  // bumps on every change of members()
  // Blocks until pred(members()) holds or timeout; true if it held. For tests and the router's
  // start-up. pred runs on the calling thread without the watcher's lock held.
  bool wait_until(const std::function<bool(const std::vector<InstanceInfo>&)>& pred, double timeout_seconds) const;
  ~MemberWatcher();

  MemberWatcher(const MemberWatcher&) = delete;
  MemberWatcher& operator=(const MemberWatcher&) = delete;

 private:
  using View = std::map<std::string, InstanceInfo>;  // by etcd key

  MemberWatcher(EtcdClient client, std::string prefix, std::string cluster_secret);
  Status resync(int64_t& revision);
  void apply(const EtcdClient::WatchEvent& event);
  std::optional<InstanceInfo> decode(const KeyValue& kv);
  void publish_if_changed(View view);
  void run(int64_t revision);
  bool stopping() const;
  bool sleep_unless_stopping(std::chrono::milliseconds duration);

  EtcdClient client_;
  const std::string prefix_;
  const std::string cluster_secret_;
  std::atomic<uint64_t> refused_records_{0};

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  View view_;                // guarded by mutex_
  uint64_t generation_ = 0;  // guarded by mutex_
  bool stopping_ = false;    // guarded by mutex_

  std::set<std::string> warned_keys_;  // thread only: keys whose malformed value was logged
  std::thread thread_;
};

}  // namespace mnemo::cluster
