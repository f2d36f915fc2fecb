#include "chat/builtin_templates.h"

namespace mnemo {

namespace {

// The official Gemma 3 template (tokenizer_config.json of google/gemma-3-*-it): a system
// message is folded into the first user turn; the assistant's role is "model".
constexpr std::string_view kGemma =
    R"({{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- if messages[0]['content'] is string -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- else -%}{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}{%- endif -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = "" -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}{%- endif -%}{%- if (message['role'] == 'assistant') -%}{%- set role = "model" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}{%- if message['content'] is string -%}{{ message['content'] | trim }}{%- elif message['content'] is iterable -%}{%- for item in message['content'] -%}{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}{%- else -%}{{ raise_exception("Invalid content type") }}{%- endif -%}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%})";

// Meta-Llama-3-8B-Instruct's template (Llama 3.0; 3.1+ GGUFs carry their own, with tools).
constexpr std::string_view kLlama3 =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})";

// Plain ChatML (Qwen, Yi, Hermes, ...), without Qwen's default system prompt.
constexpr std::string_view kChatml =
    R"({% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

// Mistral Instruct's [INST] format. Mistral's own v0.1/v0.2 templates reject a system message;
// this one prepends it to the first user message, as its later templates do.
constexpr std::string_view kMistral =
    R"({%- if messages[0]['role'] == 'system' -%}{%- set system_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set system_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{{ bos_token }}{%- for message in loop_messages -%}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif -%}{%- if message['role'] == 'user' -%}{{ '[INST] ' + (system_prefix if loop.first else '') + message['content'] + ' [/INST]' }}{%- else -%}{{ message['content'] + eos_token }}{%- endif -%}{%- endfor -%})";

// Llama-2-chat's template: <<SYS>> block inside the first [INST].
constexpr std::string_view kLlama2 =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";

struct Builtin {
  std::string_view family;
  std::string_view source;
};

constexpr Builtin kBuiltins[] = {
    {"gemma", kGemma}, {"llama3", kLlama3}, {"chatml", kChatml}, {"mistral", kMistral}, {"llama2", kLlama2},
};

constexpr std::string_view kFamilies[] = {"gemma", "llama3", "chatml", "mistral", "llama2"};

}  // namespace

std::span<const std::string_view> builtin_template_families() { return kFamilies; }

std::optional<std::string_view> builtin_template_source(std::string_view family) {
  for (const Builtin& builtin : kBuiltins) {
    if (builtin.family == family) return builtin.source;
  }
  return std::nullopt;
}

}  // namespace mnemo
