#include "router/router_http.h"

namespace mnemo::router {

using nlohmann::json;

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& code) {
  res.status = status;
  res.set_content(json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}}
                      .dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

namespace {

httplib::Headers authorization_header(const std::string& authorization) {
  httplib::Headers headers;
  if (!authorization.empty()) headers.emplace("Authorization", authorization);
  return headers;
}

}  // namespace

httplib::Result post_for(const std::string& authorization, const std::string& address, const std::string& path,
                         const json& body, std::chrono::duration<double> read_timeout) {
  httplib::Client client(address);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(read_timeout);
  return client.Post(path, authorization_header(authorization), body.dump(-1, ' ', false, json::error_handler_t::replace),
                     "application/json");
}
httplib::Result delete_for(const std::string& authorization, const std::string& address, const std::string& path) {
  httplib::Client client(address);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(30));
  return client.Delete(path, authorization_header(authorization));
}
httplib::Result post_for(const httplib::Request& client_request, const std::string& address, const std::string& path,
                         const json& body, std::chrono::duration<double> read_timeout) {
  return post_for(client_request.get_header_value("Authorization"), address, path, body, read_timeout);
}

}  // namespace mnemo::router
