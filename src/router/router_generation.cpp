// Router, generations: a chat, completion or Responses request admitted (parsed, its internal
// fields refused, the instances that may take it found), routed (plan_route over the members'
// figures, a KV push when moving beats recomputing), prefilled on a prefill instance when its
// instance decodes only (SPEC D4), then relayed (router/relay.h) through its attempts, each with
// its replicas and failover; and its bookkeeping once its reply is over.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cluster/membership.h"
#include "router/conversation_text.h"
#include "router/prompt_keys.h"
#include "router/relay.h"
#include "router/router.h"
#include "router/router_http.h"
#include "server/caller.h"
#include "util/bounded_json.h"
#include "util/random_seed.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr double kExpireEverySeconds = 5;  // prompt-tree expiry scans at most this often

}  // namespace

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
  std::string session_key;
  std::string pinned_session;  // the client's X-Session-ID
  std::string previous_response_id;
  int64_t chosen_known_tokens = 0;  // of the prompt, surely held by order[0]'s instance
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
  auto g = std::make_shared<Generation>();
  g->api = api;
  g->raw_body = req.body;
  g->authorization = req.header("Authorization");
  g->arrived = seconds_now();
  if (!admit_generation(req, res, *g)) return;
  route_generation(req, *g);
  prefill_generation(req, *g);
  relay(req, res, generation_plan(g));
}

bool Router::admit_generation(const http::Request& req, http::Response& res, Generation& g) {
  g.body = parse_bounded_json_or_discarded(req.body, JsonLimits{.max_bytes = size_t{64} << 20, .max_depth = 32});
  if (g.body.is_discarded()) {
    send_error(res, 400, "the request body is not acceptable JSON (malformed, or nested deeper than 32 levels)",
               "invalid_request_error", "");
    return false;
  }
  // The router speaks to instances as a peer: a client's internal field would pass as its own.
  if (auto refused = server::refuse_internal_fields(g.body, server::Caller{})) {
    send_error(res, refused->status, refused->message, refused->type, refused->code);
    return false;
  }
  // A request without a seed gets one here, not on its instance: a prefill instance, a decode
  // instance and a failover instance then sample alike.
  if (const auto seed = g.body.find("seed"); seed == g.body.end() || seed->is_null()) {
    g.body["seed"] = random_seed();
    g.raw_body = g.body.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  auto view = view_request(g.api, g.body);
  if (!view.ok()) {
    send_error(res, 400, view.error().message(), "invalid_request_error", "");
    return false;
  }
  g.prompt_text = view->prompt_text;
  g.session_key = view->session_key;
  // A client's session affinity (as vLLM's router and Cloudflare take it): bounded, then used.
  g.pinned_session = req.header("X-Session-ID");
  if (g.pinned_session.size() > 256) {
    send_error(res, 400, "the X-Session-ID header may hold at most 256 bytes", "invalid_request_error", "");
    return false;
  }
  g.previous_response_id = view->previous_response_id;
  if (!find_generation_members(res, g)) return false;
  // The prompt's chunks named as the instances' caches name them, when the router tokenizes (a
  // Responses API turn's history is on its instance: it goes there anyway).
  g.prompt.emplace(tokenizer_ && g.api != Api::kResponses
                       ? PromptKeys(g.prompt_text, tokenizer_->tokens(g.api, req.body),
                                    PromptTokenizer::cache_namespace(client_tenant(g.authorization).value_or(""), g.body))
                       : PromptKeys(g.prompt_text));
  g.prompt_tokens = g.prompt->tokenized() ? g.prompt->n_tokens() : routing_.tokens_of_text(g.prompt_text.size());
  return true;
}

bool Router::find_generation_members(http::Response& res, Generation& g) {
  g.members = live_members();
  if (!g.previous_response_id.empty()) {
    // The conversation's history and KV are on the instance that stored it.
    const Result<std::string> found = owner_of(g.previous_response_id);
    if (!found.ok()) {
      send_owner_lookup_failure(res, found.error());
      return false;
    }
    if (found->empty()) {
      send_error(res, 404, fmt::format("No response found with id '{}'.", g.previous_response_id), "invalid_request_error",
                 "not_found");
      return false;
    }
    // The instances that stored it (the owner, and the holders of its copies): whatever role
    // they have now, a decode instance has the turn's prompt computed by a prefill instance, as
    // for a new request; any other (a plan may have made it a prefill instance since) runs the
    // turn whole.
    g.members = live_holders(*found);
    for (auto& m : g.members) {
      if (m.role != cluster::Role::kDecode) m.role = cluster::Role::kColocated;
    }
    if (g.members.empty()) {
      res.set_header("Retry-After", "1");
      send_error(res, 503, fmt::format("the instance holding response '{}' is unavailable", g.previous_response_id),
                 "server_error", "instance_unavailable");
      return false;
    }
  }
  if (g.members.empty()) {
    res.set_header("Retry-After", "1");
    send_error(res, 503, "no instance is serving", "server_error", "no_instance");
    return false;
  }
  return true;
}

Candidate Router::candidate_of(const cluster::InstanceInfo& m, const PromptKeys& prompt, double now) {
  Candidate c;
  c.id = m.id;
  c.in_flight = in_flight_[m.id];
  c.routed = routed_[m.id];
  c.queued_tokens = m.queued_tokens;
  c.matched_tokens = matched_tokens(m.id, prompt, now);
  c.has_transport = !m.transfer_endpoint.empty();
  c.kv_bytes_per_token = m.kv_bytes_per_token;
  c.profile = profile_of(m);
  c.cache_capacity_tokens = m.cache_capacity_tokens;
  c.cached_tokens = cached_tokens(m.id, prompt);
  return c;
}

void Router::route_generation(const http::Request& req, Generation& g) {
  const PromptKeys& prompt = *g.prompt;
  const double now = g.arrived;
  RoutePlan plan;
  std::vector<Candidate> candidates;
  std::vector<std::shared_ptr<CacheFollower>> retired_followers;  // declared first: stopped after the lock is let go
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
    for (const auto& m : g.members) candidates.push_back(candidate_of(m, prompt, now));
    plan = plan_route(routing_, candidates, g.prompt_tokens, g.session_key, /*may_push=*/g.api != Api::kResponses,
                      g.pinned_session);
    g.chosen_known_tokens = matched_tokens(g.members[plan.order.front()].id, prompt, now, /*conservative=*/true);
    predicted_cached_tokens_ += static_cast<uint64_t>(plan.predicted_cached_tokens);
  }
  g.order = plan.order;
  // Another instance holds more of the prompt and moving its KV beats recomputing it: it sends
  // the KV to the chosen instance first (transfer_with_insert); if that fails, the chosen
  // instance recomputes.
  if (!plan.push_from) return;
  const cluster::InstanceInfo& chosen = g.members[g.order.front()];
  if (push_kv(req, g.members[*plan.push_from], chosen.transfer_endpoint, g.api, g.body)) {
    std::lock_guard lock(mutex_);
    record_prompt(chosen.id, prompt, now, candidates[*plan.push_from].matched_tokens);
  }
}

