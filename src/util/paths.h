// Where Mnemo keeps downloaded artefacts: $MNEMO_CACHE, else $XDG_CACHE_HOME/mnemo, else
// ~/.cache/mnemo. scripts/fetch_model.py puts the default model under models/ there.
#pragma once

#include <string>

namespace mnemo {

inline constexpr const char* kDefaultModelFile = "gemma-3-270m-q4_k_m.gguf";

std::string cache_dir();
std::string default_model_path();
// Folder with llama.cpp's vocab-only GGUFs and their expected tokenizations (scripts/setup.sh).
std::string llama_vocab_dir();

}  // namespace mnemo
