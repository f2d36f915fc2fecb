#include "router/relay.h"
#include "router/upstream_io.h"

#include <chrono>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "router/conversation_text.h"
#include "server/caller.h"
#include "router/router_http.h"
#include "router/prompt_keys.h"
#include "util/prometheus_text.h"
#include "util/bounded_json.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr double kExpireEverySeconds = 5;          // prompt-tree expiry scans at most this often
// Prompt-tree bytes to the tokens an instance surely holds, for the chunks a KV replica need not
// send: conservative (English text runs at about 4 bytes per token), since a guess past what the
// receiver holds costs a refused increment and a resend from the first chunk.
constexpr size_t kBytesPerKnownToken = 6;
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
    m.role = "colocated";
    if (!m.transfer_endpoint.empty()) splittable.push_back(&m);
  }
  PlanInputs in = *config_.plan;
  in.machines = static_cast<int32_t>(splittable.size());
  const Result<Plan> plan = in.machines >= 1 ? plan_cluster(in) : Result<Plan>(make_error("no instance"));
  const int32_t prefills = plan.ok() && plan->disaggregate ? plan->prompt_instances : 0;
  for (size_t i = 0; i < splittable.size() && prefills > 0; ++i) {
    splittable[i]->role = i < static_cast<size_t>(prefills) ? "prefill" : "decode";
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
    if ((m.role == "prefill") == prefill) out.push_back(std::move(m));
  }
  return out;
}

