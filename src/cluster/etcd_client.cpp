// Unary calls of the etcd client: one short HTTP POST each (the watch is in etcd_watch.cpp).
#include "cluster/etcd_client.h"

#include <charconv>
#include <chrono>

#include <cstdio>
#include <mutex>

#include <unistd.h>

#include <httplib.h>

#include "cluster/etcd_connection.h"
#include "cluster/etcd_wire.h"
#include "util/net_address.h"

namespace mnemo::cluster {
namespace {

using nlohmann::json;

// A reply larger than this is not something etcd sends for membership keys.
constexpr size_t kMaxReplyBytes = size_t{64} << 20;

// The int64s of a request go as decimal strings, as proto3 JSON writes them (a JSON number would
// lose precision in readers that use doubles).
std::string int64_text(int64_t value) { return std::to_string(value); }

Status check_no_gateway_error(const std::string& body) {
  MNEMO_ASSIGN_OR_RETURN(json reply, wire::parse_object(body));
  if (auto message = wire::error_message(reply)) return make_error("etcd error: {}", *message);
  return ok_status();
}

}  // namespace

std::string prefix_range_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Result<EtcdClient> EtcdClient::create(const EtcdEndpoint& endpoint, double timeout_seconds) {
  const std::string& url = endpoint.url;
  constexpr std::string_view kExpected = "(expected http://host:port or https://host:port)";
  auto parsed = parse_http_url(url);
  if (!parsed.ok()) return make_error("etcd {} {}", parsed.error().message(), kExpected);
  if (!parsed->path.empty() && parsed->path != "/") return make_error("etcd url '{}': a path is not expected {}", url, kExpected);
  const bool tls = parsed->tls;
  if (!(timeout_seconds > 0)) return make_error("etcd {}: timeout must be positive, got {}", url, timeout_seconds);
  if (!tls && (!endpoint.ca_file.empty() || !endpoint.cert_file.empty())) {
    return make_error("etcd {}: TLS files given for a plain http:// URL", url);
  }
  if (endpoint.cert_file.empty() != endpoint.key_file.empty()) {
    return make_error("etcd {}: a client certificate needs its key, and a key its certificate", url);
  }
  for (const std::string* file : {&endpoint.ca_file, &endpoint.cert_file, &endpoint.key_file}) {
    if (!file->empty() && ::access(file->c_str(), R_OK) != 0) return make_error("etcd {}: cannot read {}", url, *file);
  }
  if (!endpoint.user.empty() && !tls) {
    std::fprintf(stderr, "mnemo: warning: etcd %s: a password over plain http travels in the clear\n", url.c_str());
  }
  return EtcdClient(endpoint, timeout_seconds);
}

struct EtcdClient::TokenCache {
  std::mutex mutex;
  std::string token;  // guarded by mutex; "" : none taken yet
};

EtcdClient::EtcdClient(EtcdEndpoint endpoint, double timeout_seconds)
    : endpoint_(std::move(endpoint)),
      url_(endpoint_.url),
      timeout_seconds_(timeout_seconds),
      token_(std::make_shared<TokenCache>()) {}

Error EtcdClient::error_for(const std::string& what, const Error& error) const {
  return error.with_context(fmt::format("etcd {}: {}", url_, what));
}

Result<std::string> EtcdClient::auth_token(bool renew) const {
  if (endpoint_.user.empty()) return std::string();
  std::lock_guard lock(token_->mutex);
  if (!renew && !token_->token.empty()) return token_->token;
  const std::string what = "authenticate as " + endpoint_.user;
  const json request = {{"name", endpoint_.user}, {"password", endpoint_.password}};
  MNEMO_ASSIGN_OR_RETURN(std::string body, post_once("/v3/auth/authenticate", request.dump(), what, ""));
  auto parsed = wire::parse_object(body);
  if (!parsed.ok()) return error_for(what, parsed.error());
  const auto token = parsed->find("token");
  if (token == parsed->end() || !token->is_string() || token->get_ref<const std::string&>().empty()) {
    return error_for(what, make_error("reply has no token"));
  }
  token_->token = token->get<std::string>();
  return token_->token;
}

Result<std::string> EtcdClient::post(const std::string& path, const std::string& body, const std::string& what) const {
  MNEMO_ASSIGN_OR_RETURN(std::string token, auth_token(false));
  auto reply = post_once(path, body, what, token);
  if (reply.ok() || token.empty() || !wire::is_stale_token_error(reply.error().message())) return reply;
  MNEMO_ASSIGN_OR_RETURN(std::string renewed, auth_token(true));
  return post_once(path, body, what, renewed);
}

Result<std::string> EtcdClient::post_once(const std::string& path, const std::string& body, const std::string& what,
                                          const std::string& token) const {
  const std::unique_ptr<httplib::Client> client = wire::etcd_connection(endpoint_);
  const auto timeout = std::chrono::duration<double>(timeout_seconds_);
  client->set_connection_timeout(timeout);
  client->set_read_timeout(timeout);
  client->set_write_timeout(timeout);

  int status = 0;
  std::string reply;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  if (!token.empty()) request.set_header("Authorization", token);
  request.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    reply.append(data, size);
    return reply.size() <= kMaxReplyBytes;
  };
  const httplib::Result sent = client->send(request);

