// The cluster secret (--cluster-secret-file): a key every instance, worker and router of one
// cluster holds. Internal HTTP calls (auth/peer_signature.h), KV transfer messages and member
// records in etcd carry MACs under it, so that reaching a port or writing to etcd is not enough
// to be a member.
#pragma once

#include <string>

#include "util/result.h"

namespace mnemo::auth {

// At least this many bytes of key material (after trimming the file's surrounding whitespace).
inline constexpr size_t kMinClusterSecretBytes = 32;

// The secret in `path`: its content with surrounding whitespace trimmed; an Error if it cannot
// be read or is shorter than kMinClusterSecretBytes.
Result<std::string> read_cluster_secret(const std::string& path);

// Whether `host` (a name or address, without port) is on the loopback interface: "localhost",
// 127.0.0.0/8 or ::1. A cluster without a secret runs only on such addresses.
bool is_loopback_host(const std::string& host);
// The host of a URL or host:port ("http://127.0.0.1:2379" -> "127.0.0.1", "[::1]:80" -> "::1").
std::string host_of(const std::string& address);

}  // namespace mnemo::auth