void Router::prefill_generation(const http::Request& req, Generation& g) {
  // Disaggregated (SPEC D4): a decode instance gets the request once a prefill instance has
  // computed its prompt and sent it the KV (if that fails, the decode instance computes it). With
  // --caching3, the decode instance sends the request's KV back as it runs (SPEC M4), so the next
  // turn's prefill finds it.
  const cluster::InstanceInfo& decode = g.members[g.order.front()];
  if (decode.role != cluster::Role::kDecode || decode.transfer_endpoint.empty()) return;
  std::vector<cluster::InstanceInfo> prefills = live_members(/*prefill=*/true);
  std::erase_if(prefills, [](const auto& p) { return p.transfer_endpoint.empty(); });
  {
    std::lock_guard lock(mutex_);
    std::vector<Candidate> candidates;
    for (const auto& p : prefills) candidates.push_back(candidate_of(p, *g.prompt, g.arrived));
    const std::optional<size_t> best = choose_prefill(candidates);
    if (!best) return;
    g.prefill = prefills[*best];
    g.prefill_known_tokens = matched_tokens(g.prefill->id, *g.prompt, g.arrived, /*conservative=*/true);
    ++in_flight_[g.prefill->id];
    ++routed_[g.prefill->id];
  }
  g.prefilled = prefill_on(req, g.api, *g.prefill, decode, g.body, static_cast<size_t>(g.chosen_known_tokens),
                           g.rendered_prompt_tokens);
  std::lock_guard lock(mutex_);
  --in_flight_[g.prefill->id];
  if (g.prefilled) {
    record_prompt(g.prefill->id, *g.prompt, g.arrived);
    record_prompt(decode.id, *g.prompt, g.arrived);
  }
}

RelayPlan Router::generation_plan(const std::shared_ptr<Generation>& g) {
  // A request of one choice can keep KV replicas on other instances while it runs (--replicas N:
  // the next best instances with a transport); streamed, it can be resumed elsewhere if its
  // instance fails (SPEC D7), its events naming their tokens.
  const bool streamed = g->body.value("stream", false) == true;
  g->one_choice = !g->body.contains("n") || g->body["n"] == 1;
  g->resumable = config_.failover && streamed && g->one_choice;
  // A stored Responses turn (store defaults to true) keeps copies too: its KV, once it ends, and
  // the stored turn itself, so the conversation outlives its instance.
  const bool stored_turn = g->api == Api::kResponses && g->body.value("store", true) != false;
  g->replicable = config_.replicas > 0 && g->one_choice && (g->api != Api::kResponses || stored_turn);

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
  return plan;
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

}  // namespace mnemo::router
