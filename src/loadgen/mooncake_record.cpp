#include "loadgen/mooncake_record.h"

#include <nlohmann/json.hpp>

namespace mnemo::loadgen {

Result<MooncakeRecord> parse_mooncake_record(std::string_view line) {
  const auto object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!object.is_object() || !object.contains("timestamp") || !object["timestamp"].is_number() ||
      !object.contains("hash_ids") || !object["hash_ids"].is_array()) {
    return make_error(R"(expected {{"timestamp": ms, "hash_ids": [...]}})");
  }
  MooncakeRecord r;
  r.timestamp_ms = object["timestamp"].get<double>();
  for (const auto& id : object["hash_ids"]) {
    if (!id.is_number_integer()) return make_error("hash ids must be integers");
    r.hash_ids.push_back(id.get<int64_t>());
  }
  for (const auto& [field, out] : {std::pair{"input_length", &r.input_length}, std::pair{"output_length", &r.output_length}}) {
    const auto it = object.find(field);
    if (it == object.end()) continue;
    if (!it->is_number_integer()) return make_error("'{}' must be an integer", field);
    *out = it->get<int64_t>();
  }
  return r;
}

}  // namespace mnemo::loadgen
