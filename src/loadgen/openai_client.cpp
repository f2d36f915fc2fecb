#include "loadgen/openai_client.h"

#include <httplib.h>

#include <charconv>

#include "util/net_address.h"

namespace mnemo::loadgen {
namespace {

httplib::Headers request_headers(const ServerEndpoint& endpoint) {
  httplib::Headers headers = {{"Accept", "text/event-stream"}};
  if (!endpoint.api_key.empty()) headers.emplace("Authorization", "Bearer " + endpoint.api_key);
  return headers;
}

std::unique_ptr<httplib::Client> make_http_client(const ServerEndpoint& endpoint) {
  auto http = std::make_unique<httplib::Client>(endpoint.host, endpoint.port);
  const auto timeout = std::chrono::duration<double>(endpoint.request_timeout_s);
  http->set_connection_timeout(std::chrono::seconds(10));
  http->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  http->set_write_timeout(std::chrono::seconds(30));
  return http;
}

// The message of an OpenAI error body, or the body itself.
std::string error_message(int status, const std::string& body) {
  const auto parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error")) {
    const auto& error = parsed["error"];
    if (error.is_object() && error.contains("message") && error["message"].is_string()) {
      return fmt::format("HTTP {}: {}", status, error["message"].get<std::string>());
    }
  }
  return fmt::format("HTTP {}: {}", status, body.substr(0, 200));
}

}  // namespace

Result<ServerEndpoint> parse_server_url(const std::string& url) {
  MNEMO_ASSIGN_OR_RETURN(HttpUrl parsed, parse_http_url(url, 80, /*bare_is_http=*/true));
  if (parsed.tls) return make_error("{}: only plain http is supported", url);
  std::string_view path = parsed.path;
  while (path.ends_with("/")) path.remove_suffix(1);
  if (!path.empty() && path != "/v1") return make_error("{}: expected http://HOST:PORT", url);
  ServerEndpoint endpoint;
  endpoint.host = std::move(parsed.address.host);
  endpoint.port = parsed.address.port;
  return endpoint;
}

Result<std::string> discover_model(const ServerEndpoint& endpoint) {
  auto http = make_http_client(endpoint);
  http->set_read_timeout(std::chrono::seconds(30));
  const auto response = http->Get("/v1/models", request_headers(endpoint));
  if (!response) {
    return make_error("GET http://{}:{}/v1/models: {}", endpoint.host, endpoint.port, httplib::to_string(response.error()));
  }
  if (response->status != 200) return make_error("GET /v1/models: {}", error_message(response->status, response->body));
  const auto models = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!models.is_object() || !models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
      !models["data"][0].is_object() || !models["data"][0].contains("id") || !models["data"][0]["id"].is_string()) {
    return make_error("GET /v1/models: no model listed");
  }
  return models["data"][0]["id"].get<std::string>();
}

OpenAiClient::OpenAiClient(ServerEndpoint endpoint, Api api, RequestOptions options)
    : endpoint_(std::move(endpoint)), api_(api), options_(std::move(options)), http_(make_http_client(endpoint_)) {}

OpenAiClient::~OpenAiClient() = default;

void OpenAiClient::abort() {
  aborted_ = true;
  http_->stop();
}

void OpenAiClient::send(const PlannedConversation& conversation, size_t turn, const ConversationState& state,
                        const std::function<double()>& clock, RequestRecord& record) {
  if (aborted_) {
    record.sent_s = record.finished_s = clock();
    record.error = "aborted: the run's drain deadline passed";
    return;
  }
  const nlohmann::json body = api_ == Api::kResponses
                                  ? responses_request_body(conversation, turn, state.previous_response_id, options_)
                                  : chat_request_body(conversation, turn, options_, state);
  StreamedReply reply(api_);
  SseReader reader([&](const SseEvent& event) {
    reply.on_event(event, clock(), record);
    return true;  // read to the end of the stream, so the connection closes cleanly
  });
  std::string error_body;

  httplib::Request request;
  request.method = "POST";
  request.path = api_path(api_);
  request.headers = request_headers(endpoint_);
  request.set_header("Content-Type", "application/json");
  request.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  request.response_handler = [&](const httplib::Response& response) {
    record.http_status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    if (aborted_) return false;
    if (record.http_status != 200) {
      error_body.append(data, length);
      return true;
    }
    if (!reply.finished()) reader.feed(std::string_view(data, length));
    return true;
  };

  record.sent_s = clock();
  httplib::Response response;
  httplib::Error transport_error = httplib::Error::Success;
  const bool delivered = http_->send(request, response, transport_error);
  if (record.finished_s < record.sent_s) record.finished_s = clock();

  if (aborted_) {
    record.ok = false;
    record.error = "aborted: the run's drain deadline passed";
  } else if (!delivered && !reply.finished()) {
    record.ok = false;
    record.error = fmt::format("transport: {}", httplib::to_string(transport_error));
  } else if (record.http_status != 200) {
    record.ok = false;
    record.error = error_message(record.http_status, error_body);
  } else {
    reply.finish(record);
  }
}

}  // namespace mnemo::loadgen
