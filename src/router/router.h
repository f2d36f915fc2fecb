// `mnemo route`: the OpenAI API in front of a cluster of `mnemo serve` instances (SPEC M6, M7,
// M8). Members come from etcd (cluster/membership.h): an instance whose lease expired is gone
// from the view and gets no new request. Each request goes where the routing policy says
// (router/routing_policy.h), fed by per-instance prompt trees (router/prompt_tree.h) that record
// every prompt sent and, when its reply completes, the prompt plus the reply (the next turn's
// prefix). Streams (SSE) are relayed chunk by chunk; a client that goes away cancels upstream.
//
// An instance that refuses the connection before answering is skipped and the request tries the
// next best (its lease may not have expired yet); a whole (unstreamed) reply that breaks off
// never started for the client, so it is retried the same way. A streamed chat, completion or
// Responses API turn (n = 1) that breaks off mid-reply, or whose instance falls silent after
// losing its lease, is resumed (SPEC D7; router/relay.cpp): the router sends it again, with the
// tokens the client already has (router/sse_stitcher.h), to an instance holding its KV replica
// (--replicas N: every such request streams its KV to the N next-best instances while it runs,
// so a finished conversation's KV survives its instance too), else to a restart of its own
// instance (--disk-replica), else to the next best, which computes what it lacks; sampling
// continues at the same step with the same seed, so the client's stream goes on as if nothing
// happened.
//
// Responses API turns continue on the instance that stored the previous response; which one that
// is lives in etcd too (/mnemo/<cluster>/responses/<id>), so a restarted router loses no
// conversation.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/etcd_client.h"
#include "http/server.h"
#include "router/cache_follower.h"
#include "router/plan_meter.h"
#include "router/planner.h"
#include "router/prompt_tree.h"
#include "router/relay.h"
#include "router/routing_policy.h"
#include "router/sse_stitcher.h"
#include "util/result.h"


namespace mnemo::cluster {
class MemberWatcher;
struct InstanceInfo;
}

namespace mnemo::router {

enum class Api;
class PromptKeys;
class PromptTokenizer;  // router/conversation_text.h

struct RouterConfig {
  std::string host = "127.0.0.1";
  int port = 8090;
  std::string etcd_url = "http://127.0.0.1:2379";
  cluster::EtcdEndpoint etcd_access;  // TLS files and user of a secured etcd (its url: etcd_url)
  std::string cluster_name = "default";
  Policy policy = Policy::kCacheAware;
  CostParams cost;
  double prompt_ttl_seconds = 600;
  double upstream_timeout_seconds = 600;
  int http_threads = 32;  // handler threads (routing; a prefill or KV push holds one while it runs)
  int upstream_threads = 2;  // I/O threads of the relays from instances to clients
  int max_connections = 4096;
  http::TlsFiles tls;
  bool failover = true;  // resume streamed replies whose instance fails (SPEC D7)
  int replicas = 0;      // KV replicas of each request in flight on other instances (0: none)
  // Each resumable request's instance also persists its KV to its own disk tier as it runs
  // (SPEC D7's local disk replica): a restart on the same state resumes it without recompute.
  bool disk_replica = false;
  // How long a failed stream waits for an instance to resume on when none is live (one may be
  // restarting).
  double resume_wait_seconds = 10;
  bool caching3 = true;  // disaggregated: decode instances send each request's KV back to its prefill instance
  bool caching3_at_end = true;  // ...in one message when the request ends (false: chunk by chunk as it runs)
  // Bytes of a stream read from its instance and not yet written to its client, at most (then
  // the relay stops reading the instance until the client catches up).
  size_t relay_buffer_bytes = size_t{1} << 20;
  // The served model's GGUF (its tokenizer and chat template): the router then tokenizes each
  // prompt as the instances do and follows their caches by their insert and evict events
  // (router/cache_follower.h). Empty: prompt trees over the requests' text, with a TTL.
  std::string model_path;
  // The API key of instances started with --api-key, for the router's own requests to them (its
  // cache followers); clients' requests carry their own.
  std::string instance_api_key;
  // DejaVu's planner applied (SPEC D5): with Y, t, N and m given (planner.h; D is the number of
  // live instances with a KV transport), the router splits them into prefill and decode
  // instances itself, whatever roles they published, and again whenever the membership changes.
  std::optional<PlanInputs> plan;
};

class Router final : private RelayHost {
 public:
  explicit Router(RouterConfig config);
  ~Router();

  // Connects to etcd (the member view) and binds the port.
  Status start();
  int port() const { return bound_port_; }
  void serve();
  void stop();

