#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

// What the RoPE scaling adds to the rope line ("" when nothing).
std::string rope_scaling_text(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  std::string text;
  if (s.type == RopeScalingType::kYarn) {
    text = fmt::format(", YaRN x{:g} of {} positions (beta {:g}/{:g})", s.factor, s.original_context, s.yarn_beta_fast,
                       s.yarn_beta_slow);
  } else if (s.type == RopeScalingType::kLongRope) {
    text = fmt::format(", LongRoPE from {} positions", s.original_context);
  }
  if (s.attn_factor != 1.0f) text += fmt::format(", attention factor {:g}", s.attn_factor);
  int no_rope = 0;
  for (int il = 0; il < c.n_layers; ++il) no_rope += c.uses_rope(il) ? 0 : 1;
  if (no_rope > 0) text += fmt::format(", none in {} of {} layers", no_rope, c.n_layers);
  return text;
}

// The architecture's features beyond a Llama block, comma-separated.
std::string feature_text(const ModelConfig& c) {
  std::vector<std::string> parts;
  if (c.has_qk_norm) parts.emplace_back("QK-norm");
  if (c.has_post_norms) parts.emplace_back("post-norms");
  if (c.embedding_scale != 1.0f) parts.push_back(fmt::format("embedding x{:g}", c.embedding_scale));
  if (c.residual_scale != 1.0f) parts.push_back(fmt::format("residual x{:g}", c.residual_scale));
  if (c.logit_scale != 1.0f) parts.push_back(fmt::format("logits / {:g}", c.logit_scale));
  if (c.final_logit_softcap > 0.0f) parts.push_back(fmt::format("logit softcap {:g}", c.final_logit_softcap));
  if (c.attention_temperature_scale != 0.0f) {
    parts.push_back(fmt::format("query temperature {:g} per {} positions", c.attention_temperature_scale,
                                c.attention_temperature_length));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

int run_info(const std::string& path, bool show_template) {
  auto file = gguf::File::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", file.error().message().c_str());
    return 1;
  }
  const gguf::File& f = *file;
  auto config = read_model_config(f);
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n", config.error().message().c_str());
    return 1;
  }
  const ModelConfig& c = *config;
  std::map<std::string, std::pair<int, int64_t>> by_type;  // type -> (tensors, parameters)
  int64_t parameters = 0;
  size_t bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    auto& entry = by_type[std::string(dtype_name(t.type))];
    ++entry.first;
    entry.second += t.n_elements;
    parameters += t.n_elements;
    bytes += t.n_bytes;
  }
  std::printf("file:            %s (GGUF v%u)\n", path.c_str(), f.version());
  std::printf("name:            %s\n", c.name.c_str());
  std::printf("architecture:    %s\n", c.arch_name.c_str());
  std::printf("parameters:      %.1f M in %zu tensors, %.1f MiB\n", static_cast<double>(parameters) / 1e6,
              f.tensors().size(), static_cast<double>(bytes) / (1024.0 * 1024.0));
  std::printf("tensor types:   ");
  for (const auto& [type, entry] : by_type) std::printf(" %s x%d (%.1f M)", type.c_str(), entry.first, static_cast<double>(entry.second) / 1e6);
  std::printf("\n");
  std::printf("layers:          %d\n", c.n_layers);
  std::printf("embedding:       %d\n", c.n_embd);
  std::printf("feed-forward:    %d (%s)\n", c.n_ff, c.activation == FfnActivation::kGeluTanh ? "GeGLU" : "SwiGLU");
  std::printf("heads:           %d query, %d key/value, head size %d/%d\n", c.n_heads, c.n_kv_heads, c.head_dim_k, c.head_dim_v);
  std::printf("context length:  %d\n", c.context_length);
  std::printf("rope:            %s, %d of %d dims, base %.0f, scale %g%s\n", c.rope_style == RopeStyle::kNeox ? "neox" : "normal",
              c.rope_dims, c.head_dim_k, static_cast<double>(c.rope_base), static_cast<double>(c.rope_freq_scale),
              rope_scaling_text(c).c_str());
  const std::string features = feature_text(c);
  if (!features.empty()) std::printf("features:        %s\n", features.c_str());
  if (c.sliding_window > 0) {
    std::string pattern;
    for (int il = 0; il < c.n_layers; ++il) pattern += c.is_local(il) ? 'L' : 'G';
    std::printf("sliding window:  %d tokens, local rope base %.0f, layers %s (L local, G global)\n", c.sliding_window,
                static_cast<double>(c.rope_base_local), pattern.c_str());
  }
  auto tokenizer = Tokenizer::from_gguf(f);
  if (tokenizer.ok()) {
    const Tokenizer& t = **tokenizer;
    std::printf("tokenizer:       %s, %d tokens, bos %d, eos %d\n", std::string(t.model_name()).c_str(), t.vocab_size(), t.bos(), t.eos());
  } else {
    std::printf("tokenizer:       unavailable: %s\n", tokenizer.error().message().c_str());
  }
  auto chat_template = f.get_string_or("tokenizer.chat_template", "");
  if (!chat_template.ok() || chat_template->empty()) {
    std::printf("chat template:   none in the file\n");
  } else if (show_template) {
    std::printf("chat template:\n%s\n", chat_template->c_str());
  } else {
    std::printf("chat template:   %zu characters (--template prints it)\n", chat_template->size());
  }
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, std::function<int()>& run) {
  auto path = std::make_shared<std::string>(chat_model_path());
  auto show_template = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "Describe a GGUF model: architecture, sizes, types, tokenizer, template");
  cmd->add_option("model", *path, "GGUF model file")->capture_default_str();
  cmd->add_flag("--template", *show_template, "Print the chat template");
  cmd->callback([&run, path, show_template] { run = [path, show_template] { return run_info(*path, *show_template); }; });
}

}  // namespace mnemo::cli
