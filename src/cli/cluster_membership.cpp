#include "cli/cluster_membership.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "util/state_id.h"

namespace mnemo::cli {
namespace {

// This process's name in the cluster: host, port and a random part (a restart is a new instance).
std::string instance_id(int port) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return fmt::format("{}-{}-{:08x}", host, port, random());
}

}  // namespace

Result<std::unique_ptr<ClusterMembership>> ClusterMembership::join(const MembershipSettings& s, const Engine& engine) {
  cluster::InstanceInfo info;
  info.prompt_fingerprint = s.prompt_fingerprint;
  MNEMO_ASSIGN_OR_RETURN(info.state_id, state_id_of(s.state_dir));
  info.transfer_endpoint = s.transfer_endpoint;
  info.id = instance_id(s.port);
  info.address = s.address;
  info.role = cluster::role_named(s.role).value_or(cluster::Role::kColocated);  // the flag allows only the three
  info.capacity_tokens = static_cast<int64_t>(engine.config().kv_blocks) * engine.config().block_size;
  info.cache_capacity_tokens = engine.cache_capacity_tokens();
  const KvLayout layout = engine.model().kv_layout(engine.config().block_size, engine.config().kv_dtype);
  info.kv_bytes_per_token = static_cast<int64_t>(layout.block_bytes() / static_cast<size_t>(layout.block_size));
  // A measured profile is the router's cost model for this instance (defaults add nothing to its flags).
  if (engine.config().cost.source != "default") {
    auto profile = cost_model_json(engine.config().cost);
    if (!profile.ok()) return profile.error().with_context("publishing the cost profile");
    info.cost_profile = std::move(*profile);
  }
  auto registration = cluster::Registration::start(s.etcd, cluster::instances_prefix(s.cluster_name), info,
                                                   /*ttl_seconds=*/3, s.cluster_secret);
  if (!registration.ok()) return registration.error().with_context("joining the cluster");
  auto self = std::unique_ptr<ClusterMembership>(new ClusterMembership(std::move(*registration), engine));
  std::printf("mnemo: instance %s joined cluster '%s' at %s as %s (KV transport %s)\n", info.id.c_str(), s.cluster_name.c_str(),
              s.cluster_url.c_str(), s.role.c_str(), info.transfer_endpoint.c_str());
  return self;
}

ClusterMembership::ClusterMembership(std::unique_ptr<cluster::Registration> registration, const Engine& engine)
    : registration_(std::move(registration)), engine_(engine), publisher_([this] { publish_load(); }) {}

ClusterMembership::~ClusterMembership() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  publisher_.join();
}

void ClusterMembership::publish_load() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stopping_; })) {
    const MetricsSnapshot m = engine_.metrics();
    registration_->update_load(m.running + m.waiting, 0);
  }
}

}  // namespace mnemo::cli