 private:
  struct Generation;  // router.cpp: one generation request as routed, shared by its attempts
  struct UpstreamIo;  // router.cpp: the threads that relays and their bookkeeping run on
  // Prompt-tree bytes to the tokens an instance surely holds, for the chunks a KV replica need
  // not send: conservative (English text runs at about 4 bytes per token), since a guess past
  // what the receiver holds costs a refused increment and a resend from the first chunk.
  static constexpr size_t kBytesPerKnownToken = 6;

  void install_routes();
  // A chat, completion or Responses request (router/router_generation.cpp), in its steps:
  void handle_generation(const http::Request& req, http::Response& res, Api api);
  // Parses the request and finds the members that may take it; false once `res` holds the error.
  bool admit_generation(const http::Request& req, http::Response& res, Generation& g);
  bool find_generation_members(http::Response& res, Generation& g);
  // Orders the members to try (plan_route) and moves the prompt's KV to the first when that
  // beats recomputing it.
  void route_generation(const http::Request& req, Generation& g);
  // When the first member decodes only: the prompt computed on a prefill instance first.
  void prefill_generation(const http::Request& req, Generation& g);
  RelayPlan generation_plan(const std::shared_ptr<Generation>& g);
  // The routing figures of `m` for `prompt`. Caller holds mutex_.
  Candidate candidate_of(const cluster::InstanceInfo& m, const PromptKeys& prompt, double now);
  void handle_stored_response(const http::Request& req, http::Response& res);
  void handle_models(const http::Request& req, http::Response& res);
  void handle_metrics(const http::Request& req, http::Response& res);
  void append_counters(std::string& out);  // of handle_metrics; caller holds mutex_
  // Instances with a live lease: those that generate (colocated and decode), or the prefill ones
  // (by their published roles, or by the plan's split).
  std::vector<cluster::InstanceInfo> live_members(bool prefill = false);
  // RelayHost: where a failed stream may resume, best first: live replica holders, a restart of
  // the failed instance (its state and disk), the other instances it was routed past, any other
  // live one.
  std::vector<cluster::InstanceInfo> resume_candidates(const Failover& failover,
                                                       const std::unordered_set<std::string>& failed,
                                                       const std::string& failed_state_id) override;
  bool is_member(const std::string& id) override;
  void count(RelayEvent event, uint64_t tokens, uint64_t replicated) override;
  void run_blocking(std::function<void()> work) override;
  std::vector<http::Header> upstream_headers(const std::string& authorization, const std::string& method,
                                             const std::string& path, const std::string& body) override;
  // Every instance with a live lease, whatever its role (a stored response's owner).
  std::vector<cluster::InstanceInfo> all_members();
  // The live instances among a stored response's holders (its owner record: the instance that
  // stored it, then those holding copies), in that order, with the roles the plan gives them.
  std::vector<cluster::InstanceInfo> live_holders(const std::string& holders);
  // Stores a finished Responses API turn on the instances holding its KV copies too (POST
  // /v1/internal/responses_import); returns those that took it.
  std::vector<std::string> copy_stored_turn(const std::string& authorization, const nlohmann::json& request,
                                            const nlohmann::json& response,
                                            const std::vector<cluster::InstanceInfo>& holders);
  // The members (sorted by id) with the roles the plan gives them; unchanged without a plan.
  std::vector<cluster::InstanceInfo> with_planned_roles(std::vector<cluster::InstanceInfo> members);
  // Computes the request's prompt on `prefill`, its KV sent to `decode` (SPEC D4). False if it
  // failed (the decode instance then computes the prompt itself).
  // `decode_known_tokens`: leading prompt tokens the decode instance holds already (not sent).
  // A Responses API turn's prompt (its history is the decode instance's) is asked of the decode
  // instance first and computed on `prefill` as a completion of those tokens; `prompt_tokens`
  // gets its length (unchanged for the other APIs).
  bool prefill_on(const http::Request& req, Api api, const cluster::InstanceInfo& prefill,
                  const cluster::InstanceInfo& decode, const nlohmann::json& body, size_t decode_known_tokens,
                  int64_t& prompt_tokens);
  // The instance's published `mnemo profile` (parsed once per published text); null if it has
  // none or it does not parse. Caller holds mutex_.
  std::shared_ptr<const CostModel> profile_of(const cluster::InstanceInfo& instance);
  // The instances' cache followers, kept in step with the member view. Caller holds mutex_.
  void sync_followers(std::vector<std::shared_ptr<CacheFollower>>& retired);
  // Tokens of the prompt `instance` holds, as far as the router knows: exact (its events) when
  // the prompt is tokenized, else estimated from the text tree. `conservative`: an estimate
  // that errs low (what a KV replica may skip). Caller holds mutex_.
  int64_t matched_tokens(const std::string& instance, const PromptKeys& prompt, double now, bool conservative = false);
  // Tokens `instance`'s cache holds as far as the router knows (its events, or the prompt tree's
  // entries when the router does not tokenize), for the cache-pressure term.
  int64_t cached_tokens(const std::string& instance, const PromptKeys& prompt) const;
  // `instance` will hold the prompt's first `tokens` tokens (all: -1). Caller holds mutex_.
  void record_prompt(const std::string& instance, const PromptKeys& prompt, double now, int64_t tokens = -1);
  // Where etcd keeps the instance that stored a response.
  std::string owner_key(const std::string& response_id) const;
  // The instance that stored a response ("" if unknown; an Error if etcd could not say).
  Result<std::string> owner_of(const std::string& response_id);
  static void send_owner_lookup_failure(http::Response& res, const Error& error);
  void remember_owner(const std::string& response_id, const std::string& instance);
  // Asks `from` to send its KV for the request's prompt to the transport at `to_endpoint`.
  bool push_kv(const http::Request& req, const cluster::InstanceInfo& from, const std::string& to_endpoint, Api api,
               const nlohmann::json& request);
  // The next instance of a routed generation to try, and what to send it (nullopt: none left).
  std::optional<RelayAttempt> next_generation_attempt(const std::shared_ptr<Generation>& generation);
  // A generation's reply is over (RelayAttempt::on_done): prompt trees, the plan meter, a stored
  // turn's copies and owner.
  void generation_done(const Generation& g, const std::string& routed_to, const std::vector<std::string>& replicas,
                       const std::vector<cluster::InstanceInfo>& turn_holders, int status, const std::string& reply_body,
                       bool sse, const std::string& finished_on, double first_text_at);
  // Answers the client later, from the plan's attempts (router/relay.h).
  void relay(const http::Request& req, http::Response& res, RelayPlan plan);

