#include "router/router.h"

#include <map>

#include <nlohmann/json.hpp>

#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "router/conversation_text.h"
#include "router/prompt_keys.h"
#include "router/router_http.h"
#include "router/upstream_io.h"
#include "util/prometheus_text.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

// An instance's chunk size until its first cache event says (mnemo serve's default).
constexpr int32_t kDefaultChunkTokens = 32;

http::ServerOptions http_options(const RouterConfig& config) {
  http::ServerOptions options;
  options.host = config.host;
  options.port = config.port;
  options.limits.max_body_bytes = 8u << 20;
  options.limits.max_connections = config.max_connections;
  options.tls = config.tls;
  options.handler_threads = config.http_threads;
  return options;
}

}  // namespace

Router::Router(RouterConfig config)
    : config_(std::move(config)),
      http_(std::make_unique<http::Server>(http_options(config_))),
      tree_(64, config_.prompt_ttl_seconds),
      routing_(config_.policy, config_.cost) {
  upstream_io_ = std::make_unique<UpstreamIo>(std::max(1, config_.upstream_threads));
  install_routes();
}

Router::~Router() {
  stop();
  // Connections first (their relays' clients are then gone, so every relay ends), then the
  // relays' threads, which use everything else here.
  http_.reset();
  upstream_io_.reset();
}

Status Router::start() {
  if (config_.plan) {
    PlanInputs check = *config_.plan;
    check.machines = 2;
    if (auto plan = plan_cluster(check); !plan.ok()) return plan.error().with_context("router: the plan to apply");
  }
  if (!config_.model_path.empty()) {
    auto tokenizer = PromptTokenizer::load(config_.model_path);
    if (!tokenizer.ok()) return tokenizer.error().with_context("router: the model's tokenizer");
    tokenizer_ = std::move(*tokenizer);
  }
  cluster::EtcdEndpoint endpoint = config_.etcd_access;
  endpoint.url = config_.etcd_url;
  auto etcd = cluster::EtcdClient::create(endpoint);
  if (!etcd.ok()) return etcd.error().with_context("router");
  etcd_ = std::make_unique<cluster::EtcdClient>(std::move(*etcd));
  auto watcher = cluster::MemberWatcher::start(endpoint, cluster::instances_prefix(config_.cluster_name),
                                               upstream_cluster_secret());
  if (!watcher.ok()) return watcher.error().with_context("router: watching the instances");
  members_ = std::move(*watcher);
  if (Status bound = http_->bind(); !bound.ok()) return bound.error().with_context("router");
  bound_port_ = http_->port();
  return ok_status();
}

void Router::serve() { http_->serve(); }

void Router::stop() {
  if (http_) http_->stop();
}

void Router::install_routes() {
  http::Server& http = *http_;
  // Clients authenticate here (the router holds the instances' key file); instances then see a
  // peer acting for the client's tenant, never the client's key.
  http.on_head([](http::Request& req, http::Response& res) {
    if (req.path.rfind("/v1/", 0) != 0 && req.path != "/metrics") return true;
    if (client_tenant(req.header("Authorization"))) return true;
    send_error(res, 401, "Incorrect or missing API key (Authorization: Bearer ...).", "invalid_request_error", "invalid_api_key");
    return false;
  });
  http.on_error_body([](http::Response& res, int status, const std::string& message) {
    send_error(res, status, message, status >= 500 ? "server_error" : "invalid_request_error", "");
  });
  http.route("POST", "/v1/chat/completions", [this](http::Request& q, http::Response& r) { handle_generation(q, r, Api::kChat); });
  http.route("POST", "/v1/completions", [this](http::Request& q, http::Response& r) { handle_generation(q, r, Api::kCompletions); });
  http.route("POST", "/v1/responses", [this](http::Request& q, http::Response& r) { handle_generation(q, r, Api::kResponses); });
  http.route_prefix("GET", "/v1/responses/", [this](http::Request& q, http::Response& r) { handle_stored_response(q, r); });
  http.route_prefix("DELETE", "/v1/responses/", [this](http::Request& q, http::Response& r) { handle_stored_response(q, r); });
  http.route("GET", "/v1/models", [this](http::Request& q, http::Response& r) { handle_models(q, r); });
  http.route("GET", "/metrics", [this](http::Request& q, http::Response& r) { handle_metrics(q, r); });
  // The planner's Y, t and N as measured here, and the instances that could be split (D):
  // what `mnemo plan --from-router` reads.
  http.route("GET", "/v1/internal/plan_inputs", [this](http::Request&, http::Response& r) {
    const PlanMeter::Measured m = plan_meter_.measured();
    size_t splittable = 0;
    for (const auto& member : all_members()) splittable += member.transfer_endpoint.empty() ? 0 : 1;
    r.set_content(json{{"requests", m.requests},
                       {"prompt_seconds", m.prompt_seconds},
                       {"token_seconds", m.token_seconds},
                       {"tokens_generated", m.tokens_generated},
                       {"machines", splittable}}
                      .dump(),
                  "application/json");
  });
  http.route("GET", "/health", [this](http::Request&, http::Response& r) {
    const size_t n = live_members().size();
    r.status = n > 0 ? 200 : 503;
    r.set_content(json{{"status", n > 0 ? "ok" : "no instances"}, {"instances", n}}.dump(), "application/json");
  });
}

