#include "cluster/member_record.h"

#include <nlohmann/json.hpp>

#include "auth/crypto.h"
#include "util/bounded_json.h"

namespace mnemo::cluster {
namespace {

constexpr size_t kMaxRecordBytes = 64 << 10;  // a record is a few hundred bytes; a cost profile a few KiB

std::string mac_of(std::string_view key, std::string_view record, const std::string& secret) {
  return auth::to_hex(auth::hmac_sha256(secret, {"mnemo-member-v1\n", key, "\n", record}));
}

}  // namespace

std::string seal_member_record(std::string_view key, const InstanceInfo& info, const std::string& cluster_secret) {
  std::string record = info.to_json();
  if (cluster_secret.empty()) return record;
  const std::string mac = mac_of(key, record, cluster_secret);
  return nlohmann::json{{"record", std::move(record)}, {"mac", mac}}.dump();
}

Result<InstanceInfo> open_member_record(std::string_view key, std::string_view value, const std::string& cluster_secret) {
  if (cluster_secret.empty()) return InstanceInfo::from_json(value);
  const nlohmann::json sealed = parse_bounded_json_or_discarded(value, JsonLimits{kMaxRecordBytes, 4});
  if (!sealed.is_object() || !sealed.contains("record") || !sealed["record"].is_string() || !sealed.contains("mac") ||
      !sealed["mac"].is_string()) {
    return make_error("not sealed under the cluster secret");
  }
  const std::string& record = sealed["record"].get_ref<const std::string&>();
  if (!auth::constant_time_equal(mac_of(key, record, cluster_secret), sealed["mac"].get_ref<const std::string&>())) {
    return make_error("sealed under another secret or key (forged?)");
  }
  return InstanceInfo::from_json(record);
}

}  // namespace mnemo::cluster
