// The router's global prompt trees (SPEC M7): for each instance, which conversation prefixes it
// has seen, so a request goes where most of its prompt is already cached. Device-free metadata.
//
// Keys are over the request's canonical text (roles and contents, in order), not tokens: the
// router does not tokenize. The text is cut into fixed-size byte chunks and each chunk is keyed
// by a hash chained from its predecessors, so a key stands for a whole prefix, as a radix path
// does. Entries not refreshed within the TTL expire: an instance's own eviction is then assumed
// to have dropped them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mnemo::router {

class PromptTree {
 public:
  explicit PromptTree(size_t chunk_bytes = 64, double ttl_seconds = 600);

  // `instance` holds (or will hold) the KV of `text`'s whole chunks, as of `now`.
  void record(const std::string& instance, std::string_view text, double now);
  // Bytes of `text`'s leading whole chunks that `instance` holds (0 if none or expired).
  size_t matched_bytes(const std::string& instance, std::string_view text, double now) const;
  // An instance left the cluster: its entries go.
  void forget_instance(const std::string& instance);
  // Drops expired entries (the lookups ignore them anyway; this bounds memory).
  void expire(double now);

  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t size(const std::string& instance) const;  // live entries, for tests and metrics
  std::vector<std::string> instances() const;

 private:
  // The chained key of every whole chunk of `text`, in order.
  std::vector<uint64_t> chunk_keys(std::string_view text) const;

  size_t chunk_bytes_;
  double ttl_seconds_;
  // instance -> (prefix key -> last refresh)
  std::unordered_map<std::string, std::unordered_map<uint64_t, double>> entries_;
};

}  // namespace mnemo::router
