// A serving instance's membership in a cluster: its record in etcd (address, role, capacity, KV
// layout, cost profile), which lives as long as its lease, kept alive by a background thread that
// publishes the instance's load every 250 ms.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "engine/engine.h"
#include "util/result.h"

namespace mnemo::cli {

struct MembershipSettings {
  cluster::EtcdEndpoint etcd;
  std::string cluster_url;   // for the log line
  std::string cluster_name;
  std::string role;          // colocated, prefill or decode
  std::string address;       // where the router reaches this instance
  std::string state_dir;     // names the instance's durable state (a restart keeps it)
  std::string transfer_endpoint;
  std::string prompt_fingerprint;
  std::string cluster_secret;  // seals the record
  int port = 0;
};

class ClusterMembership {
 public:
  static Result<std::unique_ptr<ClusterMembership>> join(const MembershipSettings& settings, const Engine& engine);
  ~ClusterMembership();

 private:
  ClusterMembership(std::unique_ptr<cluster::Registration> registration, const Engine& engine);
  void publish_load();

  std::unique_ptr<cluster::Registration> registration_;
  const Engine& engine_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread publisher_;
};

}  // namespace mnemo::cli
