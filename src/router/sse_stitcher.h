// One client stream out of a request's successive upstream streams (SPEC D7): when the instance
// generating a streamed reply fails, the router resumes the request elsewhere and the client must
// see every token exactly once, as one stream.
//
// The router asks instances to name each token's event ("mnemo_token"), and how many of the
// request's tokens its KV replica holds ("mnemo_replicated", when that changes); the stitcher
// records both (what a resumed request continues after, and how much of it needs no recompute),
// removes the fields, and passes the events on. Events arrive in pieces of any size; an event is
// handled once whole. Two stream formats:
//  - chat and completions chunks ("data:" only): a resumed upstream's chunks get the first one's
//    "id" and "created", and its opening role-only chunk is dropped once the client had one;
//  - Responses events ("event: response.*" with a "type" and a "sequence_number"): a resumed
//    upstream is asked to answer under the first one's ids and text (resume_response()), its
//    opening events the client had already are dropped, and every event's sequence_number is
//    renumbered so the client sees one rising sequence. Deltas with no text, sent only to name
//    their token, are dropped.
#pragma once

#include <cstdint>
#include <set>
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
  // A Responses stream: what the client knows of the response so far, for the instance that
  // resumes it to answer as the same response ({"id", "message_id", "created_at", "text"}, each
  // only once known). Null for other streams.
  nlohmann::json resume_response() const;
  bool finished() const { return finished_; }  // choice 0 had a finish_reason, or the response ended
  bool done() const { return done_; }          // "data: [DONE]" or the response's last event went out
  int resumes() const { return resumes_; }

 private:
  std::string event(std::string_view text);  // one whole event -> what the client gets ("" : nothing)
  std::string chunk_event(nlohmann::json payload);
  std::string responses_event(const std::string& type, nlohmann::json payload);

  std::string pending_;  // an event not yet whole
  std::vector<int32_t> tokens_;
  int32_t replicated_ = 0;
  nlohmann::json id_;       // of the first upstream's chat or completions stream
  nlohmann::json created_;
  bool resumed_ = false;           // the current upstream is a resumed one
  bool role_chunk_sent_ = false;   // the client had a chat stream's opening role chunk
  // Responses streams: what the client was told.
  bool responses_ = false;
  std::string response_id_, message_id_, text_;
  int64_t created_at_ = -1;
  int64_t sequence_ = 0;                 // the next event's sequence_number
  std::set<std::string> openings_sent_;  // response.created, response.in_progress, ...
  bool finished_ = false;
  bool done_ = false;
  int resumes_ = 0;
};

}  // namespace mnemo::router