  RouterConfig config_;
  std::unique_ptr<http::Server> http_;
  std::unique_ptr<UpstreamIo> upstream_io_;
  std::unique_ptr<cluster::MemberWatcher> members_;
  std::unique_ptr<cluster::EtcdClient> etcd_;
  int bound_port_ = 0;

  std::mutex mutex_;  // guards what follows
  PromptTree tree_;
  RoutingPolicy routing_;
  PlanMeter plan_meter_;  // Y, t and N of the generations relayed (thread-safe)
  std::unordered_map<std::string, int64_t> in_flight_;
  std::unordered_map<std::string, uint64_t> routed_;  // requests per instance
  std::unordered_map<std::string, std::string> owners_;  // response id -> instance id
  // instance id -> (its published profile, parsed; null if it did not parse)
  std::unordered_map<std::string, std::pair<std::string, std::shared_ptr<const CostModel>>> profiles_;
  std::unique_ptr<PromptTokenizer> tokenizer_;  // with config_.model_path; immutable after start()
  std::unordered_map<std::string, std::shared_ptr<CacheFollower>> followers_;  // by instance id
  uint64_t followers_generation_ = ~uint64_t{0};  // of the member view they follow
  std::unordered_set<std::string> unfollowable_;  // instances that tokenize differently (logged once)
  double last_expire_ = 0;  // of the prompt trees
  std::atomic<uint64_t> relay_waits_{0};
  std::atomic<uint64_t> stored_turn_copies_{0}, stored_turn_copy_failures_{0};
  std::atomic<int64_t> planned_prefills_{-1};  // of the last split applied (-1: none yet), for logs and metrics
  uint64_t retries_ = 0;
  uint64_t unroutable_ = 0;
  uint64_t predicted_cached_tokens_ = 0;
  uint64_t kv_pushes_ = 0;
  uint64_t kv_push_failures_ = 0;
  uint64_t kv_pushed_tokens_ = 0;
  uint64_t resumed_streams_ = 0;       // streams continued on another instance
  uint64_t resumed_tokens_ = 0;        // tokens those streams had already delivered
  uint64_t resumed_replicated_tokens_ = 0;  // their tokens' KV replicated at the failure
  uint64_t failed_resumes_ = 0;        // streams no instance could continue
  uint64_t expired_upstreams_ = 0;     // streams cut off because their instance's lease expired
  uint64_t prefills_ = 0;
  uint64_t prefill_failures_ = 0;
  double prefill_seconds_ = 0;
};

}  // namespace mnemo::router