bool Router::prefill_on(const http::Request& req, Api api, const cluster::InstanceInfo& prefill,
                        const cluster::InstanceInfo& decode, const json& body, size_t decode_known_tokens,
                        int64_t& prompt_tokens) {
  // The prompt alone: one token, unstreamed, its KV replicated to the decode instance, answered
  // once the decode instance holds it all.
  json prompt_only = body;
  std::string path = req.path;
  if (api == Api::kResponses) {
    // Only the decode instance knows the history a stored conversation's turn continues: it says
    // what the prompt is, and the prefill instance computes those tokens, under the same tenant
    // (Authorization passed on, cache_salt kept).
    const auto rendered = post_for(req, decode.address, "/v1/internal/responses_prompt", body,
                                   std::chrono::duration<double>(config_.upstream_timeout_seconds));
    const json prompt = rendered && rendered->status == 200 ? parse_bounded_json_or_discarded(rendered->body) : json();
    if (!prompt.is_object() || !prompt.contains("prompt") || !prompt["prompt"].is_array()) {
      std::lock_guard lock(mutex_);
      ++prefill_failures_;
      std::fprintf(stderr, "mnemo route: the prompt of a Responses turn on %s: %s\n", decode.id.c_str(),
                   rendered ? rendered->body.substr(0, 300).c_str() : httplib::to_string(rendered.error()).c_str());
      return false;
    }
    prompt_tokens = static_cast<int64_t>(prompt["prompt"].size());
    prompt_only = json{{"prompt", prompt["prompt"]}, {"temperature", 0}};
    for (const char* field : {"model", "cache_salt"}) {
      if (body.contains(field)) prompt_only[field] = body[field];
    }
    path = "/v1/completions";
  }
  prompt_only["max_tokens"] = 1;
  prompt_only.erase("max_completion_tokens");
  prompt_only["stream"] = false;
  prompt_only.erase("stream_options");
  prompt_only.erase("n");
  prompt_only["mnemo_replica"] = json::array({decode.transfer_endpoint});
  prompt_only["mnemo_replica_known_tokens"] = json::array({decode_known_tokens});
  prompt_only["mnemo_replica_wait"] = true;
  const auto started = std::chrono::steady_clock::now();
  const auto reply = post_for(req, prefill.address, path, prompt_only,
                              std::chrono::duration<double>(config_.upstream_timeout_seconds));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::lock_guard lock(mutex_);
  if (!reply || reply->status != 200) {
    ++prefill_failures_;
    std::fprintf(stderr, "mnemo route: prefill on %s for %s failed: %s\n", prefill.id.c_str(), decode.id.c_str(),
                 reply ? reply->body.substr(0, 300).c_str() : httplib::to_string(reply.error()).c_str());
    return false;
  }
  ++prefills_;
  prefill_seconds_ += seconds;
  return true;
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

// One generation request as routed: what each of its attempts (router/relay.h) is built from.
struct Router::Generation {
  Api api = Api::kChat;
  json body;
  std::string raw_body;
  std::string authorization;
  std::vector<cluster::InstanceInfo> members;
  std::vector<size_t> order;  // of members: the instances to try
  size_t next = 0;            // of order: the next attempt's
  std::string prompt_text;
  std::optional<PromptKeys> prompt;  // over prompt_text
  int64_t prompt_tokens = 0;
  double arrived = 0;  // seconds_now()
  std::optional<cluster::InstanceInfo> prefill;
  bool prefilled = false;
  int64_t prefill_known_tokens = 0;
  int64_t rendered_prompt_tokens = -1;
  bool one_choice = true;
  bool resumable = false;
  bool replicable = false;
};

void Router::handle_generation(const http::Request& req, http::Response& res, Api api) {
  const json body = parse_bounded_json_or_discarded(req.body, JsonLimits{.max_bytes = size_t{64} << 20, .max_depth = 32});
  if (body.is_discarded()) {
    return send_error(res, 400, "the request body is not acceptable JSON (malformed, or nested deeper than 32 levels)",
                      "invalid_request_error", "");
  }
  // The router speaks to instances as a peer: a client's internal field would pass as its own.
  if (auto refused = server::refuse_internal_fields(body, server::Caller{})) {
    return send_error(res, refused->status, refused->message, refused->type, refused->code);
  }
  auto view = view_request(api, body);
  if (!view.ok()) return send_error(res, 400, view.error().message(), "invalid_request_error", "");

  std::vector<cluster::InstanceInfo> members = live_members();
  if (!view->previous_response_id.empty()) {
    // The conversation's history and KV are on the instance that stored it.
    const Result<std::string> found = owner_of(view->previous_response_id);
    if (!found.ok()) return send_owner_lookup_failure(res, found.error());
    if (found->empty()) {
      return send_error(res, 404, fmt::format("No response found with id '{}'.", view->previous_response_id),
                        "invalid_request_error", "not_found");
    }
    // The instances that stored it (the owner, and the holders of its copies): whatever role
    // they have now, a decode instance has the turn's prompt computed by a prefill instance, as
    // for a new request; any other (a plan may have made it a prefill instance since) runs the
    // turn whole.
    members = live_holders(*found);
    for (auto& m : members) {
      if (m.role != "decode") m.role = "colocated";
    }
    if (members.empty()) {
      res.set_header("Retry-After", "1");
      return send_error(res, 503, fmt::format("the instance holding response '{}' is unavailable", view->previous_response_id),
                        "server_error", "instance_unavailable");
    }
  }
  if (members.empty()) {
    res.set_header("Retry-After", "1");
    return send_error(res, 503, "no instance is serving", "server_error", "no_instance");
  }

  // The prompt's chunks named as the instances' caches name them, when the router tokenizes (a
  // Responses API turn's history is on its instance: it goes there anyway).
  const PromptKeys prompt =
      tokenizer_ && api != Api::kResponses
          ? PromptKeys(view->prompt_text, tokenizer_->tokens(api, req.body),
                       PromptTokenizer::cache_namespace(client_tenant(req.header("Authorization")).value_or(""), body))
          : PromptKeys(view->prompt_text);
  const int64_t prompt_tokens = prompt.tokenized() ? prompt.n_tokens() : routing_.tokens_of_text(view->prompt_text.size());

  // Candidates in the order to try: the policy's choice, then the rest by predicted time.
  const double now = seconds_now();
  std::vector<size_t> order;
  struct Push {
    cluster::InstanceInfo from;
    std::string to_endpoint;
    int64_t tokens;  // of the prompt the source holds
  };
  std::optional<Push> push;
  int64_t chosen_known_tokens = 0;  // of the prompt, surely held by the chosen instance
  std::vector<std::shared_ptr<CacheFollower>> retired_followers;
  {
    std::lock_guard lock(mutex_);
    sync_followers(retired_followers);
    if (now - last_expire_ >= kExpireEverySeconds) {
      tree_.expire(now);
      last_expire_ = now;
      std::unordered_set<std::string> live;
      for (const auto& m : members_->members()) live.insert(m.id);
      std::erase_if(profiles_, [&](const auto& entry) { return live.count(entry.first) == 0; });
    }
    std::vector<Candidate> candidates;
    for (const auto& m : members) {
      Candidate c;
      c.id = m.id;
      c.in_flight = in_flight_[m.id];
      c.routed = routed_[m.id];
      c.queued_tokens = m.queued_tokens;
      c.matched_tokens = matched_tokens(m.id, prompt, now);
      c.has_transport = !m.transfer_endpoint.empty();
      c.kv_bytes_per_token = m.kv_bytes_per_token;
      c.profile = profile_of(m);
      candidates.push_back(std::move(c));
    }
    const auto decision = routing_.choose(candidates, prompt_tokens, view->session_key);
    if (api != Api::kResponses) {
      if (const auto source = routing_.transfer_source(candidates, decision->index)) {
        push = Push{members[*source], members[decision->index].transfer_endpoint, candidates[*source].matched_tokens};
      }
    }
    order.push_back(decision->index);
    chosen_known_tokens = matched_tokens(members[decision->index].id, prompt, now, /*conservative=*/true);
    predicted_cached_tokens_ += static_cast<uint64_t>(decision->predicted_cached_tokens);
    std::vector<size_t> rest;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (i != decision->index) rest.push_back(i);
    }
    std::sort(rest.begin(), rest.end(), [&](size_t a, size_t b) {
      return routing_.predicted_seconds(candidates[a], prompt_tokens) < routing_.predicted_seconds(candidates[b], prompt_tokens);
    });
    order.insert(order.end(), rest.begin(), rest.end());
  }
  retired_followers.clear();  // their threads stop here, outside the lock

  // Another instance holds more of the prompt and moving its KV beats recomputing it: it sends
  // the KV to the chosen instance first (transfer_with_insert); if that fails, the chosen
  // instance recomputes.
  if (push && push_kv(req, push->from, push->to_endpoint, api, body)) {
    std::lock_guard lock(mutex_);
    record_prompt(members[order.front()].id, prompt, now, push->tokens);
  }

  // Disaggregated (SPEC D4): a decode instance gets the request once a prefill instance has
  // computed its prompt and sent it the KV (if that fails, the decode instance computes it). With
  // --caching3, the decode instance sends the request's KV back as it runs (SPEC M4), so the next
  // turn's prefill finds it.
  std::optional<cluster::InstanceInfo> prefill;
  int64_t prefill_known_tokens = 0;
  bool prefilled = false;
  int64_t rendered_prompt_tokens = -1;  // a Responses turn's, as its decode instance rendered it
  if (members[order.front()].role == "decode" && !members[order.front()].transfer_endpoint.empty()) {
    std::vector<cluster::InstanceInfo> prefills = live_members(/*prefill=*/true);
    std::erase_if(prefills, [](const auto& p) { return p.transfer_endpoint.empty(); });
    if (!prefills.empty()) {
      std::lock_guard lock(mutex_);
      // The one holding most of the prompt; then the least busy.
      const auto best = std::min_element(prefills.begin(), prefills.end(), [&](const auto& a, const auto& b) {
        const int64_t ma = matched_tokens(a.id, prompt, now), mb = matched_tokens(b.id, prompt, now);
        if (ma != mb) return ma > mb;
        return in_flight_[a.id] < in_flight_[b.id];
      });
      prefill = *best;
      prefill_known_tokens = matched_tokens(prefill->id, prompt, now, /*conservative=*/true);
      ++in_flight_[prefill->id];
      ++routed_[prefill->id];
    }
  }
  if (prefill) {
    const bool done = prefill_on(req, api, *prefill, members[order.front()], body, static_cast<size_t>(chosen_known_tokens),
                                 rendered_prompt_tokens);
    prefilled = done;
    std::lock_guard lock(mutex_);
    --in_flight_[prefill->id];
    if (done) {
      record_prompt(prefill->id, prompt, now);
      record_prompt(members[order.front()].id, prompt, now);
    }
  }

  // A request of one choice can keep KV replicas on other instances while it runs (--replicas N:
  // the next best instances with a transport); streamed, it can be resumed elsewhere if its
  // instance fails (SPEC D7), its events naming their tokens.
  auto g = std::make_shared<Generation>();
  g->api = api;
  g->body = body;
  g->raw_body = req.body;
  g->authorization = req.header("Authorization");
  g->members = std::move(members);
  g->order = std::move(order);
  g->prompt_text = view->prompt_text;
  g->prompt.emplace(prompt.over(g->prompt_text));
  g->prompt_tokens = prompt_tokens;
  g->arrived = now;
  g->prefill = prefill;
  g->prefilled = prefilled;
  g->prefill_known_tokens = prefill_known_tokens;
  g->rendered_prompt_tokens = rendered_prompt_tokens;
  const bool streamed = body.value("stream", false) == true;
  g->one_choice = !body.contains("n") || body["n"] == 1;
  g->resumable = config_.failover && streamed && g->one_choice;
  // A stored Responses turn (store defaults to true) keeps copies too: its KV, once it ends, and
  // the stored turn itself, so the conversation outlives its instance.
  const bool stored_turn = api == Api::kResponses && body.value("store", true) != false;
  g->replicable = config_.replicas > 0 && g->one_choice && (api != Api::kResponses || stored_turn);

  RelayPlan plan;
  plan.next_attempt = [this, g] { return next_generation_attempt(g); };
  plan.unreached = [this](const RelayAttempt& attempt) {
    std::lock_guard lock(mutex_);
    --in_flight_[attempt.instance.id];
    --routed_[attempt.instance.id];
    ++retries_;
  };
  plan.exhausted = [this] {
    {
      std::lock_guard lock(mutex_);
      ++unroutable_;
    }
    http::Response reply;
    reply.set_header("Retry-After", "1");
    send_error(reply, 503, "no instance could be reached", "server_error", "no_instance");
    return reply;
  };
  relay(req, res, std::move(plan));
}