std::vector<cluster::InstanceInfo> Router::with_planned_roles(std::vector<cluster::InstanceInfo> members) {
  if (!config_.plan) return members;
  // Only instances that can send and receive KV can be split; the others stay colocated.
  std::vector<cluster::InstanceInfo*> splittable;
  for (auto& m : members) {
    m.role = cluster::Role::kColocated;
    if (!m.transfer_endpoint.empty()) splittable.push_back(&m);
  }
  PlanInputs in = *config_.plan;
  in.machines = static_cast<int32_t>(splittable.size());
  const Result<Plan> plan = in.machines >= 1 ? plan_cluster(in) : Result<Plan>(make_error("no instance"));
  const int32_t prefills = plan.ok() && plan->disaggregate ? plan->prompt_instances : 0;
  for (size_t i = 0; i < splittable.size() && prefills > 0; ++i) {
    splittable[i]->role = i < static_cast<size_t>(prefills) ? cluster::Role::kPrefill : cluster::Role::kDecode;
  }
  if (planned_prefills_.exchange(prefills) != prefills && plan.ok()) {
    std::fprintf(stderr, "mnemo route: plan for %d instances: %s\n", in.machines, plan->explanation.c_str());
  }
  return members;
}

std::vector<cluster::InstanceInfo> Router::all_members() {
  return members_ ? members_->members() : std::vector<cluster::InstanceInfo>{};
}

bool Router::is_member(const std::string& id) {
  if (!members_) return true;  // no view to tell by
  for (const auto& m : members_->members()) {
    if (m.id == id) return true;
  }
  return false;
}

std::vector<cluster::InstanceInfo> Router::live_members(bool prefill) {
  std::vector<cluster::InstanceInfo> out;
  if (!members_) return out;
  for (auto& m : with_planned_roles(members_->members())) {
    if ((m.role == cluster::Role::kPrefill) == prefill) out.push_back(std::move(m));
  }
  return out;
}

void Router::sync_followers(std::vector<std::shared_ptr<CacheFollower>>& retired) {
  if (!tokenizer_ || !members_ || members_->generation() == followers_generation_) return;
  followers_generation_ = members_->generation();
  std::unordered_map<std::string, std::string> live;  // id -> address
  for (const auto& m : members_->members()) {
    // Another tokenizer or chat template: its chunks' keys are not ours to compute. (Instances
    // of older versions publish none: followed on trust.)
    if (!m.prompt_fingerprint.empty() && m.prompt_fingerprint != tokenizer_->fingerprint()) {
      if (unfollowable_.insert(m.id).second) {
        std::fprintf(stderr,
                     "mnemo route: instance %s tokenizes differently from --model (fingerprint %s, ours %s): its "
                     "cache is not followed\n",
                     m.id.c_str(), m.prompt_fingerprint.c_str(), tokenizer_->fingerprint().c_str());
      }
      continue;
    }
    live.emplace(m.id, m.address);
  }
  for (auto it = followers_.begin(); it != followers_.end();) {
    if (live.count(it->first) != 0) {
      ++it;
      continue;
    }
    it->second->request_stop();  // its thread ends meanwhile; the caller waits for it outside the lock
    retired.push_back(std::move(it->second));
    it = followers_.erase(it);
  }
  for (const auto& [id, address] : live) {
    if (followers_.count(id) == 0) {
      const std::string authorization = config_.instance_api_key.empty() ? "" : "Bearer " + config_.instance_api_key;
      followers_.emplace(id, std::make_shared<CacheFollower>(address, authorization));
    }
  }
}

