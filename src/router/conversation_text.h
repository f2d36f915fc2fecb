// What the router reads of an OpenAI request and its reply, without tokenizing: the prompt as
// canonical text (each message's role and content, in order, with separators no content holds),
// the conversation's identity for session affinity, and the reply's text, so that the text of
// one turn plus its reply is a prefix of the next turn's prompt text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace mnemo::router {

enum class Api { kChat, kCompletions, kResponses };

struct ConversationView {
  std::string prompt_text;
  std::string session_key;           // the conversation's start: its first user message
  std::string previous_response_id;  // Responses API: the turn it continues ("" if none)
  bool stream = false;
};

// An Error (for a 400) when the body is not a JSON object of the API's shape.
Result<ConversationView> view_request(Api api, const nlohmann::json& body);
// The prompt text of the turn after this reply.
std::string with_reply(Api api, const std::string& prompt_text, std::string_view reply);
// What the router reads of a finished reply (a whole JSON body, or a server-sent event stream),
// in one pass over it: its text, the tokens it generated (its usage's completion_tokens or
// output_tokens, else for a stream the events that carried text; -1 when neither says), and for
// the Responses API its id and final response object (null if none).
struct ReplyDigest {
  std::string text;
  int64_t generated_tokens = -1;
  std::string response_id;
  nlohmann::json final_response;
};
ReplyDigest read_reply(Api api, std::string_view body, bool sse);
// The reply's text from a whole JSON body, or from a server-sent event stream. Empty if none.
std::string reply_text(Api api, std::string_view body, bool sse);
// Whether a chunk of a stream (of any of the APIs) carries generated text, not only a role, a
// finish or usage: a quick look at its bytes, no parse.
bool carries_text(std::string_view chunk);
// A Responses API reply's id ("" if none).
std::string response_id(std::string_view body, bool sse);

}  // namespace mnemo::router
