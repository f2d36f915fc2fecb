// What one request's stream carries, gathered until its RequestDone (tests of the engine).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "engine/request.h"

namespace mnemo::testing {

struct Collected {
  std::vector<TokenId> tokens;  // the tokens that came with an id, every choice's, in arrival order
  std::string text;
  FinishReason reason = FinishReason::kError;
  RequestUsage usage;
  std::string error;             // the RequestDone's
  std::vector<float> embedding;  // a PooledEmbedding's values
  int pooled_events = 0;
};

// A test failure if the request does not end within `timeout`. `on_delta` sees every TokenDelta
// (of any choice) as it comes.
inline Collected collect(RequestStream& stream, const std::function<void(const TokenDelta&)>& on_delta,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(120000)) {
  Collected r;
  for (;;) {
    auto event = stream.next(timeout);
    if (!event) {
      ADD_FAILURE() << "timed out waiting for the engine";
      return r;
    }
    if (auto* p = std::get_if<PooledEmbedding>(&*event)) {
      r.embedding = p->values;
      ++r.pooled_events;
    } else if (auto* d = std::get_if<TokenDelta>(&*event)) {
      if (on_delta) on_delta(*d);
      if (d->token >= 0) r.tokens.push_back(d->token);
      r.text += d->text;
    } else if (auto* f = std::get_if<ChoiceFinished>(&*event)) {
      r.reason = f->reason;
    } else if (auto* done = std::get_if<RequestDone>(&*event)) {
      r.usage = done->usage;
      r.error = done->error;
      return r;
    }
  }
}

inline Collected collect(RequestStream& stream, std::chrono::milliseconds timeout = std::chrono::milliseconds(120000)) {
  return collect(stream, nullptr, timeout);
}

}  // namespace mnemo::testing
