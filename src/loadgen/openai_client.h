// Sends benchmark requests to an OpenAI-compatible server over HTTP (cpp-httplib) and streams
// their replies. One client carries one request at a time; a run gives each worker its own.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "loadgen/openai_protocol.h"
#include "loadgen/request_record.h"
#include "loadgen/workload.h"
#include "util/result.h"

namespace httplib {
class Client;
}

namespace mnemo::loadgen {

struct ServerEndpoint {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when set
  double request_timeout_s = 600.0;
};

// "http://host:port", with or without a trailing "/" or "/v1".
Result<ServerEndpoint> parse_server_url(const std::string& url);

// The id of the first model GET /v1/models lists.
Result<std::string> discover_model(const ServerEndpoint& endpoint);

class OpenAiClient {
 public:
  OpenAiClient(ServerEndpoint endpoint, Api api, RequestOptions options);
  ~OpenAiClient();

  // Sends turn `turn` of `conversation` and streams the reply into `record` (times from
  // `clock`, seconds since the run started). `state` carries what earlier turns left: the
  // Responses API's previous_response_id, the server's own replies.
  void send(const PlannedConversation& conversation, size_t turn, const ConversationState& state,
            const std::function<double()>& clock, RequestRecord& record);

  // Ends the request in progress, if any, from another thread; it is recorded as failed.
  void abort();

 private:
  ServerEndpoint endpoint_;
  Api api_;
  RequestOptions options_;
  std::unique_ptr<httplib::Client> http_;
  std::atomic<bool> aborted_{false};
};

}  // namespace mnemo::loadgen
