// One client stream out of a request's successive upstream streams (SPEC D7): when the instance
// generating a streamed reply fails, the router resumes the request elsewhere and the client must
// see every token exactly once, as one stream.
//
// The router asks instances to name each chunk's token ("mnemo_token"), and how many of the
// request's tokens its KV replica holds ("mnemo_replicated", when that changes); the stitcher
// records both (what a resumed request continues after, and how much of it needs no recompute),
// removes the fields, and passes the events on. Events of a resumed upstream are rewritten into the first one's stream: its "id"
// and "created" become the first upstream's, and its opening role-only chunk is dropped (the
// client had one). Events arrive in pieces of any size; an event is handled once whole.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mnemo::router {

class SseStitcher {
 public:
  // Bytes from the current upstream; returns what to send to the client now (whole events).
  std::string feed(std::string_view bytes);
  // The current upstream failed: what follows comes from a resumed one. Bytes of an event the
  // failed upstream left unfinished are dropped (its token was never recorded).
  void begin_resumed();

  // Generated tokens of choice 0 the client has been sent.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Prompt and generated tokens whose KV the current upstream's replica acknowledged.
  int32_t replicated_tokens() const { return replicated_; }
  bool finished() const { return finished_; }  // choice 0 had a finish_reason
  bool done() const { return done_; }          // "data: [DONE]" went out
  int resumes() const { return resumes_; }

 private:
  std::string event(std::string_view text);  // one whole event -> what the client gets ("" : nothing)

  std::string pending_;  // an event not yet whole
  std::vector<int32_t> tokens_;
  int32_t replicated_ = 0;
  nlohmann::json id_;       // of the first upstream's stream
  nlohmann::json created_;
  bool resumed_ = false;       // the current upstream is a resumed one
  bool opening_seen_ = false;  // the current upstream's first chunk went by
  bool finished_ = false;
  bool done_ = false;
  int resumes_ = 0;
};

}  // namespace mnemo::router
