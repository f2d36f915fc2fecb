// mnemo_tiny_model OUT.gguf [gemma3|llama] [SEED]: writes a tiny synthetic model that can be
// served end to end (tests/support/tiny_model.h, with its SentencePiece vocabulary), for the
// end-to-end tests that need a model but not the real one's cost (a cluster of three instances).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/tiny_model.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s OUT.gguf [gemma3|llama] [SEED]\n", argv[0]);
    return 2;
  }
  mnemo::testing::TinyModelSpec spec;
  const std::string arch = argc > 2 ? argv[2] : "gemma3";
  if (arch != "gemma3" && arch != "llama") {
    std::fprintf(stderr, "error: architecture '%s' is not gemma3 or llama\n", arch.c_str());
    return 2;
  }
  spec.arch = arch == "gemma3" ? mnemo::Arch::kGemma3 : mnemo::Arch::kLlama;
  spec.seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  spec.n_vocab = 300;
  spec.with_tokenizer = true;
  spec.context_length = 1024;
  spec.sliding_window = 64;
  const mnemo::Status written = mnemo::testing::make_tiny_model(spec).write(argv[1]);
  if (!written.ok()) {
    std::fprintf(stderr, "error: %s\n", written.error().message().c_str());
    return 1;
  }
  return 0;
}
