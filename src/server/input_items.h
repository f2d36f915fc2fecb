// GET /v1/responses/{id}/input_items: a stored turn's input messages listed as OpenAI lists
// them (a page of message items; `order` asc|desc, default desc; `limit` 1..100, default 20;
// `after` an item id).
#pragma once

#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "http/message.h"
#include "server/api_error.h"

namespace mnemo::server {

// `inputs` as the store keeps them: [{"role", "content"}]. Item ids are derived from the
// response id and the item's place, so they are stable across calls.
std::variant<nlohmann::json, ApiError> input_items_page(const std::string& response_id, const nlohmann::json& inputs,
                                                         const http::Request& req);

}  // namespace mnemo::server
