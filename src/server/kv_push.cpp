// KV transfer between instances (SPEC M1/M2, M5): POST /v1/internal/kv_push sends the cached KV
// of a request's prompt to another instance; that instance's transport hands the message to
// receive_kv, which inserts it into its cache (transfer_with_insert: one exchange, acknowledged
// only once inserted). The router asks for a push when moving a prefix's KV costs less than
// recomputing it where the request goes.
//
//   body: {"target": "<host:port of the receiver's transport>", "api": "chat" | "completions",
//          "request": {<the OpenAI request body>}}
//   reply: {"chunks": N, "tokens": T, "bytes": B, "seconds": S}, or an error (nothing was sent,
//          or the receiver refused: the request then recomputes)
//
// The push's Authorization and the request's cache_salt name the tenant, as for a generation:
// only that tenant's KV leaves.
#include <chrono>

#include <nlohmann/json.hpp>

#include "server/internal_requests.h"
#include "server/kv_messages.h"
#include "server/kv_replicator.h"
#include "server/server.h"
#include "transfer/kv_message.h"
#include "transfer/kv_transport.h"
#include "util/bounded_json.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

// A step of the engine, with margin; under the 30 s a push waits for its acknowledgement.
constexpr auto kEngineWait = std::chrono::seconds(20);

void send_result(http::Response& res, const json& body) {
  res.status = 200;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace

void Server::attach_kv_transport(transfer::KvTransport* transport, uint64_t layout_fingerprint) {
  replicator_.reset();
  transport_ = transport;
  layout_fingerprint_ = layout_fingerprint;
  receiver_.set_layout_fingerprint(transport_ != nullptr ? layout_fingerprint : 0);
  if (transport_ != nullptr) replicator_ = std::make_unique<KvReplicator>(engine_, *transport_, layout_fingerprint_);
}

ReplicationStats Server::replication_stats() const { return replicator_ ? replicator_->stats() : ReplicationStats{}; }

void Server::receive_kv(transfer::KvMessage&& message, transfer::Acknowledge acknowledge) {
  receiver_.receive(std::move(message), std::move(acknowledge));
}

void Server::handle_kv_push(const http::Request& req, http::Response& res) {
  // Only a signed peer (a router, which takes the target from the cluster's membership) may make
  // this instance send KV somewhere.
  auto caller = peer_of(req);
  if (auto* error = std::get_if<ApiError>(&caller)) return send_error(res, *error);
  if (transport_ == nullptr) {
    return send_error(res, ApiError{404, "this instance has no KV transport (it is not in a cluster)", "invalid_request_error", "", ""});
  }
  auto parsed = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(res, *error);
  auto push_or_error = parse_kv_push_body(std::get<json>(parsed));
  if (auto* error = std::get_if<ApiError>(&push_or_error)) return send_error(res, *error);
  const KvPushBody& push = std::get<KvPushBody>(push_or_error);
  const ParsedRequest& request = push.request;
  const Endpoint endpoint = push.endpoint;
  auto prompt = prompt_of(request, endpoint);
  if (auto* error = std::get_if<ApiError>(&prompt)) return send_error(res, *error);
  const uint64_t ns = cache_namespace_of(std::get<Caller>(caller), request);

  const auto started = std::chrono::steady_clock::now();
  auto exported_future = engine_.export_prefix(ns, std::move(std::get<std::vector<TokenId>>(prompt)));
  if (exported_future.wait_for(kEngineWait) != std::future_status::ready) {
    return send_error(res, api_error_of(make_error(ErrorCode::kUnavailable, "the engine did not export the KV in time")));
  }
  Result<KvCache::ExportedPrefix> exported_or_error = exported_future.get();
  if (!exported_or_error.ok()) return send_error(res, api_error_of(exported_or_error.error()));
  KvCache::ExportedPrefix exported = std::move(*exported_or_error);
  if (exported.chunks == 0) return send_result(res, {{"chunks", 0}, {"tokens", 0}, {"bytes", 0}, {"seconds", 0.0}});

  const int32_t chunks = exported.chunks;
  const size_t n_tokens = exported.tokens.size();
  transfer::KvMessage message = kv_message_of(ns, layout_fingerprint_, engine_.config().block_size, std::move(exported));
  const size_t bytes = message.payload.size();
  const Status sent = transport_->send(push.target, message, 30);
  if (!sent.ok()) return send_error(res, ApiError{502, sent.error().message(), "server_error", "", "kv_transfer_failed"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  send_result(res, {{"chunks", chunks}, {"tokens", n_tokens}, {"bytes", bytes}, {"seconds", seconds}});
}

}  // namespace mnemo::server
