// Registration: one instance's lease-backed membership key.
#include <cstdio>

#include "cluster/member_record.h"
#include "cluster/membership.h"

namespace mnemo::cluster {
namespace {

void log_line(const std::string& line) { std::fprintf(stderr, "mnemo: cluster: %s\n", line.c_str()); }

}  // namespace

Result<std::unique_ptr<Registration>> Registration::start(const EtcdEndpoint& etcd, const std::string& prefix,
                                                          InstanceInfo info, int64_t ttl_seconds, std::string cluster_secret) {
  // The same checks a reader applies, so an instance cannot publish what routers would skip.
  auto valid = InstanceInfo::from_json(info.to_json());
  if (!valid.ok()) return valid.error().with_context("registration");
  if (prefix.empty()) return make_error("registration of {}: empty key prefix", info.id);
  if (ttl_seconds < 1) return make_error("registration of {}: TTL must be >= 1 s, got {}", info.id, ttl_seconds);
  MNEMO_ASSIGN_OR_RETURN(EtcdClient client, EtcdClient::create(etcd));

  const std::string key = prefix + info.id;
  MNEMO_ASSIGN_OR_RETURN(int64_t lease, client.grant_lease(ttl_seconds));
  if (auto put = client.put(key, seal_member_record(key, info, cluster_secret), lease); !put.ok()) {
    (void)client.revoke_lease(lease);  // best effort: it would expire anyway
    return put.error();
  }
  return std::unique_ptr<Registration>(
      new Registration(std::move(client), key, std::move(info), ttl_seconds, lease, std::move(cluster_secret)));
}

Registration::Registration(EtcdClient client, std::string key, InstanceInfo info, int64_t ttl_seconds, int64_t lease,
                           std::string cluster_secret)
    : client_(std::move(client)),
      key_(std::move(key)),
      ttl_seconds_(ttl_seconds),
      cluster_secret_(std::move(cluster_secret)),
      lease_(lease),
      info_(std::move(info)) {
  thread_ = std::thread([this] { run(); });
}

Registration::~Registration() {
  stop_thread();
  if (abandoned_) return;
  if (auto revoked = client_.revoke_lease(lease_.load()); !revoked.ok()) {
    // The key still goes, when the lease's TTL runs out.
    log_line(fmt::format("leaving {}: {}", key_, revoked.error().message()));
  }
}

void Registration::abandon() {
  stop_thread();
  abandoned_ = true;
}

void Registration::update_load(int64_t queued_requests, int64_t queued_tokens) {
  std::lock_guard lock(mutex_);
  if (info_.queued_requests == queued_requests && info_.queued_tokens == queued_tokens) return;
  info_.queued_requests = queued_requests;
  info_.queued_tokens = queued_tokens;
  publish_pending_ = true;
}

void Registration::stop_thread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Registration::run() {
  // Three refreshes per TTL: one lost or late refresh does not let the lease expire.
  const auto tick_interval = std::chrono::milliseconds(ttl_seconds_ * 1000 / 3);
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, tick_interval, [&] { return stopping_; })) {
    lock.unlock();
    tick();
    lock.lock();
  }
}

void Registration::tick() {
  if (auto alive = client_.keep_alive(lease_.load()); !alive.ok()) {
    report_failure(alive.error(), "registering again");
    // Whatever the failure, a new lease is safe: putting the key with it moves the key off the
    // old lease, so the old one's expiry cannot delete it.
    auto lease = client_.grant_lease(ttl_seconds_);
    if (!lease.ok()) return;  // etcd still away: the next tick tries again
    lease_.store(*lease);
    std::lock_guard lock(mutex_);
    publish_pending_ = true;
  }

  std::optional<InstanceInfo> to_publish;
  {
    std::lock_guard lock(mutex_);
    if (publish_pending_) to_publish = info_;
    publish_pending_ = false;
  }
  if (to_publish.has_value()) {
    if (auto put = client_.put(key_, seal_member_record(key_, *to_publish, cluster_secret_), lease_.load()); !put.ok()) {
      report_failure(put.error(), "retrying");
      std::lock_guard lock(mutex_);
      publish_pending_ = true;
      return;
    }
  }
  if (in_outage_) log_line(fmt::format("{}: registered again, lease {:x}", key_, lease_.load()));
  in_outage_ = false;
}

void Registration::report_failure(const Error& error, std::string_view next_step) {
  if (!in_outage_) log_line(fmt::format("{}: {}; {}", key_, error.message(), next_step));
  in_outage_ = true;
}

}  // namespace mnemo::cluster