std::optional<RelayAttempt> Router::next_generation_attempt(const std::shared_ptr<Generation>& generation) {
  Generation& g = *generation;
  if (g.next >= g.order.size()) return std::nullopt;
  const size_t k = g.next++;
  const cluster::InstanceInfo& m = g.members[g.order[k]];
  std::vector<cluster::InstanceInfo> others;  // the order to fail over in
  for (size_t j = k + 1; j < g.order.size(); ++j) others.push_back(g.members[g.order[j]]);
  for (size_t j = 0; j < k; ++j) others.push_back(g.members[g.order[j]]);  // they did not answer before; may now
  std::vector<std::string> replicas;                // instances holding the request's KV replicas
  std::vector<cluster::InstanceInfo> turn_holders;  // of them, those to store a Responses turn on
  json endpoints = json::array();
  json known = json::array();   // per replica, the leading tokens it holds already
  json at_end = json::array();  // per replica, whether it gets the KV only once the request ends
  size_t failover_holders = 0;  // the first of `others`, holding replicas
  if (g.prefill && config_.caching3 && k == 0 && !m.transfer_endpoint.empty() && g.one_choice) {
    endpoints.push_back(g.prefill->transfer_endpoint);
    // After a prefill there, the prompt (all of it, if tokenized; else a conservative estimate).
    const int64_t prompt_known = g.rendered_prompt_tokens >= 0 ? g.rendered_prompt_tokens
                                 : g.prompt->tokenized()        ? g.prompt_tokens
                                                               : static_cast<int64_t>(g.prompt_text.size() / kBytesPerKnownToken);
    known.push_back(g.prefilled ? prompt_known : g.prefill_known_tokens);
    at_end.push_back(config_.caching3_at_end);  // for the next turn's prefill: no failover copy
    replicas.push_back(g.prefill->id);
  }
  if (g.replicable && !m.transfer_endpoint.empty()) {
    // The holders go first among the instances to fail over to, in their order.
    auto holders_end =
        std::stable_partition(others.begin(), others.end(), [](const auto& c) { return !c.transfer_endpoint.empty(); });
    const size_t limit = endpoints.size() + static_cast<size_t>(config_.replicas);
    for (auto it = others.begin(); it != holders_end && endpoints.size() < limit; ++it) {
      endpoints.push_back(it->transfer_endpoint);
      known.push_back(0);
      // A failover copy follows the request as it runs; a stored turn's that cannot be resumed
      // is for the next turn only.
      at_end.push_back(g.api == Api::kResponses && !g.resumable);
      replicas.push_back(it->id);
      ++failover_holders;
      if (g.api == Api::kResponses) turn_holders.push_back(*it);
    }
  }
  json sent_body;
  if (!replicas.empty()) {
    sent_body = g.body;
    sent_body["mnemo_replica"] = std::move(endpoints);
    sent_body["mnemo_replica_known_tokens"] = std::move(known);
    sent_body["mnemo_replica_at_end"] = std::move(at_end);
  }
  RelayAttempt attempt;
  if (g.resumable) {
    if (sent_body.is_null()) sent_body = g.body;
    sent_body["mnemo_report_tokens"] = true;
    if (config_.disk_replica) sent_body["mnemo_persist_running"] = true;
    attempt.failover = std::make_shared<Failover>();
    attempt.failover->request = sent_body;
    attempt.failover->candidates = std::move(others);
    attempt.failover->holders = failover_holders;
  }
  attempt.instance = m;
  attempt.body = sent_body.is_null() ? g.raw_body : sent_body.dump(-1, ' ', false, json::error_handler_t::replace);
  {
    std::lock_guard lock(mutex_);
    ++in_flight_[m.id];
    ++routed_[m.id];
    record_prompt(m.id, *g.prompt, g.arrived);  // its prefill caches the prompt there
  }
  if (!replicas.empty()) attempt.headers.push_back({"X-Mnemo-Replica", fmt::format("{}", fmt::join(replicas, ","))});
  attempt.on_done = [this, generation, id = m.id, replicas, turn_holders](int status, const std::string& reply_body, bool sse,
                                                                      const std::string& finished_on, double first_text_at) {
    generation_done(*generation, id, replicas, turn_holders, status, reply_body, sse, finished_on, first_text_at);
  };
  return attempt;
}

