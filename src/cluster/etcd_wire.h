// Internal to src/cluster: the JSON shapes of etcd's gRPC gateway, shared by the client (which
// writes requests and reads unary replies) and the reply parsers (etcd_wire.cpp). Not for
// callers outside the module.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace mnemo::cluster::wire {

// Parses a reply body that must be a JSON object; never throws.
Result<nlohmann::json> parse_object(std::string_view body);

// The gateway's error text when body is an error object: {"error":"...","message":"...",
// "code":N} for a failed call, {"error":{"message":"...",...}} inside a stream.
std::optional<std::string> error_message(const nlohmann::json& reply);

// An int64 field of a proto3 JSON object: a decimal string (what the gateway writes) or a JSON
// integer; absent means 0 (proto3 leaves zero values out).
Result<int64_t> int64_field(const nlohmann::json& object, const char* name);

// The store revision of a reply's "header" (a reply without one is malformed).
Result<int64_t> header_revision(const nlohmann::json& reply);

// Renders a key for an error message: printable ASCII as is, other bytes as \xNN.
std::string printable(std::string_view bytes);

// Splits the watch stream, a sequence of JSON objects (the gateway separates them with newlines,
// but nothing here relies on that), into whole objects as bytes arrive in arbitrary pieces.
class JsonObjectSplitter {
 public:
  // A stream object larger than this is an error rather than a reason to grow without bound.
  static constexpr size_t kMaxObjectBytes = size_t{64} << 20;

  // Appends bytes; the objects they complete go to `objects`. An Error (bytes outside an object
  // that are not white space, or an oversized object) leaves the splitter unusable.
  Status feed(std::string_view bytes, std::vector<std::string>& objects);

 private:
  std::string current_;  // the object being read, from its '{'
  int depth_ = 0;        // nesting of {} and [] outside strings; 0 between objects
  bool in_string_ = false;
  bool escaped_ = false;  // the previous byte inside a string was an unescaped backslash
};

}  // namespace mnemo::cluster::wire
