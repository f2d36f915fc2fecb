#include "server/input_items.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace mnemo::server {

using nlohmann::json;

namespace {

json item_of(const std::string& response_id, size_t index, const json& message) {
  const std::string type = message.value("type", "message");
  if (type == "function_call" || type == "function_call_output") {
    json item = message;
    const std::string base = response_id.starts_with("resp_") ? response_id.substr(5) : response_id;
    item["id"] = fmt::format("{}_{}_{}", type == "function_call" ? "fc" : "fco", base, index);
    if (type == "function_call") item["status"] = "completed";
    return item;
  }
  const std::string role = message.value("role", "user");
  const std::string text = message.contains("content") && message["content"].is_string() ? message["content"].get<std::string>() : "";
  const std::string base = response_id.starts_with("resp_") ? response_id.substr(5) : response_id;
  return {{"id", fmt::format("msg_{}_{}", base, index)},
          {"type", "message"},
          {"role", role},
          {"status", "completed"},
          {"content", json::array({{{"type", role == "assistant" ? "output_text" : "input_text"}, {"text", text}}})}};
}

}  // namespace

std::variant<json, ApiError> input_items_page(const std::string& response_id, const json& inputs, const http::Request& req) {
  const std::string order = req.query_param("order").value_or("desc");
  if (order != "asc" && order != "desc") return bad_request("'order' must be asc or desc", "order");
  uint64_t limit = 20;
  if (!req.query_number("limit", 20, 100, limit) || limit < 1) return bad_request("'limit' must be an integer from 1 to 100", "limit");
  std::vector<json> items;
  if (inputs.is_array()) {
    for (size_t i = 0; i < inputs.size(); ++i) items.push_back(item_of(response_id, i, inputs[i]));
  }
  if (order == "desc") std::reverse(items.begin(), items.end());
  size_t first = 0;
  if (const auto after = req.query_param("after")) {
    const auto it = std::find_if(items.begin(), items.end(), [&](const json& item) { return item["id"] == *after; });
    if (it == items.end()) return bad_request(fmt::format("no input item '{}' in response '{}'", *after, response_id), "after");
    first = static_cast<size_t>(it - items.begin()) + 1;
  }
  const size_t end = std::min(items.size(), first + static_cast<size_t>(limit));
  json data = json::array();
  for (size_t i = first; i < end; ++i) data.push_back(items[i]);
  json page = {{"object", "list"}, {"data", data}, {"has_more", end < items.size()}};
  page["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
  page["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
  return page;
}

}  // namespace mnemo::server
