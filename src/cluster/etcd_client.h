// A small etcd v3 client over etcd's JSON gRPC gateway (HTTP/1.1 POST /v3/...), enough for
// cluster membership: leases, put/get/delete, and a prefix watch. The gateway speaks proto3 JSON:
// keys and values are base64, int64s are strings, and zero-valued fields are left out (a missing
// "lease" is 0, a missing "value" is empty, a PUT event has no "type").
//
// Failure behaviour: every call returns an Error naming the server, the operation and the key,
// e.g. "etcd http://127.0.0.1:2379: put /mnemo/default/instances/a: HTTP 404: etcdserver:
// requested lease not found". Nothing is retried here; callers (Registration, MemberWatcher)
// decide what to retry. No call throws.
//
// Thread-safety: an EtcdClient is immutable after create(); each call opens its own connection,
// so one client may be used from several threads at once. Calls are rare (lease ticks, resyncs),
// so the connection set-up on every call costs nothing that matters.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::cluster {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease = 0;  // 0: the key has no lease
};

// How to reach etcd: its URL, and what a secured etcd asks for. Over https the server's
// certificate is verified (against ca_file, or the system's CAs); cert_file/key_file answer a
// server that asks clients for one. With a user, every call carries a token from etcd's own auth
// (/v3/auth/authenticate), taken again when etcd says it is no longer valid.
struct EtcdEndpoint {
  EtcdEndpoint(std::string endpoint_url = "") : url(std::move(endpoint_url)) {}  // NOLINT: a plain URL is an endpoint
  EtcdEndpoint(const char* endpoint_url) : url(endpoint_url) {}                 // NOLINT
  std::string url;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string user;
  std::string password;
};

class EtcdClient {
 public:
  // url like "http://127.0.0.1:2379" or "https://etcd.internal:2379"; validates the form (scheme,
  // host, port) and the TLS files' presence, does not connect. timeout_seconds bounds connecting
  // and each read of a unary call.
  static Result<EtcdClient> create(const EtcdEndpoint& endpoint, double timeout_seconds = 2.0);

  // --- Leases ---
  Result<int64_t> grant_lease(int64_t ttl_seconds) const;  // the lease id; etcd may raise the TTL to its minimum
  // One refresh. An Error mentioning "lease not found" if the lease is gone (expired or revoked).
  Status keep_alive(int64_t lease) const;
  Status revoke_lease(int64_t lease) const;  // deletes the keys attached to it at once

  // --- Keys (arbitrary bytes) ---
  Status put(const std::string& key, const std::string& value, int64_t lease = 0) const;
  // The keys starting with prefix, in key order. revision: the store's revision at the read, the
  // point from which a watch continues without a gap (watch from *revision + 1).
  Result<std::vector<KeyValue>> get_prefix(const std::string& prefix, int64_t* revision = nullptr) const;
  Result<std::optional<KeyValue>> get(const std::string& key) const;
  Status delete_key(const std::string& key) const;  // deleting a missing key is not an error

  // --- Watch ---
  struct WatchEvent {
    bool deleted = false;
    KeyValue kv;  // for a delete: key and mod_revision only
  };
  // Blocks, calling on_event (on the calling thread, in revision order) for each put/delete under
  // prefix from start_revision on, until `stop` returns true (checked every ~100 ms; returns OK)
  // or the stream breaks: etcd unreachable or gone, the start revision compacted, or no data for
  // kWatchIdleLimitSeconds (catches a half-open connection; an idle watch is cheap to re-make).
  // Then it returns an Error and the caller resyncs with get_prefix and a new watch.
  Status watch_prefix(const std::string& prefix, int64_t start_revision,
                      const std::function<void(const WatchEvent&)>& on_event,
                      const std::function<bool()>& stop) const;

  const std::string& url() const { return url_; }

  static constexpr double kWatchIdleLimitSeconds = 30.0;

 private:
  struct TokenCache;
  EtcdClient(EtcdEndpoint endpoint, double timeout_seconds);
  // POSTs a JSON body to path and returns the body of a 200 reply; any other status becomes an
  // Error carrying the gateway's message. `what` names the operation in errors. With a user, an
  // expired token is renewed and the call made once more.
  Result<std::string> post(const std::string& path, const std::string& body, const std::string& what) const;
  Result<std::string> post_once(const std::string& path, const std::string& body, const std::string& what,
                                const std::string& token) const;
  // The auth token ("" without a user); `renew`: take a new one.
  Result<std::string> auth_token(bool renew) const;
  Error error_for(const std::string& what, const Error& error) const;

  EtcdEndpoint endpoint_;
  std::string url_;
  double timeout_seconds_ = 2.0;
  std::shared_ptr<TokenCache> token_;  // shared by copies: one token per endpoint
};

// Exposed for unit tests and fuzzing: decode one gateway JSON reply body. Errors name what is
// wrong; never throw, never crash on garbage.
Result<std::vector<KeyValue>> parse_range_reply(std::string_view body, int64_t* revision);
// One object of the watch stream: {"result":{"header":...,"created":true}} or
// {"result":{...,"events":[...]}}. A cancelled watch (e.g. its start revision was compacted) or
// an {"error":...} object is an Error.
Result<std::vector<EtcdClient::WatchEvent>> parse_watch_chunk(std::string_view json_object);

// Standard base64 with padding (RFC 4648 section 4), as the gateway writes bytes.
std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);

// The end of the key range [prefix, end) that holds exactly the keys starting with prefix: the
// prefix with its last byte below 0xff incremented (and what follows it dropped); "\0" (etcd's
// "to the end of the key space") when there is no such byte.
std::string prefix_range_end(std::string_view prefix);

}  // namespace mnemo::cluster
