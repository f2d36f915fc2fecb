// API keys and the tenants they stand for. A tenant owns what it stores (Responses API
// conversations) and its KV cache namespace; a key is only its current credential, so a key can
// rotate without orphaning the tenant's conversations.
//
// Key file (--api-key-file): one key per line, `KEY` or `TENANT KEY`; blank lines and lines
// starting with '#' are skipped. A line with a key alone is its own tenant, named after a hash
// of the key ("key-" and 16 hex digits: never the key itself). Tenant names are 1-64 characters
// of [A-Za-z0-9._-]. Without keys the server is single-tenant (the tenant "").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::auth {

// Whether `name` may name a tenant (1-64 characters of [A-Za-z0-9._-]).
bool valid_tenant_name(std::string_view name);

class ApiKeys {
 public:
  ApiKeys() = default;
  static Result<ApiKeys> from_file(const std::string& path);
  static Result<ApiKeys> from_text(std::string_view text, std::string_view source);
  // A single key, its own tenant (--api-key).
  static ApiKeys single(std::string key);
  // Both sets' keys; an Error if a key appears twice.
  Status merge(const ApiKeys& other);

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // The tenant whose key `key` is, comparing against every key in constant time (the time does
  // not tell which key, or how much of one, matched); nullopt for no match.
  std::optional<std::string> tenant_of(std::string_view key) const;
  // The tenant of an "Authorization: Bearer KEY" header value (nullopt: missing or no match).
  std::optional<std::string> tenant_of_authorization(std::string_view authorization) const;

 private:
  struct Entry {
    std::string tenant;
    std::string key;
  };
  std::vector<Entry> entries_;
};

}  // namespace mnemo::auth
