// Decoding etcd gateway replies: every field is type-checked before it is read (nlohmann's
// accessors throw on a wrong type), so garbage yields an Error that names the field.
#include "cluster/etcd_wire.h"

#include <charconv>
#include <limits>

#include "cluster/etcd_client.h"
#include "util/bounded_json.h"

namespace mnemo::cluster {
namespace wire {

using nlohmann::json;

Result<json> parse_object(std::string_view body) {
  json parsed = parse_bounded_json_or_discarded(body);
  if (parsed.is_discarded()) return make_error("reply is not JSON: {}", printable(body.substr(0, 80)));
  if (!parsed.is_object()) return make_error("reply is not a JSON object: {}", printable(body.substr(0, 80)));
  return parsed;
}

std::optional<std::string> error_message(const json& reply) {
  auto error = reply.find("error");
  if (error == reply.end()) return std::nullopt;
  auto message = reply.find("message");
  if (message != reply.end() && message->is_string()) return message->get<std::string>();
  if (error->is_string()) return error->get<std::string>();
  if (error->is_object()) {
    auto inner = error->find("message");
    if (inner != error->end() && inner->is_string()) return inner->get<std::string>();
  }
  return error->dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<int64_t> int64_field(const json& object, const char* name) {
  auto field = object.find(name);
  if (field == object.end() || field->is_null()) return int64_t{0};
  if (field->is_number_unsigned()) {
    if (field->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return make_error("{}: {} is out of the int64 range", name, field->get<uint64_t>());
    }
    return static_cast<int64_t>(field->get<uint64_t>());
  }
  if (field->is_number_integer()) return field->get<int64_t>();
  if (!field->is_string()) return make_error("{}: expected an int64 (a decimal string), got {}", name, field->type_name());
  const std::string& text = field->get_ref<const std::string&>();
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return make_error("{}: \"{}\" is not an int64", name, printable(text.substr(0, 40)));
  }
  return value;
}

Result<int64_t> header_revision(const json& reply) {
  auto header = reply.find("header");
  if (header == reply.end() || !header->is_object()) return make_error("reply has no header");
  auto revision = int64_field(*header, "revision");
  if (!revision.ok()) return revision.error().with_context("header");
  return revision;
}

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\') {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", byte);
    }
  }
  return out;
}

Status JsonObjectSplitter::feed(std::string_view bytes, std::vector<std::string>& objects) {
  for (char c : bytes) {
    if (depth_ == 0) {
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
      if (c != '{') return make_error("watch stream: expected a JSON object, got byte 0x{:02x}", static_cast<unsigned char>(c));
    }
    current_ += c;
    if (current_.size() > kMaxObjectBytes) return make_error("watch stream: an object exceeds {} bytes", kMaxObjectBytes);
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      objects.push_back(std::move(current_));
      current_.clear();
    }
  }
  return ok_status();
}

}  // namespace wire

namespace {

using nlohmann::json;

Result<std::string> bytes_field(const json& object, const char* name) {
  auto field = object.find(name);
  if (field == object.end() || field->is_null()) return std::string();
  if (!field->is_string()) return make_error("{}: expected a base64 string, got {}", name, field->type_name());
  auto decoded = base64_decode(field->get_ref<const std::string&>());
  if (!decoded.ok()) return decoded.error().with_context(name);
  return decoded;
}

// One mvccpb.KeyValue: {"key":b64,"value":b64,"mod_revision":"N","lease":"N",...}.
Result<KeyValue> parse_key_value(const json& kv) {
  if (!kv.is_object()) return make_error("expected an object, got {}", kv.type_name());
  if (!kv.contains("key")) return make_error("no key");
  KeyValue out;
  MNEMO_ASSIGN_OR_RETURN(out.key, bytes_field(kv, "key"));
  if (out.key.empty()) return make_error("empty key");
  MNEMO_ASSIGN_OR_RETURN(out.value, bytes_field(kv, "value"));
  MNEMO_ASSIGN_OR_RETURN(out.mod_revision, wire::int64_field(kv, "mod_revision"));
  MNEMO_ASSIGN_OR_RETURN(out.lease, wire::int64_field(kv, "lease"));
  return out;
}

Result<EtcdClient::WatchEvent> parse_event(const json& event) {
  if (!event.is_object()) return make_error("expected an object, got {}", event.type_name());
  EtcdClient::WatchEvent out;
  auto type = event.find("type");
  if (type != event.end()) {
    // proto3 JSON leaves the default enum value (PUT = 0) out; etcd writes "DELETE", and a
    // gateway configured to write enums as numbers would write 0 or 1.
    if (*type == "PUT" || *type == 0) {
      out.deleted = false;
    } else if (*type == "DELETE" || *type == 1) {
      out.deleted = true;
    } else {
      return make_error("type: unknown event type {}", type->dump(-1, ' ', false, json::error_handler_t::replace));
    }
  }
  auto kv = event.find("kv");
  if (kv == event.end()) return make_error("no kv");
  auto parsed = parse_key_value(*kv);
  if (!parsed.ok()) return parsed.error().with_context("kv");
  out.kv = std::move(parsed).value();
  return out;
}

}  // namespace

Result<std::vector<KeyValue>> parse_range_reply(std::string_view body, int64_t* revision) {
  MNEMO_ASSIGN_OR_RETURN(json reply, wire::parse_object(body));
  if (auto message = wire::error_message(reply)) return make_error("etcd error: {}", *message);
  MNEMO_ASSIGN_OR_RETURN(int64_t header_revision, wire::header_revision(reply));
  std::vector<KeyValue> out;
  auto kvs = reply.find("kvs");
  if (kvs != reply.end() && !kvs->is_null()) {
    if (!kvs->is_array()) return make_error("kvs: expected an array, got {}", kvs->type_name());
    out.reserve(kvs->size());
    for (size_t i = 0; i < kvs->size(); ++i) {
      auto kv = parse_key_value((*kvs)[i]);
      if (!kv.ok()) return kv.error().with_context(fmt::format("kvs[{}]", i));
      out.push_back(std::move(kv).value());
    }
  }
  if (revision != nullptr) *revision = header_revision;
  return out;
}

Result<std::vector<EtcdClient::WatchEvent>> parse_watch_chunk(std::string_view json_object) {
  MNEMO_ASSIGN_OR_RETURN(json reply, wire::parse_object(json_object));
  if (auto message = wire::error_message(reply)) return make_error("etcd error: {}", *message);
  auto result = reply.find("result");
  if (result == reply.end() || !result->is_object()) return make_error("watch reply has no result object");
  auto canceled = result->find("canceled");
  if (canceled != result->end() && *canceled == true) {
    MNEMO_ASSIGN_OR_RETURN(int64_t compacted, wire::int64_field(*result, "compact_revision"));
    auto reason = result->find("cancel_reason");
    std::string why = reason != result->end() && reason->is_string() ? reason->get<std::string>() : "";
    if (compacted > 0) why = fmt::format("history before revision {} was compacted", compacted);
    return make_error("watch cancelled by etcd{}{}", why.empty() ? "" : ": ", why);
  }
  std::vector<EtcdClient::WatchEvent> out;
  auto events = result->find("events");
  if (events == result->end() || events->is_null()) return out;  // "created", or a progress notice
  if (!events->is_array()) return make_error("events: expected an array, got {}", events->type_name());
  out.reserve(events->size());
  for (size_t i = 0; i < events->size(); ++i) {
    auto event = parse_event((*events)[i]);
    if (!event.ok()) return event.error().with_context(fmt::format("events[{}]", i));
    out.push_back(std::move(event).value());
  }
  return out;
}

}  // namespace mnemo::cluster