int64_t Router::matched_tokens(const std::string& instance, const PromptKeys& prompt, double now, bool conservative) {
  if (!prompt.tokenized()) {
    const size_t bytes = tree_.matched_bytes(instance, prompt.text(), now);
    return conservative ? static_cast<int64_t>(bytes / kBytesPerKnownToken) : routing_.tokens_of_text(bytes);
  }
  const auto it = followers_.find(instance);
  if (it == followers_.end()) return 0;
  const int32_t chunk = it->second->chunk_tokens() > 0 ? it->second->chunk_tokens() : kDefaultChunkTokens;
  // Conservative: only what the instance's events confirmed.
  return static_cast<int64_t>(it->second->matched_chunks(prompt.reusable_keys(chunk), now, !conservative)) * chunk;
}

int64_t Router::cached_tokens(const std::string& instance, const PromptKeys& prompt) const {
  if (!prompt.tokenized()) return routing_.tokens_of_text(tree_.size(instance) * tree_.chunk_bytes());
  const auto it = followers_.find(instance);
  if (it == followers_.end()) return 0;
  const int32_t chunk = it->second->chunk_tokens() > 0 ? it->second->chunk_tokens() : kDefaultChunkTokens;
  return static_cast<int64_t>(it->second->held_chunks()) * chunk;
}

void Router::record_prompt(const std::string& instance, const PromptKeys& prompt, double now, int64_t tokens) {
  if (!prompt.tokenized()) {
    const size_t bytes =
        tokens < 0 ? prompt.text().size()
                   : std::min(prompt.text().size(),
                              static_cast<size_t>(static_cast<double>(tokens) * routing_.cost().bytes_per_token));
    tree_.record(instance, prompt.text().substr(0, bytes), now);
    return;
  }
  const auto it = followers_.find(instance);
  if (it == followers_.end()) return;
  const int32_t chunk = it->second->chunk_tokens() > 0 ? it->second->chunk_tokens() : kDefaultChunkTokens;
  std::span<const uint64_t> keys = prompt.keys(chunk);
  if (tokens >= 0) keys = keys.first(std::min(keys.size(), static_cast<size_t>(tokens / chunk)));
  it->second->record_pending(keys, now);
}

std::shared_ptr<const CostModel> Router::profile_of(const cluster::InstanceInfo& instance) {
  if (instance.cost_profile.empty()) return nullptr;
  auto& [text, model] = profiles_[instance.id];
  if (text == instance.cost_profile) return model;
  text = instance.cost_profile;
  model = nullptr;
  auto parsed = parse_cost_model(text, "the cost profile of instance " + instance.id);
  if (parsed.ok()) {
    model = std::make_shared<const CostModel>(std::move(*parsed));
  } else {  // routed on the flags instead; logged once per published profile
    std::fprintf(stderr, "mnemo route: %s\n", parsed.error().message().c_str());
  }
  return model;
}

void Router::handle_models(const http::Request& req, http::Response& res) {
  relay(req, res, plan_over(live_members(), [](int, const std::string&, bool, const std::string&, double) {}, [] {
          http::Response reply;
          send_error(reply, 503, "no instance is serving", "server_error", "no_instance");
          return reply;
        }));
}

