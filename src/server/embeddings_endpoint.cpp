// Server, POST /v1/embeddings (server/embeddings.h): every input an engine request with the
// model's pooling, all on one stream, answered whole once each has its vector. The inputs' KV
// is cached in the caller's namespace like any prompt's.
#include <bit>

#include "server/embeddings.h"
#include "server/prompt.h"
#include "server/server.h"

namespace mnemo::server {

static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian float32s");

void Server::handle_embeddings(const http::Request& req, http::Response& res) {
  auto caller_or_error = caller_of(req);
  if (auto* error = std::get_if<ApiError>(&caller_or_error)) return send_error(res, *error);
  const Caller caller = std::get<Caller>(caller_or_error);
  auto body = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&body)) return send_error(res, *error);
  auto named = model_of_body(std::get<nlohmann::json>(body));
  if (auto* error = std::get_if<ApiError>(&named)) return send_error(res, *error);
  const ServedModel& model = *std::get<const ServedModel*>(named);
  const ModelConfig& shape = model.engine->model().config();
  auto read = read_embedding_request(std::get<nlohmann::json>(body), *model.tokenizer, shape.context_length, shape.n_embd);
  if (auto* error = std::get_if<ApiError>(&read)) return send_error(res, *error);
  EmbeddingRequest request = std::move(std::get<EmbeddingRequest>(read));

  auto slot = in_flight_slot();
  if (auto* error = std::get_if<ApiError>(&slot)) return send_error(res, *error);
  auto guard = std::move(std::get<std::shared_ptr<void>>(slot));
  auto stream = std::make_shared<RequestStream>();
  const uint64_t ns = cache_namespace(caller.tenant, "");
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    GenerationRequest g;
    g.prompt = std::move(request.inputs[i]);
    g.pooling = model.pooling;
    g.embedding_index = static_cast<int32_t>(i);
    g.cache_namespace = ns;
    auto submitted = model.engine->submit(std::move(g), stream);
    if (!submitted.ok()) {
      stream->cancel();  // the inputs already queued stop at the engine's next step
      return send_error(res, api_error_of(submitted.error(), "input"));
    }
  }
  auto shaper = std::make_shared<EmbeddingShaper>(model.id, request.inputs.size(), request.base64);
  answer_with(res, std::move(stream), std::move(guard), std::move(shaper), /*streamed=*/false,
              [record = access_record_of(req)](const StreamEvent& event) {
                if (record) record->observe(event);
              });
}

}  // namespace mnemo::server
