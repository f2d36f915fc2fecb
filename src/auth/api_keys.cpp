#include "auth/api_keys.h"

#include <fstream>
#include <sstream>

#include "auth/crypto.h"

namespace mnemo::auth {
namespace {

std::string tenant_of_key(std::string_view key) { return "key-" + to_hex(sha256(key)).substr(0, 16); }

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

}  // namespace

bool valid_tenant_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<ApiKeys> ApiKeys::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("API key file {}: cannot be read", path);
  std::ostringstream text;
  text << in.rdbuf();
  return from_text(text.str(), path);
}

Result<ApiKeys> ApiKeys::from_text(std::string_view text, std::string_view source) {
  ApiKeys keys;
  size_t line_number = 0;
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    const auto fields = fields_of(line);
    if (fields.empty() || fields[0].front() == '#') continue;
    if (fields.size() > 2) return make_error("API key file {}, line {}: expected `KEY` or `TENANT KEY`", source, line_number);
    Entry entry;
    entry.key = std::string(fields.back());
    entry.tenant = fields.size() == 2 ? std::string(fields[0]) : tenant_of_key(entry.key);
    if (!valid_tenant_name(entry.tenant)) {
      return make_error("API key file {}, line {}: a tenant name is 1-64 characters of [A-Za-z0-9._-]", source, line_number);
    }
    for (const Entry& e : keys.entries_) {
      if (e.key == entry.key) return make_error("API key file {}, line {}: the key is listed twice", source, line_number);
    }
    keys.entries_.push_back(std::move(entry));
  }
  if (keys.entries_.empty()) return make_error("API key file {}: holds no key", source);
  return keys;
}

ApiKeys ApiKeys::single(std::string key) {
  ApiKeys keys;
  std::string tenant = tenant_of_key(key);
  keys.entries_.push_back({std::move(tenant), std::move(key)});
  return keys;
}

Status ApiKeys::merge(const ApiKeys& other) {
  for (const Entry& entry : other.entries_) {
    for (const Entry& e : entries_) {
      if (e.key == entry.key) return make_error("an API key is given twice");
    }
    entries_.push_back(entry);
  }
  return ok_status();
}

std::optional<std::string> ApiKeys::tenant_of(std::string_view key) const {
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {
    // Every key is compared, matched or not, so the time tells nothing of which one matched.
    const bool equal = constant_time_equal(entry.key, key);
    if (equal && match == nullptr) match = &entry;
  }
  if (match == nullptr || key.empty()) return std::nullopt;
  return match->tenant;
}

std::optional<std::string> ApiKeys::tenant_of_authorization(std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) return std::nullopt;
  return tenant_of(authorization.substr(kBearer.size()));
}

}  // namespace mnemo::auth