  if (status == 0) return error_for(what, make_error(ErrorCode::kUnavailable, "no reply: {}", httplib::to_string(sent.error())));
  if (status != 200) {
    // The gateway ends an error reply with an HTTP trailer ("Grpc-Trailer-Content-Type") that
    // this httplib version rejects as a read error; the body has arrived by then, so the status
    // and etcd's message are reported whatever `sent` says.
    auto parsed = wire::parse_object(reply);
    std::optional<std::string> message = parsed.ok() ? wire::error_message(*parsed) : std::nullopt;
    return error_for(what, make_error("HTTP {}: {}", status, message ? *message : wire::printable(reply.substr(0, 200))));
  }
  if (!sent) return error_for(what, make_error(ErrorCode::kUnavailable, "reply cut short: {}", httplib::to_string(sent.error())));
  return reply;
}

Result<int64_t> EtcdClient::grant_lease(int64_t ttl_seconds) const {
  const std::string what = fmt::format("grant lease (TTL {} s)", ttl_seconds);
  MNEMO_ASSIGN_OR_RETURN(std::string body, post("/v3/lease/grant", json{{"TTL", int64_text(ttl_seconds)}}.dump(), what));
  auto parsed = wire::parse_object(body);
  if (!parsed.ok()) return error_for(what, parsed.error());
  if (auto message = wire::error_message(*parsed)) return error_for(what, make_error("etcd error: {}", *message));
  auto id = wire::int64_field(*parsed, "ID");
  if (!id.ok()) return error_for(what, id.error());
  if (*id <= 0) return error_for(what, make_error("reply has no lease ID"));
  return id;
}

Status EtcdClient::keep_alive(int64_t lease) const {
  const std::string what = fmt::format("keep lease {:x} alive", lease);
  // A gateway stream of one request: the reply is {"result":{...,"TTL":"N"}}, where a TTL of 0
  // (left out, being proto3's zero) means etcd no longer has the lease.
  MNEMO_ASSIGN_OR_RETURN(std::string body, post("/v3/lease/keepalive", json{{"ID", int64_text(lease)}}.dump(), what));
  std::vector<std::string> objects;
  wire::JsonObjectSplitter splitter;
  if (auto split = splitter.feed(body, objects); !split.ok() || objects.empty()) {
    return error_for(what, make_error("reply is not a JSON object: {}", wire::printable(body.substr(0, 80))));
  }
  auto parsed = wire::parse_object(objects.front());
  if (!parsed.ok()) return error_for(what, parsed.error());
  if (auto message = wire::error_message(*parsed)) return error_for(what, make_error("etcd error: {}", *message));
  auto result = parsed->find("result");
  if (result == parsed->end() || !result->is_object()) return error_for(what, make_error("reply has no result"));
  auto ttl = wire::int64_field(*result, "TTL");
  if (!ttl.ok()) return error_for(what, ttl.error());
  if (*ttl <= 0) return error_for(what, make_error(ErrorCode::kNotFound, "lease not found (expired or revoked)"));
  return ok_status();
}

Status EtcdClient::revoke_lease(int64_t lease) const {
  const std::string what = fmt::format("revoke lease {:x}", lease);
  MNEMO_ASSIGN_OR_RETURN(std::string body, post("/v3/lease/revoke", json{{"ID", int64_text(lease)}}.dump(), what));
  if (auto checked = check_no_gateway_error(body); !checked.ok()) return error_for(what, checked.error());
  return ok_status();
}

Status EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) const {
  const std::string what = "put " + wire::printable(key);
  json request = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) request["lease"] = int64_text(lease);
  MNEMO_ASSIGN_OR_RETURN(std::string body, post("/v3/kv/put", request.dump(), what));
  if (auto checked = check_no_gateway_error(body); !checked.ok()) return error_for(what, checked.error());
  return ok_status();
}

Result<std::vector<KeyValue>> EtcdClient::get_prefix(const std::string& prefix, int64_t* revision) const {
  const std::string what = "get prefix " + wire::printable(prefix);
  // etcd rejects an empty key; "\0" is the smallest key, so with range end "\0" it means all keys.
  const std::string first = prefix.empty() ? std::string(1, '\0') : prefix;
  json request = {{"key", base64_encode(first)}, {"range_end", base64_encode(prefix_range_end(prefix))}};
  MNEMO_ASSIGN_OR_RETURN(std::string body, post("/v3/kv/range", request.dump(), what));
  auto kvs = parse_range_reply(body, revision);
  if (!kvs.ok()) return error_for(what, kvs.error());
  return kvs;
}

Result<std::optional<KeyValue>> EtcdClient::get(const std::string& key) const {
  const std::string what = "get " + wire::printable(key);
  MNEMO_ASSIGN_OR_RETURN(std::string body, post("/v3/kv/range", json{{"key", base64_encode(key)}}.dump(), what));
  auto kvs = parse_range_reply(body, nullptr);
  if (!kvs.ok()) return error_for(what, kvs.error());
  if (kvs->empty()) return std::optional<KeyValue>();
  if (kvs->size() > 1 || kvs->front().key != key) return error_for(what, make_error("etcd returned other keys"));
  return std::optional<KeyValue>(std::move(kvs->front()));
}

Status EtcdClient::delete_key(const std::string& key) const {
  const std::string what = "delete " + wire::printable(key);
  MNEMO_ASSIGN_OR_RETURN(std::string body, post("/v3/kv/deleterange", json{{"key", base64_encode(key)}}.dump(), what));
  if (auto checked = check_no_gateway_error(body); !checked.ok()) return error_for(what, checked.error());
  return ok_status();
}

}  // namespace mnemo::cluster