void Router::handle_metrics(const http::Request&, http::Response& res) {
  const auto members = live_members();
  std::string out;
  const PlanMeter::Measured measured = plan_meter_.measured();
  prometheus::gauge(out, "router_measured_prompt_seconds",
                    "The planner's Y as measured here: median time to first generated text.", measured.prompt_seconds);
  prometheus::gauge(out, "router_measured_token_seconds",
                    "The planner's t as measured here: median time per generated token after the first.",
                    measured.token_seconds);
  prometheus::gauge(out, "router_measured_tokens_per_request",
                    "The planner's N as measured here: mean tokens generated per request.", measured.tokens_generated);
  prometheus::gauge(out, "router_instances", "Instances with a live lease that take requests.", members.size());
  prometheus::counter(out, "router_member_records_refused_total",
                      "Member records in etcd refused as not sealed under the cluster secret (forged, or another cluster's).",
                      members_->refused_records());
  prometheus::gauge(out, "router_prefill_instances", "Prefill instances with a live lease.", live_members(/*prefill=*/true).size());
  if (config_.plan) {
    prometheus::gauge(out, "router_planned_prefill_instances",
                      "Instances the applied plan made prefill instances (0: colocated).",
                      std::max<int64_t>(0, planned_prefills_.load()));
  }
  std::vector<std::shared_ptr<CacheFollower>> retired_followers;  // declared first: stopped after the lock is let go
  std::lock_guard lock(mutex_);
  sync_followers(retired_followers);  // also before any request: the view changes without one
  prometheus::per_instance(out, "router_requests_total", "Requests sent to each instance.", "counter", routed_);
  prometheus::per_instance(out, "router_in_flight", "Requests each instance has not finished.", "gauge", in_flight_);
  std::map<std::string, size_t> tree_sizes;
  for (const auto& id : tree_.instances()) tree_sizes[id] = tree_.size(id);
  prometheus::per_instance(out, "router_prompt_tree_chunks", "Prompt-tree entries per instance.", "gauge", tree_sizes);
  std::map<std::string, size_t> followed, followed_compact;
  for (const auto& [id, follower] : followers_) {
    if (!follower->following()) continue;
    followed[id] = follower->held_chunks();
    followed_compact[id] = follower->compact_chunks();
  }
  prometheus::per_instance(out, "router_followed_cache_chunks",
                           "Chunks each instance's cache holds, as its insert and evict events say (with --model).",
                           "gauge", followed);
  prometheus::per_instance(out, "router_followed_compact_chunks",
                           "Of them, chunks held as their global layers only (sliding-window history).", "gauge",
                           followed_compact);
  std::map<std::string, double> profiled;
  for (const auto& [id, entry] : profiles_) {
    if (entry.second) profiled[id] = entry.second->seconds_per_token_at(0);
  }
  prometheus::per_instance(out, "router_profiled_seconds_per_prompt_token",
                           "Instances routed on their own `mnemo profile`: a prompt token's cost at position 0.", "gauge",
                           profiled);
  append_counters(out);
  res.set_content(out, "text/plain; version=0.0.4");
}

void Router::append_counters(std::string& out) {
  prometheus::counter(out, "router_relay_waits_total",
                      "Times a stream's relay stopped reading its instance because the client was behind.",
                      relay_waits_.load(std::memory_order_relaxed));
  prometheus::counter(out, "router_stored_turn_copies_total",
                      "Stored Responses API turns copied to an instance holding their KV replica.",
                      stored_turn_copies_.load(std::memory_order_relaxed));
  prometheus::counter(out, "router_stored_turn_copy_failures_total",
                      "Copies of stored turns an instance refused or did not answer.",
                      stored_turn_copy_failures_.load(std::memory_order_relaxed));
  prometheus::counter(out, "router_retries_total", "Requests an instance did not answer, sent to another.", retries_);
  prometheus::counter(out, "router_unroutable_total", "Requests no instance answered.", unroutable_);
  prometheus::counter(out, "router_kv_pushes_total", "KV transfers between instances the router asked for, done.", kv_pushes_);
  prometheus::counter(out, "router_kv_push_failures_total", "KV transfers that failed (the request recomputed).",
                      kv_push_failures_);
  prometheus::counter(out, "router_kv_pushed_tokens_total", "Prompt tokens whose KV moved between instances.",
                      kv_pushed_tokens_);
  prometheus::counter(out, "router_resumed_streams_total",
                      "Streamed replies whose instance failed, continued on another instance.", resumed_streams_);
  prometheus::counter(out, "router_resumed_tokens_total", "Tokens those replies had delivered before the failure.",
                      resumed_tokens_);
  prometheus::counter(out, "router_resumed_replicated_tokens_total",
                      "Prompt and generated tokens of those replies whose KV replica was acknowledged at the failure.",
                      resumed_replicated_tokens_);
  prometheus::counter(out, "router_failed_resumes_total", "Streamed replies no instance could continue.", failed_resumes_);
  prometheus::counter(out, "router_expired_upstreams_total",
                      "Streamed replies cut off because their instance's lease expired while it said nothing.",
                      expired_upstreams_);
  prometheus::counter(out, "router_prefills_total",
                      "Prompts computed on a prefill instance whose KV went to a decode instance.", prefills_);
  prometheus::counter(out, "router_prefill_failures_total", "Prefills that failed (the decode instance computed the prompt).",
                      prefill_failures_);
  prometheus::counter(out, "router_prefill_seconds_total", "Time spent in prefills, KV transfer included.", prefill_seconds_);
  prometheus::counter(out, "router_predicted_cached_tokens_total",
                      "Prompt tokens the routing expected cached where it sent them.", predicted_cached_tokens_);
}

}  // namespace mnemo::router
