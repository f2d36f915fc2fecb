// `mnemo route`: the OpenAI API in front of the cluster's instances (router/router.h). SIGTERM
// and SIGINT stop it; its state (which instance holds which stored response) is in etcd.
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include <pthread.h>

#include "cli/commands.h"
#include "cli/edge_flags.h"
#include "router/router.h"
#include "router/router_http.h"

namespace mnemo::cli {
namespace {

struct RouteArgs {
  router::RouterConfig config;
  std::string policy = "cache-aware";
  router::PlanInputs plan{.prompt_seconds = 0, .token_seconds = 0, .tokens_generated = 0, .machines = 0, .overhead = 1.1};
  EdgeFlags edge;
};

int run_route(RouteArgs args) {
  const int plan_figures = (args.plan.prompt_seconds > 0) + (args.plan.token_seconds > 0) + (args.plan.tokens_generated > 0);
  if (plan_figures == 3) {
    args.config.plan = args.plan;
  } else if (plan_figures != 0) {
    std::fprintf(stderr, "error: a plan needs all of --plan-prompt-seconds, --plan-token-seconds and --plan-tokens\n");
    return 2;
  }
  auto policy = router::parse_policy(args.policy);
  if (!policy.ok()) {
    std::fprintf(stderr, "error: %s\n", policy.error().message().c_str());
    return 2;
  }
  args.config.policy = *policy;
  auto edge = args.edge.resolve({args.config.etcd_url, args.config.host});
  if (!edge.ok()) {
    std::fprintf(stderr, "error: %s\n", edge.error().message().c_str());
    return 1;
  }
  router::configure_upstream_identity({edge->api_keys, edge->cluster_secret});
  auto etcd = args.edge.etcd_endpoint(args.config.etcd_url);
  if (!etcd.ok()) {
    std::fprintf(stderr, "error: %s\n", etcd.error().message().c_str());
    return 1;
  }
  args.config.etcd_access = std::move(*etcd);
  if (const Status listener = args.edge.prepare_listener(); !listener.ok()) {
    std::fprintf(stderr, "error: %s\n", listener.error().message().c_str());
    return 1;
  }
  args.config.tls = args.edge.tls;
  args.config.max_connections = args.edge.max_connections;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  router::Router router(args.config);
  if (const Status started = router.start(); !started.ok()) {
    std::fprintf(stderr, "error: %s\n", started.error().message().c_str());
    return 1;
  }
  std::printf("mnemo: routing (%s) for cluster '%s' of %s at %s://%s:%d/ (OpenAI API under /v1)\n",
              args.policy.c_str(), args.config.cluster_name.c_str(), args.config.etcd_url.c_str(),
              args.config.tls.enabled() ? "https" : "http", args.config.host.c_str(), router.port());
  std::fflush(stdout);
  std::thread signal_waiter([&] {
    int received = 0;
    sigwait(&signals, &received);
    router.stop();
  });
  router.serve();
  signal_waiter.detach();
  std::fprintf(stderr, "mnemo route: stopped\n");
  return 0;
}

// The cache-aware policy's cost model (router/routing_policy.h).
void add_cost_model_flags(CLI::App* cmd, router::CostParams& cost) {
  cmd->add_option("--prefill-tokens-per-second", cost.prefill_tokens_per_second,
                  "Cost model: the prompt throughput of instances that publish no `mnemo profile` (those that do are "
                  "charged their own profiled cost per token and context position)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--request-seconds", cost.request_seconds, "Cost model: time of each request queued ahead")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pressure-weight", cost.pressure_weight,
                  "Cost model: the share of a token's compute charged for each cached token a placement pushes out of a "
                  "full cache (0: off; spreads conversations over caches with room)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--transfer-bytes-per-second", cost.transfer_bytes_per_second,
                  "Cost model: KV transfer bandwidth between instances (moving KV vs recomputing it)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace

void add_route_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<RouteArgs>();
  CLI::App* cmd = app.add_subcommand("route", "Route OpenAI API requests across the instances of a cluster (etcd)");
  cmd->add_option("--cluster", args->config.etcd_url, "etcd URL where instances register")->capture_default_str();
  cmd->add_option("--cluster-name", args->config.cluster_name, "Cluster name (key prefix in etcd)")->capture_default_str();
  cmd->add_option("--host", args->config.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->config.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--policy", args->policy, "Where requests go: cache-aware (least predicted queue + compute given the "
                                            "cached prefix), session (a conversation stays on one instance), "
                                            "least-loaded (fewest requests in flight), round-robin")
      ->capture_default_str()
      ->check(CLI::IsMember(router::policy_names()));
  add_cost_model_flags(cmd, args->config.cost);
  cmd->add_option("-m,--model", args->config.model_path,
                  "The served model's GGUF: the router then tokenizes prompts as the instances do and follows each "
                  "instance's cache by its insert and evict events (exact prompt trees); without it, prompt trees "
                  "over the requests' text with a TTL")
      ->check(CLI::ExistingFile);
  cmd->add_option("--plan-prompt-seconds", args->plan.prompt_seconds,
                  "Apply DejaVu's planner (as `mnemo plan`): Y, the time of one prompt; with --plan-token-seconds and "
                  "--plan-tokens the router splits the live instances into prefill and decode ones itself")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--plan-token-seconds", args->plan.token_seconds, "The plan's t: time per generated token")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--plan-tokens", args->plan.tokens_generated, "The plan's N: tokens generated per request")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--plan-overhead", args->plan.overhead, "The plan's m in [1, 2): the slowdown of streaming prompt KV")
      ->capture_default_str();
  args->edge.add_auth_to(cmd);
  args->edge.add_listener_to(cmd);
  args->edge.add_etcd_to(cmd);
  cmd->add_option("--instance-api-key", args->config.instance_api_key,
                  "The API key of instances started with --api-key, for the router's own requests to them (its "
                  "cache followers, with --model)");
  cmd->add_option("--relay-buffer-bytes", args->config.relay_buffer_bytes,
                  "Bytes of a stream the router holds for a slow client before it stops reading the instance")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  cmd->add_option("--prompt-ttl", args->config.prompt_ttl_seconds, "Seconds a prompt-tree entry lives without a refresh")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--failover", args->config.failover,
                  "Resume a streamed reply on another instance when its instance fails mid-reply (the client sees "
                  "one stream, every token once)")
      ->capture_default_str();
  cmd->add_option("--replicas", args->config.replicas,
                  "KV replicas of each chat or completion (one choice) on other instances: its KV streams to the "
                  "next-best instances as it runs, so a failover there recomputes almost nothing and a finished "
                  "conversation outlives its instance")
      ->capture_default_str()
      ->check(CLI::Range(0, 8));
  cmd->add_option("--disk-replica", args->config.disk_replica,
                  "Each streamed request's instance also persists its KV to its own disk tier as it runs: if the "
                  "instance fails and restarts on the same --state-dir within --resume-wait, its streams resume there "
                  "without recompute")
      ->capture_default_str();
  cmd->add_option("--resume-wait", args->config.resume_wait_seconds,
                  "Seconds a failed stream waits for an instance to resume on when none is live (one may be restarting)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--caching3", args->config.caching3,
                  "With prefill and decode instances: decode instances send each request's KV (prompt and reply) back "
                  "to its prefill instance, so the next turn's prefill finds it (MemServe's Caching-3)")
      ->capture_default_str();
  cmd->add_option("--caching3-at-end", args->config.caching3_at_end,
                  "Caching-3 sends a request's KV back in one message when it ends (false: chunk by chunk as it runs)")
      ->capture_default_str();
  cmd->callback([&run, args] { run = [args] { return run_route(*args); }; });
}

}  // namespace mnemo::cli
