#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "engine/generator.h"
#include "kernels/cpu/type_kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

struct GenerateArgs {
  std::string model_path;
  std::string prompt;
  std::string kv_type = "f16";
  int32_t max_tokens = 128;
  int32_t threads = 0;
  int32_t context = 4096;
  bool raw_prompt = false;
  bool show_stats = false;
  SamplingParams sampling;
};

int run_generate(const GenerateArgs& args) {
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
  const std::vector<TokenId> prompt = (*tokenizer)->encode(args.prompt, /*add_special=*/true, /*parse_special=*/!args.raw_prompt);
  ThreadPool pool(args.threads);
  Generator generator(**model, pool, std::min(args.context, (*model)->config().context_length),
                      args.kv_type == "f32" ? DType::F32 : DType::F16);
  GenerateOptions options;
  options.max_tokens = args.max_tokens;
  options.sampling = args.sampling;
  StreamingDetokenizer detok(**tokenizer);
  const Tokenizer& tok = **tokenizer;
  auto result = generator.generate(
      prompt, options,
      [&](TokenId token) {
        if (tok.is_end_of_generation(token)) return true;
        const std::string text = detok.push(token);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return true;
      },
      [&](TokenId token) { return tok.is_end_of_generation(token); });
  const std::string rest = detok.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.error().message().c_str());
    return 1;
  }
  if (args.show_stats) {
    const GenerateStats& s = generator.stats();
    std::fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tok/s); generated: %d tokens in %.3f s (%.1f tok/s); isa %s\n",
                 s.prompt_tokens, s.prefill_seconds, s.prompt_tokens / std::max(1e-9, s.prefill_seconds),
                 s.generated_tokens, s.decode_seconds,
                 std::max(0, s.generated_tokens - 1) / std::max(1e-9, s.decode_seconds),
                 std::string(kernels::isa_name(kernels::detected_isa())).c_str());
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<GenerateArgs>();
  args->model_path = chat_model_path();
  args->sampling.temperature = 0.0f;
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt, streamed to stdout");
  cmd->add_option("-m,--model", args->model_path, "GGUF model file")->capture_default_str();
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text")->required();
  cmd->add_option("-n,--max-tokens", args->max_tokens, "Tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-t,--threads", args->threads, "Worker threads (0: one per core)")->capture_default_str();
  cmd->add_option("-c,--context", args->context, "KV capacity in tokens")->capture_default_str()->check(CLI::Range(16, 1 << 22));
  cmd->add_option("--temp", args->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", args->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", args->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", args->sampling.repetition_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--presence-penalty", args->sampling.presence_penalty, "Presence penalty")->capture_default_str();
  cmd->add_option("--frequency-penalty", args->sampling.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd->add_option("--seed", args->sampling.seed, "Random seed")->capture_default_str();
  cmd->add_option("--kv-type", args->kv_type, "KV cache element type (f32: exact attention)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32"}));
  cmd->add_flag("--raw", args->raw_prompt, "Do not parse special-token text in the prompt");
  cmd->add_flag("--stats", args->show_stats, "Print timing to stderr");
  cmd->callback([&run, args] { run = [args] { return run_generate(*args); }; });
}

}  // namespace mnemo::cli
