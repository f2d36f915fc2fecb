// MemberWatcher: the router's copy of the membership prefix, kept by get + watch.
#include <algorithm>
#include <cstdio>

#include "cluster/etcd_wire.h"
#include "cluster/member_record.h"
#include "cluster/membership.h"

namespace mnemo::cluster {
namespace {

using namespace std::chrono_literals;

// Pause before each resync: keeps a watch that breaks at once (etcd refusing it) from spinning,
// and is how often an unreachable etcd is retried.
constexpr auto kResyncPause = 250ms;

void log_line(const std::string& line) { std::fprintf(stderr, "mnemo: cluster: %s\n", line.c_str()); }

}  // namespace

Result<std::unique_ptr<MemberWatcher>> MemberWatcher::start(const EtcdEndpoint& etcd, const std::string& prefix,
                                                            std::string cluster_secret) {
  MNEMO_ASSIGN_OR_RETURN(EtcdClient client, EtcdClient::create(etcd));
  std::unique_ptr<MemberWatcher> watcher(new MemberWatcher(std::move(client), prefix, std::move(cluster_secret)));
  int64_t revision = 0;
  MNEMO_RETURN_IF_ERROR(watcher->resync(revision));
  watcher->thread_ = std::thread([w = watcher.get(), revision] { w->run(revision); });
  return watcher;
}

MemberWatcher::MemberWatcher(EtcdClient client, std::string prefix, std::string cluster_secret)
    : client_(std::move(client)), prefix_(std::move(prefix)), cluster_secret_(std::move(cluster_secret)) {}

MemberWatcher::~MemberWatcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<InstanceInfo> MemberWatcher::members() const {
  std::vector<InstanceInfo> out;
  {
    std::lock_guard lock(mutex_);
    out.reserve(view_.size());
    for (const auto& [key, info] : view_) out.push_back(info);
  }
  std::sort(out.begin(), out.end(), [](const InstanceInfo& a, const InstanceInfo& b) { return a.id < b.id; });
  return out;
}

uint64_t MemberWatcher::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

bool MemberWatcher::wait_until(const std::function<bool(const std::vector<InstanceInfo>&)>& pred,
                               double timeout_seconds) const {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, timeout_seconds)));
  while (true) {
    const uint64_t seen = generation();
    if (pred(members())) return true;
    std::unique_lock lock(mutex_);
    if (!changed_.wait_until(lock, deadline, [&] { return generation_ != seen || stopping_; })) return false;
    if (stopping_) return false;
  }
}

bool MemberWatcher::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

bool MemberWatcher::sleep_unless_stopping(std::chrono::milliseconds duration) {
  std::unique_lock lock(mutex_);
  return !changed_.wait_for(lock, duration, [&] { return stopping_; });
}

std::optional<InstanceInfo> MemberWatcher::decode(const KeyValue& kv) {
  auto info = open_member_record(kv.key, kv.value, cluster_secret_);
  if (!info.ok() && !cluster_secret_.empty()) ++refused_records_;
  if (info.ok()) {
    warned_keys_.erase(kv.key);
    return std::move(info).value();
  }
  if (warned_keys_.insert(kv.key).second) {
    log_line(fmt::format("skipping member {}: {}", wire::printable(kv.key), info.error().message()));
  }
  return std::nullopt;
}

void MemberWatcher::publish_if_changed(View view) {
  {
    std::lock_guard lock(mutex_);
    if (view == view_) return;
    view_ = std::move(view);
    ++generation_;
  }
  changed_.notify_all();
}

Status MemberWatcher::resync(int64_t& revision) {
  MNEMO_ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, client_.get_prefix(prefix_, &revision));
  View view;
  for (const KeyValue& kv : kvs) {
    if (auto info = decode(kv)) view.emplace(kv.key, std::move(*info));
  }
  publish_if_changed(std::move(view));
  return ok_status();
}

void MemberWatcher::apply(const EtcdClient::WatchEvent& event) {
  // A malformed value removes the member, as if its key were gone: its old value is stale.
  std::optional<InstanceInfo> info = event.deleted ? std::nullopt : decode(event.kv);
  if (event.deleted) warned_keys_.erase(event.kv.key);
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    auto it = view_.find(event.kv.key);
    if (info.has_value() && (it == view_.end() || it->second != *info)) {
      view_.insert_or_assign(event.kv.key, std::move(*info));
      changed = true;
    } else if (!info.has_value() && it != view_.end()) {
      view_.erase(it);
      changed = true;
    }
    if (changed) ++generation_;
  }
  if (changed) changed_.notify_all();
}

void MemberWatcher::run(int64_t revision) {
  bool unreachable = false;  // an outage was logged and has not ended yet
  while (!stopping()) {
    // From revision + 1: the events after the state that resync (or the last event) showed.
    const Status watched = client_.watch_prefix(
        prefix_, revision + 1,
        [&](const EtcdClient::WatchEvent& event) {
          apply(event);
          revision = std::max(revision, event.kv.mod_revision);
        },
        [&] { return stopping(); });
    if (watched.ok()) return;  // asked to stop
    // The stream broke: etcd restarted or is away, the history was compacted, or the watch
    // was idle too long. The view stays as it is until a fresh read replaces it.
    while (sleep_unless_stopping(kResyncPause)) {
      const Status synced = resync(revision);
      if (synced.ok()) {
        if (unreachable) log_line(fmt::format("watching {} again", wire::printable(prefix_)));
        unreachable = false;
        break;
      }
      if (!unreachable) {
        log_line(fmt::format("{}; {}; keeping the last view of the members and retrying",
                             watched.error().message(), synced.error().message()));
      }
      unreachable = true;
    }
  }
}

}  // namespace mnemo::cluster
