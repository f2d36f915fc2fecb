// The router's HTTP plumbing: OpenAI-shaped error replies, and its own requests to instances on
// behalf of a client's request (its Authorization passed on, so the instance sees the same
// tenant): KV pushes, prefills, copies and deletes of stored turns.
#pragma once

#include <chrono>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace mnemo::router {

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& code);

httplib::Result post_for(const std::string& authorization, const std::string& address, const std::string& path,
                         const nlohmann::json& body, std::chrono::duration<double> read_timeout);
httplib::Result post_for(const httplib::Request& client_request, const std::string& address, const std::string& path,
                         const nlohmann::json& body, std::chrono::duration<double> read_timeout);
httplib::Result delete_for(const std::string& authorization, const std::string& address, const std::string& path);

}  // namespace mnemo::router
