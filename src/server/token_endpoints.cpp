// Server, the tokenizer over HTTP in llama-server's shape, and one model's card:
//   POST /tokenize   {"content": TEXT, "add_special": false, "parse_special": true, "with_pieces": false}
//                    -> {"tokens": [ids]} (or [{"id", "piece"}] with_pieces)
//   POST /detokenize {"tokens": [ids]} -> {"content": TEXT}
//   GET  /v1/models/{id}
#include <fmt/format.h>

#include "server/server.h"
#include "server/openai_request.h"
#include "server/supported_fields.h"

namespace mnemo::server {

using nlohmann::json;

namespace {

// The fields of a tokenizer request, each checked: its type, and that no other is present.
std::optional<ApiError> read_flag(const json& body, const char* name, bool& out) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_request(fmt::format("'{}' must be a boolean", name), name);
  out = it->get<bool>();
  return std::nullopt;
}

}  // namespace

std::variant<json, ApiError> Server::tokenizer_body(const http::Request& req) {
  if (auto caller = caller_of(req); std::holds_alternative<ApiError>(caller)) return std::get<ApiError>(caller);
  auto body = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&body)) return *error;
  return std::move(std::get<json>(body));
}

void Server::handle_tokenize(const http::Request& req, http::Response& res) {
  auto read = tokenizer_body(req);
  if (auto* error = std::get_if<ApiError>(&read)) return send_error(res, *error);
  const json& body = std::get<json>(read);
  if (auto refused = refuse_fields_outside(body, {"content", "add_special", "parse_special", "with_pieces", "model"})) {
    return send_error(res, *refused);
  }
  auto named = model_of_body(body);
  if (auto* error = std::get_if<ApiError>(&named)) return send_error(res, *error);
  const Tokenizer& tokenizer = *std::get<const ServedModel*>(named)->tokenizer;
  const auto content = body.find("content");
  if (content == body.end() || !content->is_string()) return send_error(res, bad_request("'content' must be a string", "content"));
  bool add_special = false;
  bool parse_special = true;
  bool with_pieces = false;
  for (auto [name, flag] : {std::pair{"add_special", &add_special}, std::pair{"parse_special", &parse_special},
                            std::pair{"with_pieces", &with_pieces}}) {
    if (auto error = read_flag(body, name, *flag)) return send_error(res, *error);
  }
  const std::vector<TokenId> tokens = tokenizer.encode(content->get_ref<const std::string&>(), add_special, parse_special);
  json out = json::array();
  for (const TokenId t : tokens) {
    if (with_pieces) {
      out.push_back({{"id", t}, {"piece", tokenizer.token_to_piece(t, true)}});
    } else {
      out.push_back(t);
    }
  }
  res.set_content(json{{"tokens", std::move(out)}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void Server::handle_detokenize(const http::Request& req, http::Response& res) {
  auto read = tokenizer_body(req);
  if (auto* error = std::get_if<ApiError>(&read)) return send_error(res, *error);
  const json& body = std::get<json>(read);
  if (auto refused = refuse_fields_outside(body, {"tokens", "model"})) return send_error(res, *refused);
  auto named = model_of_body(body);
  if (auto* error = std::get_if<ApiError>(&named)) return send_error(res, *error);
  const Tokenizer& tokenizer = *std::get<const ServedModel*>(named)->tokenizer;
  const auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array()) return send_error(res, bad_request("'tokens' must be an array of token ids", "tokens"));
  std::vector<TokenId> ids;
  ids.reserve(tokens->size());
  // Through the array itself: GCC's -Wnull-dereference misreads json iterators under TSan.
  for (const json& t : tokens->get_ref<const json::array_t&>()) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.vocab_size()) {
      return send_error(res, bad_request(fmt::format("'tokens' must hold token ids in 0..{}", tokenizer.vocab_size() - 1), "tokens"));
    }
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  res.set_content(json{{"content", tokenizer.decode(ids, true)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

json Server::model_card(const ServedModel& model) const {
  return {{"id", model.id},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "mnemo"},
          {"context_length", model.engine->model().config().context_length}};
}

std::variant<const ServedModel*, ApiError> Server::model_of_body(const json& body) const {
  const auto model = body.find("model");
  if (model == body.end() || model->is_null()) return &models_[0];
  if (!model->is_string()) return bad_request("'model' must be a string", "model");
  return model_named(model->get<std::string>());
}

void Server::handle_model(const http::Request& req, http::Response& res) {
  if (auto caller = caller_of(req); std::holds_alternative<ApiError>(caller)) return send_error(res, std::get<ApiError>(caller));
  const std::string id = req.path.substr(std::string_view("/v1/models/").size());
  auto named = id.empty() ? model_named("\x01") : model_named(id);  // "/v1/models/" names none
  if (auto* error = std::get_if<ApiError>(&named)) return send_error(res, *error);
  res.set_content(model_card(*std::get<const ServedModel*>(named)).dump(), "application/json");
}

}  // namespace mnemo::server
