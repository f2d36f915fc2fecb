// mnemo_tiny_model OUT.gguf [ARCH] [SEED] [small]: writes a tiny synthetic model that can be served
// end to end (tests/support/tiny_model.h, with its SentencePiece vocabulary), for the end-to-end
// tests that need a model but not the real one's cost (a cluster of three instances). ARCH is any
// architecture the tiny models cover (gemma3 by default); `small` makes a one-layer model of a few
// kilobytes, the model loader fuzz target's seeds (fuzz/corpus/model).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/tiny_model.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr, "usage: %s OUT.gguf [ARCH] [SEED] [small]\n", argv[0]);
    return 2;
  }
  mnemo::testing::TinyModelSpec spec;
  const std::string arch = argc > 2 ? argv[2] : "gemma3";
  bool known = false;
  for (const mnemo::Arch candidate : {mnemo::Arch::kLlama, mnemo::Arch::kQwen2, mnemo::Arch::kQwen3, mnemo::Arch::kPhi3,
                                      mnemo::Arch::kSmolLM3, mnemo::Arch::kGranite, mnemo::Arch::kMistral3, mnemo::Arch::kGemma3}) {
    spec.arch = candidate;
    if (mnemo::testing::tiny_arch_name(spec) == arch) {
      known = true;
      break;
    }
  }
  if (!known) {
    std::fprintf(stderr, "error: architecture '%s' is not one the tiny models cover\n", arch.c_str());
    return 2;
  }
  spec.seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  spec.n_vocab = 300;
  spec.with_tokenizer = true;
  spec.context_length = 1024;
  spec.sliding_window = 64;
  if (argc > 4 && std::strcmp(argv[4], "small") == 0) {
    spec.n_layers = 1;
    spec.n_embd = 32;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;
    spec.head_dim = 16;
    spec.n_ff = 64;
    spec.n_vocab = 32;
    spec.with_tokenizer = false;
  }
  const mnemo::Status written = mnemo::testing::make_tiny_model(spec).write(argv[1]);
  if (!written.ok()) {
    std::fprintf(stderr, "error: %s\n", written.error().message().c_str());
    return 1;
  }
  return 0;
}
