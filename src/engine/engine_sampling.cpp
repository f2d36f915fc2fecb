// Engine, sampling: a step's draws in parallel, and constrained decoding (a sequence whose
// request asks for a format samples each token from those its constraint allows:
// GenerationRequest::format, grammar/output_constraint.h).
#include "engine/engine.h"

namespace mnemo {

bool Engine::wants_argmax_only(const Sequence& seq) {
  const GenerationRequest& request = seq.request->request;
  // Logprobs need the logits, and the choices of n > 1 draw their first tokens from one row; a
  // constrained sequence's argmax is over the tokens its format allows (its mask goes with it).
  return samples_argmax(seq.sampling) && request.top_logprobs < 0 && request.n == 1;
}

void Engine::sample_draws() {
  const auto sample = [this](int64_t begin, int64_t end, int thread) {
    Sampler& sampler = samplers_[static_cast<size_t>(thread)];
    for (int64_t i = begin; i < end; ++i) {
      Draw& d = draws_[static_cast<size_t>(i)];
      if (d.logits == nullptr) continue;  // decided by the model (LogitsFor::kArgmax)
      const std::span<const float> logits{d.logits, static_cast<size_t>(output_.n_vocab)};
      const std::span<const uint64_t> allowed = d.seq->constraint ? ensure_mask(*d.seq) : std::span<const uint64_t>{};
      d.token = sampler.sample(d.seq->sampling, logits, d.seq->tokens, d.step, allowed);
    }
  };
  const auto n = static_cast<int64_t>(draws_.size());
  if (n > 1 && pool_.size() > 1) {
    pool_.parallel_for(n, sample);
  } else {
    sample(0, n, 0);
  }
}


std::unique_ptr<grammar::OutputConstraint> Engine::constraint_for(const GenerationRequest& request) {
  if (request.format == OutputFormat::kText) return nullptr;
  if (!token_bytes_) token_bytes_ = std::make_shared<const grammar::TokenBytes>(tokenizer_);
  if (request.format == OutputFormat::kRegex) return std::make_unique<grammar::OutputConstraint>(token_bytes_, request.regex);
  if (request.format == OutputFormat::kGbnf) return std::make_unique<grammar::OutputConstraint>(token_bytes_, request.gbnf);
  return std::make_unique<grammar::OutputConstraint>(
      token_bytes_, request.format == OutputFormat::kJsonSchema ? request.schema : nullptr);
}

std::span<const uint64_t> Engine::ensure_mask(Sequence& seq) {
  if (!seq.allowed_current) {
    seq.constraint->allowed(seq.allowed);
    seq.allowed_current = true;
  }
  return seq.allowed.words();
}

void Engine::compute_masks() {
  const auto n = static_cast<int64_t>(masked_.size());
  if (n == 0) return;
  pool_.parallel_for(n, [this](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) (void)ensure_mask(*masked_[static_cast<size_t>(i)]);
  });
}

}  // namespace mnemo