void Router::generation_done(const Generation& g, const std::string& routed_to, const std::vector<std::string>& replicas,
                             const std::vector<cluster::InstanceInfo>& turn_holders, int status,
                             const std::string& reply_body, bool sse, const std::string& finished_on,
                             double first_text_at) {
  // The next turn's prompt starts with this one's and its reply: cached there now (and on the
  // replica holder). Read outside the lock: a reply can be megabytes of events.
  const ReplyDigest reply = status == 200 ? read_reply(g.api, reply_body, sse) : ReplyDigest{};
  const std::string next_prefix = status == 200 ? with_reply(g.api, g.prompt_text, reply.text) : "";
  if (status == 200) {
    plan_meter_.record(first_text_at >= 0 ? first_text_at - g.arrived : -1.0, seconds_now() - g.arrived,
                       reply.generated_tokens);
  }
  {
    std::lock_guard lock(mutex_);
    --in_flight_[routed_to];
    if (status != 200) return;
    const double t = seconds_now();
    tree_.record(finished_on, next_prefix, t);
    for (const std::string& holder : replicas) {
      if (holder != finished_on) tree_.record(holder, next_prefix, t);
    }
  }
  if (g.api != Api::kResponses || reply.response_id.empty()) return;
  std::vector<cluster::InstanceInfo> copies_to = turn_holders;
  std::erase_if(copies_to, [&](const auto& h) { return h.id == finished_on; });
  std::string holders = finished_on;
  if (!copies_to.empty()) {
    for (const std::string& h : copy_stored_turn(g.authorization, g.body, reply.final_response, copies_to)) {
      holders += "," + h;
    }
  }
  remember_owner(reply.response_id, holders);
}

