// What one API makes of a request's engine events: chat and completions (server/completion.h)
// and the Responses API (server/responses_shaper.h) each shape them their way, and one pump
// (shaped_body) drives any of them the same way. A shaper knows nothing of threads, sockets or
// the engine: tests drive it with scripted events.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/request.h"
#include "server/engine_body.h"

namespace mnemo::server {

class ReplyShaper {
 public:
  virtual ~ReplyShaper() = default;
  // Streamed (SSE): what the stream opens with, before any event.
  virtual std::string open_stream() { return ""; }
  // Streamed: appends what `event` makes of the stream to `out`; true once the reply is over.
  virtual bool stream(const StreamEvent& event, std::string& out) = 0;
  // Whole: takes `event` in; true once the reply is over, whole() then being the answer.
  virtual bool gather(const StreamEvent& event) = 0;
  struct Whole {
    int status = 200;
    std::string body;  // JSON
  };
  virtual Whole whole() = 0;

  // Tokens of the request whose KV its replicas hold (the furthest of them), reported in the
  // stream ("mnemo_replicated") when the client asked for its tokens, so a router knows how far a
  // failover can go without recompute.
  void set_replica_progress(std::function<int32_t()> progress) { replica_progress_ = std::move(progress); }

 protected:
  // The replicas' progress when it changed since the last report (nullopt: unchanged, or none).
  std::optional<int32_t> replica_progress_change() {
    if (!replica_progress_) return std::nullopt;
    const int32_t now = replica_progress_();
    if (now == replicated_reported_) return std::nullopt;
    return replicated_reported_ = now;
  }

 private:
  std::function<int32_t()> replica_progress_;
  int32_t replicated_reported_ = 0;
};

// Sees each event as it goes to the shaper (the access log, KV replicas).
using EventObserver = std::function<void(const StreamEvent&)>;

// The one pump: the events ready on `stream` (never waiting) through `shaper`, each seen first by
// `observe`; a chunked SSE body when `streamed`, else a whole one once the request ends. Holds
// `in_flight_guard` until the connection lets the body go.
std::shared_ptr<EngineBody> shaped_body(std::shared_ptr<RequestStream> stream, std::shared_ptr<void> in_flight_guard,
                                        std::shared_ptr<ReplyShaper> shaper, bool streamed, EventObserver observe);

// Answers `res` with `stream`'s events through `shaper`: an SSE stream when `streamed`, else a
// whole JSON body once the request is done (see shaped_body).
void answer_with(http::Response& res, std::shared_ptr<RequestStream> stream, std::shared_ptr<void> in_flight_guard,
                 std::shared_ptr<ReplyShaper> shaper, bool streamed, EventObserver observe);

// The whole answer on the calling thread (a handler that must wait: a prefill for a decode
// instance), each event seen first by `observe`.
ReplyShaper::Whole gather_all(RequestStream& stream, ReplyShaper& shaper, const EventObserver& observe);

}  // namespace mnemo::server
