// InstanceInfo, the value of an instance's membership key, as JSON.
#include "cluster/membership.h"
#include "util/bounded_json.h"

#include <limits>

#include <nlohmann/json.hpp>

namespace mnemo::cluster {
namespace {

using nlohmann::json;


Status read_string(const json& object, const char* name, std::string& out) {
  auto field = object.find(name);
  if (field == object.end()) return ok_status();  // keeps the default
  if (!field->is_string()) return make_error("{}: expected a string, got {}", name, field->type_name());
  out = field->get<std::string>();
  return ok_status();
}

Status read_count(const json& object, const char* name, int64_t& out) {
  auto field = object.find(name);
  if (field == object.end()) return ok_status();
  // nlohmann stores a non-negative JSON integer as unsigned and a negative one as signed.
  if (field->is_number_unsigned()) {
    if (field->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return make_error("{}: {} is out of the int64 range", name, field->get<uint64_t>());
    }
    out = static_cast<int64_t>(field->get<uint64_t>());
    return ok_status();
  }
  if (field->is_number_integer()) return make_error("{}: must be >= 0, got {}", name, field->get<int64_t>());
  return make_error("{}: expected a non-negative int64, got {}", name,
                    field->is_number() ? field->dump() : std::string(field->type_name()));
}

}  // namespace

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kColocated: return "colocated";
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
  }
  return "colocated";
}

std::optional<Role> role_named(std::string_view name) {
  for (Role role : {Role::kColocated, Role::kPrefill, Role::kDecode}) {
    if (role_name(role) == name) return role;
  }
  return std::nullopt;
}

std::string InstanceInfo::to_json() const {
  json out = {{"id", id},
                    {"address", address},
                    {"role", role_name(role)},
                    {"transfer_endpoint", transfer_endpoint},
                    {"capacity_tokens", capacity_tokens},
                    {"cache_capacity_tokens", cache_capacity_tokens},
                    {"queued_requests", queued_requests},
                    {"queued_tokens", queued_tokens},
                    {"kv_bytes_per_token", kv_bytes_per_token},
                    {"prompt_fingerprint", prompt_fingerprint},
                    {"state_id", state_id}};
  if (!cost_profile.empty()) {
    const json profile = parse_bounded_json_or_discarded(cost_profile);
    if (profile.is_object()) out["cost_profile"] = profile;  // else left out: readers would refuse it
  }
  // Replace, not throw, should a string not be UTF-8: the value is for other instances to read.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<InstanceInfo> InstanceInfo::from_json(std::string_view text) {
  const json parsed = parse_bounded_json_or_discarded(text);
  if (parsed.is_discarded()) return make_error("instance info is not JSON");
  if (!parsed.is_object()) return make_error("instance info is not a JSON object");
  InstanceInfo info;
  std::string role = std::string(role_name(info.role));
  auto fields = [&]() -> Status {
    MNEMO_RETURN_IF_ERROR(read_string(parsed, "id", info.id));
    MNEMO_RETURN_IF_ERROR(read_string(parsed, "address", info.address));
    MNEMO_RETURN_IF_ERROR(read_string(parsed, "role", role));
    MNEMO_RETURN_IF_ERROR(read_string(parsed, "transfer_endpoint", info.transfer_endpoint));
    MNEMO_RETURN_IF_ERROR(read_string(parsed, "prompt_fingerprint", info.prompt_fingerprint));
    MNEMO_RETURN_IF_ERROR(read_string(parsed, "state_id", info.state_id));
    MNEMO_RETURN_IF_ERROR(read_count(parsed, "capacity_tokens", info.capacity_tokens));
    MNEMO_RETURN_IF_ERROR(read_count(parsed, "cache_capacity_tokens", info.cache_capacity_tokens));
    MNEMO_RETURN_IF_ERROR(read_count(parsed, "queued_requests", info.queued_requests));
    MNEMO_RETURN_IF_ERROR(read_count(parsed, "queued_tokens", info.queued_tokens));
    MNEMO_RETURN_IF_ERROR(read_count(parsed, "kv_bytes_per_token", info.kv_bytes_per_token));
    if (const auto profile = parsed.find("cost_profile"); profile != parsed.end()) {
      if (!profile->is_object()) return make_error("cost_profile: expected an object, got {}", profile->type_name());
      info.cost_profile = profile->dump(-1, ' ', false, json::error_handler_t::replace);
    }
    if (info.id.empty()) return make_error("id: missing or empty");
    if (info.address.empty()) return make_error("address: missing or empty");
    const std::optional<Role> known = role_named(role);
    if (!known) return make_error("role: \"{}\" is not colocated, prefill or decode", role);
    info.role = *known;
    return ok_status();
  }();
  if (!fields.ok()) return fields.error().with_context(info.id.empty() ? "instance info" : "instance " + info.id);
  return info;
}

}  // namespace mnemo::cluster