bool Router::push_kv(const http::Request& req, const cluster::InstanceInfo& from, const std::string& to_endpoint, Api api,
                     const nlohmann::json& request) {
  const json body = {{"target", to_endpoint}, {"api", api == Api::kChat ? "chat" : "completions"}, {"request", request}};
  const auto reply = post_for(req, from.address, "/v1/internal/kv_push", body, std::chrono::seconds(60));
  std::lock_guard lock(mutex_);
  if (!reply || reply->status != 200) {
    ++kv_push_failures_;
    std::fprintf(stderr, "mnemo route: KV push %s -> %s failed: %s\n", from.id.c_str(), to_endpoint.c_str(),
                 reply ? reply->body.substr(0, 300).c_str() : httplib::to_string(reply.error()).c_str());
    return false;
  }
  const json result = parse_bounded_json_or_discarded(reply->body);
  const uint64_t tokens = result.is_object() && result.contains("tokens") && result["tokens"].is_number_unsigned()
                              ? result["tokens"].get<uint64_t>()
                              : 0;
  if (tokens == 0) return false;  // the holder no longer had the prefix: nothing moved
  ++kv_pushes_;
  kv_pushed_tokens_ += tokens;
  return true;
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
  res.set_content(out, "text/plain; version=0.0.4");
}

}  // namespace mnemo::router
