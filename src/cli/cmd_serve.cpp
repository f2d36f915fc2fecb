// `mnemo serve`: the OpenAI-compatible server on one model. SIGTERM/SIGINT stop it gracefully:
// no new connections; requests in flight finish, or are cancelled after the grace period.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <pthread.h>

#include "cli/commands.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/server.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

struct ServeArgs {
  std::string model_path;
  std::string model_name;
  server::ServerConfig server;
  EngineConfig engine;
  std::string kv_type = "f16";
  int32_t kv_tokens = 65536;
  int32_t host_swap_tokens = 65536;
  int32_t grace_seconds = 30;
  std::string state_dir;
};

int run_serve(ServeArgs args) {
  // Signals are taken by one thread with sigwait, never by whichever thread happens to run.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto model = Model::load(args.model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.error().message().c_str());
    return 1;
  }
  auto tokenizer = Tokenizer::from_gguf((*model)->file());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.error().message().c_str());
    return 1;
  }
  auto chat_template = ChatTemplate::for_model((*model)->file());
  if (!chat_template.ok()) {
    std::fprintf(stderr, "error: %s\n", chat_template.error().message().c_str());
    return 1;
  }
  EngineConfig engine_config = args.engine;
  engine_config.kv_dtype = args.kv_type == "f32" ? DType::F32 : DType::F16;
  engine_config.kv_blocks = std::max(1, args.kv_tokens / engine_config.block_size);
  engine_config.host_swap_blocks = std::max(0, args.host_swap_tokens / engine_config.block_size);
  Engine engine(**model, **tokenizer, engine_config);

  server::ServerConfig config = args.server;
  std::error_code ec;
  std::filesystem::create_directories(args.state_dir, ec);
  if (ec) {
    std::fprintf(stderr, "error: cannot create state folder %s: %s\n", args.state_dir.c_str(), ec.message().c_str());
    return 1;
  }
  config.response_store = args.state_dir + "/responses.sqlite";
  config.model_id = args.model_name.empty() ? std::filesystem::path(args.model_path).stem().string() : args.model_name;
  server::Server server(engine, **tokenizer, std::move(*chat_template), config);
  if (const Status bound = server.bind(); !bound.ok()) {
    std::fprintf(stderr, "error: %s\n", bound.error().message().c_str());
    return 1;
  }
  std::printf("mnemo: serving %s as '%s' at http://%s:%d/ (OpenAI API under /v1)\n", args.model_path.c_str(),
              config.model_id.c_str(), config.host.c_str(), server.port());
  std::fflush(stdout);

  std::thread signal_waiter([&] {
    int received = 0;
    sigwait(&signals, &received);
    std::fprintf(stderr, "mnemo: signal %d: no new connections; finishing requests in flight\n", received);
    server.stop();
    // Requests still running after the grace period are cancelled.
    std::this_thread::sleep_for(std::chrono::seconds(args.grace_seconds));
    engine.shutdown();
  });
  server.serve();
  engine.shutdown();
  signal_waiter.detach();  // it may still sleep out the grace period; the process is exiting
  std::fprintf(stderr, "mnemo: stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<ServeArgs>();
  args->model_path = default_model_path();
  args->server.ui_dir = MNEMO_UI_DIR;
  args->state_dir = cache_dir() + "/state";
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API with a web chat page");
  cmd->add_option("-m,--model", args->model_path, "GGUF model file")->capture_default_str();
  cmd->add_option("--model-name", args->model_name, "Model id clients use (default: the file name)");
  cmd->add_option("--host", args->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->server.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", args->server.api_key, "Require 'Authorization: Bearer KEY' on /v1");
  cmd->add_option("--ui-dir", args->server.ui_dir, "Folder of the web chat page")->capture_default_str();
  cmd->add_option("-t,--threads", args->engine.threads, "Kernel worker threads (0: one per core)")->capture_default_str();
  cmd->add_option("--kv-tokens", args->kv_tokens, "KV pool size in tokens")->capture_default_str()->check(CLI::Range(16, 1 << 26));
  cmd->add_option("--host-swap-tokens", args->host_swap_tokens, "Host swap space for preempted sequences, in tokens")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 26));
  cmd->add_option("--kv-type", args->kv_type, "KV element type")->capture_default_str()->check(CLI::IsMember({"f16", "f32"}));
  cmd->add_option("--max-batch-tokens", args->engine.max_batch_tokens, "Tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-running", args->engine.max_running, "Sequences running at once")->capture_default_str()->check(CLI::Range(1, 4096));
  // The stateless baseline of benchmarks: every request computes its whole prompt.
  cmd->add_flag_callback("--no-prefix-cache", [args] { args->engine.prefix_caching = false; },
                         "Do not reuse the KV of earlier requests (stateless baseline)");
  cmd->add_option("--max-connections", args->server.max_connections, "Requests in flight before 429")->capture_default_str();
  cmd->add_option("--state-dir", args->state_dir, "Folder of durable state (the Responses API's conversations)")
      ->capture_default_str();
  cmd->add_option("--grace-seconds", args->grace_seconds, "On SIGTERM, time for requests in flight to finish")->capture_default_str();
  cmd->callback([&run, args] { run = [args] { return run_serve(*args); }; });
}

}  // namespace mnemo::cli
