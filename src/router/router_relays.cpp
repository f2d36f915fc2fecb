// Router, relaying: the router's side of router/relay.h (what a relay asks of it), and the start
// of each relay on the upstream I/O threads.
#include <algorithm>

#include "router/relay.h"
#include "router/router.h"
#include "router/router_http.h"
#include "router/upstream_io.h"

#include <boost/asio/post.hpp>

namespace mnemo::router {

void Router::relay(const http::Request& req, http::Response& res, RelayPlan plan) {
  plan.method = req.method;
  plan.path = req.target;
  plan.authorization = req.header("Authorization");
  RelaySettings settings;
  settings.timeouts.read = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(config_.upstream_timeout_seconds));
  settings.buffer_bytes = config_.relay_buffer_bytes;
  settings.resume_wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(config_.resume_wait_seconds));
  res.answer_later(start_relay(upstream_io_->relays.io().get_executor(), *this, settings, std::move(plan)));
}

std::vector<cluster::InstanceInfo> Router::resume_candidates(const Failover& failover,
                                                             const std::unordered_set<std::string>& failed,
                                                             const std::string& failed_state_id) {
  std::vector<cluster::InstanceInfo> live = live_members();
  std::erase_if(live, [&](const auto& m) { return failed.count(m.id) != 0; });
  std::vector<cluster::InstanceInfo> order;
  const auto take = [&](auto&& wanted) {
    for (auto it = live.begin(); it != live.end();) {
      if (wanted(*it)) {
        order.push_back(std::move(*it));
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  };
  const auto& candidates = failover.candidates;
  const auto among = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end && i < candidates.size(); ++i) take([&](const auto& m) { return m.id == candidates[i].id; });
  };
  among(0, failover.holders);
  if (!failed_state_id.empty()) take([&](const auto& m) { return m.state_id == failed_state_id; });
  among(failover.holders, candidates.size());
  take([](const auto&) { return true; });
  return order;
}

void Router::count(RelayEvent event, uint64_t tokens, uint64_t replicated) {
  if (event == RelayEvent::kClientBehind) {
    relay_waits_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard lock(mutex_);
  switch (event) {
    case RelayEvent::kResumed:
      ++resumed_streams_;
      resumed_tokens_ += tokens;
      resumed_replicated_tokens_ += replicated;
      break;
    case RelayEvent::kResumeFailed:
      ++failed_resumes_;
      break;
    case RelayEvent::kUpstreamExpired:
      ++expired_upstreams_;
      break;
    case RelayEvent::kClientBehind:
      break;
  }
}

void Router::run_blocking(std::function<void()> work) { boost::asio::post(upstream_io_->blocking.io(), std::move(work)); }

std::vector<http::Header> Router::upstream_headers(const std::string& authorization, const std::string& method,
                                                   const std::string& path, const std::string& body) {
  std::vector<http::Header> headers;
  for (auto& [name, value] : router::upstream_headers(authorization, method, path, body)) headers.push_back({name, value});
  return headers;
}

}  // namespace mnemo::router
