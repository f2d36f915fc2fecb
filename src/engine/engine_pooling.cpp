// Engine, embeddings: a request with a pooling (GenerationRequest::pooling) runs its prompt like
// any other, with its tokens' final-normed hidden states as the pass's output instead of logits,
// pooled step by step; once the prompt has run the pooled vector is pushed and the request ends
// without a generated token. Its KV is cached as any prompt's is.
#include "engine/engine.h"

namespace mnemo {

LogitsFor Engine::hidden_wanted(const Step::Item& item) {
  // The mean needs every token's state; the last token's, only the step that runs it.
  if (item.seq->request->request.pooling == Pooling::kMean || item.sample) return LogitsFor::kHidden;
  return LogitsFor::kNone;
}

void Engine::pool_hidden(Sequence& seq, const Step::Item& item, size_t index) {
  if (seq.state == SequenceState::kFinished) return;
  const Pooling pooling = seq.request->request.pooling;
  if (output_.hidden_first[index] >= 0) {
    const auto n_embd = static_cast<size_t>(output_.n_embd);
    seq.pooled.resize(n_embd, 0.0);
    int32_t row = 0;
    for (const QueryRange& r : item.ranges) {
      for (int32_t pos = r.start; pos < r.end(); ++pos, ++row) {
        if (pos < seq.pooled_through) continue;  // run again (a preemption): counted already
        const float* h = output_.hidden_row(index, row);
        for (size_t d = 0; d < n_embd; ++d) {
          seq.pooled[d] = pooling == Pooling::kMean ? seq.pooled[d] + static_cast<double>(h[d]) : static_cast<double>(h[d]);
        }
        seq.pooled_through = pos + 1;
      }
    }
  }
  if (!item.sample) return;
  PooledEmbedding out;
  out.index = seq.request->request.embedding_index;
  const double scale = pooling == Pooling::kMean ? 1.0 / static_cast<double>(seq.pooled_through) : 1.0;
  out.values.reserve(seq.pooled.size());
  for (const double v : seq.pooled) out.values.push_back(static_cast<float>(v * scale));
  seq.request->stream->push(std::move(out));
  finish(seq, FinishReason::kStop);
}

}  // namespace mnemo
