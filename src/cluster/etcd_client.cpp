// Unary calls of the etcd client: one short HTTP POST each (the watch is in etcd_watch.cpp).
#include "cluster/etcd_client.h"

#include <charconv>
#include <chrono>

#include <httplib.h>

#include "cluster/etcd_wire.h"

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

Result<EtcdClient> EtcdClient::create(const std::string& url, double timeout_seconds) {
  auto bad = [&](std::string_view why) { return make_error("etcd url \"{}\": {} (expected http://host:port)", url, why); };
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) return bad("scheme must be http");
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string_view host = rest.substr(0, colon);
  const std::string_view port_text = rest.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);  // IPv6
  if (host.empty()) return bad("no host");
  if (host.find_first_of("/?#@[] ") != std::string_view::npos) return bad("malformed host");
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return bad("port must be a number in 1..65535");
  }
  if (!(timeout_seconds > 0)) return make_error("etcd {}: timeout must be positive, got {}", url, timeout_seconds);
  return EtcdClient(url, std::string(host), port, timeout_seconds);
}

Error EtcdClient::error_for(const std::string& what, const Error& error) const {
  return error.with_context(fmt::format("etcd {}: {}", url_, what));
}

Result<std::string> EtcdClient::post(const std::string& path, const std::string& body, const std::string& what) const {
  httplib::Client client(host_, port_);
  const auto timeout = std::chrono::duration<double>(timeout_seconds_);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);

  int status = 0;
  std::string reply;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  request.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    reply.append(data, size);
    return reply.size() <= kMaxReplyBytes;
  };
  const httplib::Result sent = client.send(request);

  if (status == 0) return error_for(what, make_error("no reply: {}", httplib::to_string(sent.error())));
  if (status != 200) {
    // The gateway ends an error reply with an HTTP trailer ("Grpc-Trailer-Content-Type") that
    // this httplib version rejects as a read error; the body has arrived by then, so the status
    // and etcd's message are reported whatever `sent` says.
    auto parsed = wire::parse_object(reply);
    std::optional<std::string> message = parsed.ok() ? wire::error_message(*parsed) : std::nullopt;
    return error_for(what, make_error("HTTP {}: {}", status, message ? *message : wire::printable(reply.substr(0, 200))));
  }
  if (!sent) return error_for(what, make_error("reply cut short: {}", httplib::to_string(sent.error())));
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
  if (*ttl <= 0) return error_for(what, make_error("lease not found (expired or revoked)"));
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
