// The value of a member's etcd key: its InstanceInfo as JSON, sealed under the cluster secret when
// the cluster has one, so that whoever can write to etcd but does not hold the secret cannot add
// a member or redirect one (client traffic, API keys included, would follow the address).
//
//   sealed: {"record": "<InstanceInfo JSON>", "mac": hex HMAC-SHA-256(secret,
//            "mnemo-member-v1\n" + key + "\n" + record)}
// The key is under the MAC, so a sealed record cannot be replayed under another member's key.
// Without a secret (a loopback-only cluster) the value is the plain JSON.
#pragma once

#include <string>
#include <string_view>

#include "cluster/membership.h"
#include "util/result.h"

namespace mnemo::cluster {

std::string seal_member_record(std::string_view key, const InstanceInfo& info, const std::string& cluster_secret);
// The member a key's value describes; an Error if it is malformed or, with a secret, unsealed or
// sealed under another secret or key.
Result<InstanceInfo> open_member_record(std::string_view key, std::string_view value, const std::string& cluster_secret);

}  // namespace mnemo::cluster
