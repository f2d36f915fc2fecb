// `mnemo worker`: one stage of a pipeline or one tensor rank (parallel/stage_worker.h). It holds
// nothing until a coordinator (`mnemo serve --pipeline-stage` or `--tensor-worker`) sets it up
// with its share of the model and a KV pool, then runs every pass's share until a signal stops it.
#include <csignal>
#include <cstdio>

#include <random>

#include <unistd.h>

#include "auth/cluster_secret.h"
#include "cli/commands.h"
#include "cli/serve_pipeline.h"
#include "cluster/membership.h"
#include "model/weights.h"
#include "parallel/stage_worker.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

struct WorkerArgs {
  parallel::StageWorkerOptions options;
  std::string cluster_secret_file;
  std::string cluster_url;  // etcd: register as a stage a coordinator can take
  std::string cluster_name = "default";
  int64_t prepack_mib = static_cast<int64_t>(LoadOptions{}.prepack_budget_bytes >> 20);
};

int run_worker(WorkerArgs& args) {
  const auto fail = [](const Error& error) {
    std::fprintf(stderr, "mnemo worker: %s\n", error.message().c_str());
    return 1;
  };
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: only sigwait takes them
  if (args.options.model_path.empty()) args.options.model_path = chat_model_path();
  if (!args.cluster_secret_file.empty()) {
    auto secret = auth::read_cluster_secret(args.cluster_secret_file);
    if (!secret.ok()) return fail(secret.error());
    args.options.cluster_secret = *secret;
  } else {
    for (const std::string& address : {args.options.host, args.cluster_url}) {
      if (!address.empty() && !auth::is_loopback_host(auth::host_of(address))) {
        return fail(make_error("a worker without --cluster-secret-file runs on loopback addresses only; '{}' is not one",
                               address));
      }
    }
  }
  args.options.prepack_budget_bytes = static_cast<size_t>(args.prepack_mib) << 20;
  auto worker = parallel::StageWorker::start(args.options);
  if (!worker.ok()) return fail(worker.error());
  std::unique_ptr<cluster::Registration> registration;  // while it lives, coordinators see this stage
  if (!args.cluster_url.empty()) {
    cluster::InstanceInfo info;
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    info.id = fmt::format("stage-{}-{}-{:08x}", host, (*worker)->endpoint(), std::random_device{}());
    info.address = "ucx://" + (*worker)->endpoint();
    info.transfer_endpoint = (*worker)->endpoint();
    auto registered = cluster::Registration::start(args.cluster_url, pipeline_stages_prefix(args.cluster_name), info,
                                                   /*ttl_seconds=*/3, args.options.cluster_secret);
    if (!registered.ok()) return fail(registered.error().with_context("joining the cluster"));
    registration = std::move(*registered);
  }
  std::printf("mnemo worker: %s, listening at %s for a coordinator's setup%s\n", args.options.model_path.c_str(),
              (*worker)->endpoint().c_str(),
              args.cluster_url.empty() ? "" : fmt::format(" (registered in cluster '{}')", args.cluster_name).c_str());
  std::fflush(stdout);
  int received = 0;
  sigwait(&signals, &received);
  const parallel::StageWorker::Stats stats = (*worker)->stats();
  std::fprintf(stderr, "mnemo worker: signal %d: stopping after %llu microbatches (%llu failed)\n", received,
               static_cast<unsigned long long>(stats.microbatches_run), static_cast<unsigned long long>(stats.microbatches_failed));
  return 0;
}

}  // namespace

void add_worker_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<WorkerArgs>();
  CLI::App* cmd = app.add_subcommand("worker", "Run a worker of a model split across processes: a pipeline stage (`mnemo serve --pipeline-stage`) or a "
      "tensor rank (`--tensor-worker`), as the coordinator sets it up");
  cmd->add_option("-m,--model", args->options.model_path, "The GGUF model (the coordinator's file; default: the chat model)");
  cmd->add_option("--host", args->options.host, "Address to listen on for the coordinator and the stage before")
      ->capture_default_str();
  cmd->add_option("--port", args->options.port, "Port to listen on (0: any free port, printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--cluster-secret-file", args->cluster_secret_file,
                  "The cluster secret: frames are signed under it (required unless every address is loopback)");
  cmd->add_option("--cluster", args->cluster_url,
                  "etcd URL: register as a stage, for a coordinator started with --pipeline-stages N --pipeline-cluster");
  cmd->add_option("--cluster-name", args->cluster_name, "Cluster name (key prefix in etcd)")->capture_default_str();
  cmd->add_option("-t,--threads", args->options.threads, "Kernel threads (0: one per core)")->capture_default_str();
  cmd->add_option("--device-pool-tokens", args->options.device_pool_tokens,
                  "KV tokens of the stage's own pool (0: the coordinator's whole pool). Fewer: the KV lives in host "
                  "memory and each microbatch's blocks are swapped in as it runs")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 34));
  cmd->add_option("--prepack-mib", args->prepack_mib, "Memory beyond the model file for the stage's repacked weights (MiB)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->callback([&run, args] { run = [args] { return run_worker(*args); }; });
}

}  // namespace mnemo::cli
