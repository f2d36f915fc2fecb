// Engine, constrained decoding: a sequence whose request asks for a format samples each token
// from those its constraint allows (GenerationRequest::format, grammar/output_constraint.h).
#include <algorithm>
#include <limits>

#include "engine/engine.h"

namespace mnemo {

std::unique_ptr<grammar::OutputConstraint> Engine::constraint_for(const GenerationRequest& request) {
  if (request.format == OutputFormat::kText) return nullptr;
  if (!token_bytes_) token_bytes_ = std::make_shared<const grammar::TokenBytes>(tokenizer_);
  if (request.format == OutputFormat::kRegex) return std::make_unique<grammar::OutputConstraint>(token_bytes_, request.regex);
  return std::make_unique<grammar::OutputConstraint>(
      token_bytes_, request.format == OutputFormat::kJsonSchema ? request.schema : nullptr);
}

std::span<const float> Engine::constrained_logits(const grammar::OutputConstraint& constraint, std::span<const float> logits,
                                                  int thread) {
  ConstrainedScratch& scratch = constrained_[static_cast<size_t>(thread)];
  constraint.allowed(scratch.allowed);
  scratch.logits.resize(logits.size());
  const size_t n = std::min(logits.size(), scratch.allowed.size());
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  // One pass: the allowed tokens' logits, the others never drawn.
  for (size_t i = 0; i < n; ++i) scratch.logits[i] = scratch.allowed[i] != 0 ? logits[i] : kNever;
  for (size_t i = n; i < logits.size(); ++i) scratch.logits[i] = kNever;
  return scratch.logits;
}

}  // namespace mnemo
