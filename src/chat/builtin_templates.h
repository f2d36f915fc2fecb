// Chat templates for models whose GGUF carries none (the default Gemma 3 270M has none).
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace mnemo {

// "gemma", "llama3", "chatml", "mistral", "llama2".
std::span<const std::string_view> builtin_template_families();
// The Jinja source of a family's template, or nullopt for an unknown family.
std::optional<std::string_view> builtin_template_source(std::string_view family);

}  // namespace mnemo
