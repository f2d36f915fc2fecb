#include "util/paths.h"

#include <cstdlib>

namespace mnemo {

std::string cache_dir() {
  if (const char* dir = std::getenv("MNEMO_CACHE"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/mnemo";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/mnemo";
}

std::string chat_model_path() { return cache_dir() + "/models/" + kChatModelFile; }

std::string reference_model_path() { return cache_dir() + "/models/" + kReferenceModelFile; }

std::string llama_vocab_dir() { return cache_dir() + "/llama-vocab"; }

std::string qwen_coder_model_path() { return cache_dir() + "/models/" + kQwenCoderModelFile; }

std::string test_models_dir() { return cache_dir() + "/test-models"; }

}  // namespace mnemo
