// Router, stored Responses API conversations: who holds them (owner records in etcd: the
// instance that stored a turn, then the holders of its copies), copying a finished turn to the
// holders, and GET / DELETE of a stored response through the router.
#include <httplib.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "router/router.h"
#include "router/router_http.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr size_t kMaxRememberedOwners = 100000;  // response owners cached in memory (etcd has them all)

// An owner record: the instance that stored a response, then those holding copies, comma-separated.
std::vector<std::string> split_holders(const std::string& holders) {
  std::vector<std::string> ids;
  size_t at = 0;
  while (at <= holders.size()) {
    const size_t comma = std::min(holders.find(',', at), holders.size());
    if (comma > at) ids.push_back(holders.substr(at, comma - at));
    at = comma + 1;
  }
  return ids;
}

}  // namespace

std::string Router::owner_key(const std::string& response_id) const {
  return fmt::format("/mnemo/{}/responses/{}", config_.cluster_name, response_id);
}

std::vector<cluster::InstanceInfo> Router::live_holders(const std::string& holders) {
  std::vector<cluster::InstanceInfo> members = with_planned_roles(all_members());
  std::vector<cluster::InstanceInfo> out;
  for (const auto& id : split_holders(holders)) {
    for (const auto& m : members) {
      if (m.id == id) out.push_back(m);
    }
  }
  return out;
}

std::vector<std::string> Router::copy_stored_turn(const std::string& authorization, const json& request,
                                                  const json& response, const std::vector<cluster::InstanceInfo>& holders) {
  std::vector<std::string> stored;
  if (!response.is_object()) return stored;
  json copy = request;
  for (const char* field : {"stream", "mnemo_replica", "mnemo_replica_known_tokens", "mnemo_replica_at_end"}) copy.erase(field);
  const json body = {{"request", std::move(copy)}, {"response", response}};
  for (const auto& h : holders) {
    const auto reply = post_for(authorization, h.address, "/v1/internal/responses_import", body, std::chrono::seconds(30));
    if (reply && reply->status == 200) {
      stored.push_back(h.id);
      stored_turn_copies_.fetch_add(1, std::memory_order_relaxed);
    } else {
      stored_turn_copy_failures_.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "mnemo route: a copy of a stored turn on %s: %s\n", h.id.c_str(),
                   reply ? reply->body.substr(0, 300).c_str() : httplib::to_string(reply.error()).c_str());
    }
  }
  return stored;
}

Result<std::string> Router::owner_of(const std::string& response_id) {
  {
    std::lock_guard lock(mutex_);
    if (const auto it = owners_.find(response_id); it != owners_.end()) return it->second;
  }
  // A restarted router, or another one, routed it: etcd knows.
  auto kv = etcd_->get(owner_key(response_id));
  if (!kv.ok()) return kv.error();
  if (!kv->has_value()) return std::string();
  std::lock_guard lock(mutex_);
  if (owners_.size() >= kMaxRememberedOwners) owners_.clear();
  owners_[response_id] = (*kv)->value;
  return (*kv)->value;
}

void Router::send_owner_lookup_failure(http::Response& res, const Error& error) {
  res.set_header("Retry-After", "1");
  send_error(res, 503, fmt::format("cannot look up the instance of a stored response: {}", error.message()), "server_error",
             "cluster_unavailable");
}

void Router::remember_owner(const std::string& response_id, const std::string& instance) {
  {
    std::lock_guard lock(mutex_);
    if (owners_.size() >= kMaxRememberedOwners) owners_.clear();  // etcd answers for the rest
    owners_[response_id] = instance;
  }
  const Status put = etcd_->put(owner_key(response_id), instance);
  if (!put.ok()) std::fprintf(stderr, "mnemo route: %s\n", put.error().message().c_str());
}

void Router::handle_stored_response(const http::Request& req, http::Response& res) {
  const std::string id = req.path_tail;
  const Result<std::string> found = owner_of(id);
  if (!found.ok()) return send_owner_lookup_failure(res, found.error());
  if (found->empty()) return send_error(res, 404, fmt::format("No response found with id '{}'.", id), "invalid_request_error", "not_found");
  const std::vector<cluster::InstanceInfo> holders = live_holders(*found);
  if (holders.empty()) {
    res.set_header("Retry-After", "1");
    return send_error(res, 503, fmt::format("the instance holding response '{}' is unavailable", id), "server_error",
                      "instance_unavailable");
  }
  const bool deleting = req.method == "DELETE";
  if (deleting) {
    // The copies on the other holders go too (the first one answers the client).
    for (size_t i = 1; i < holders.size(); ++i) {
      (void)delete_for(req.header("Authorization"), holders[i].address, req.path);
    }
  }
  auto on_done = [this, id, deleting](int status, const std::string&, bool, const std::string&, double) {
    if (!deleting || status != 200) return;
    {
      std::lock_guard lock(mutex_);
      owners_.erase(id);
    }
    (void)etcd_->delete_key(owner_key(id));
  };
  relay(req, res, plan_over({holders.front()}, std::move(on_done), [id] {
          http::Response reply;
          send_error(reply, 503, fmt::format("the instance holding response '{}' is unavailable", id), "server_error",
                     "instance_unavailable");
          return reply;
        }));
}

}  // namespace mnemo::router
