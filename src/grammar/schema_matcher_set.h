// The acceptor of a schema with anyOf: every alternative still possible followed at once, as a
// small set of SchemaMatchers (a nondeterministic matcher made of deterministic ones). Where a
// value of an anyOf node begins, each matcher forks into one per alternative; a byte keeps the
// matchers that accept it. Bounded at kMaxLive: forks past it are dropped, which only narrows
// what may be written (every matcher kept is on a path to a whole document).
//
// Copies copy only the live matchers (a token mask copies per byte it tries).
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <string_view>
#include <type_traits>

#include "grammar/schema_matcher.h"

namespace mnemo::grammar {

class SchemaMatcherSet {
 public:
  static constexpr int kMaxLive = 16;
  static_assert(std::is_trivially_copyable_v<SchemaMatcher>);

  explicit SchemaMatcherSet(const CompiledSchema* schema);
  SchemaMatcherSet(const SchemaMatcherSet& other) : count_(other.count_) { copy_from(other); }
  SchemaMatcherSet& operator=(const SchemaMatcherSet& other) {
    count_ = other.count_;
    copy_from(other);
    return *this;
  }

  bool feed(uint8_t byte);
  bool feed(std::string_view bytes) { return feed_each(*this, bytes); }
  bool advance(uint8_t byte) { return feed(byte); }
  bool complete() const;
  // Every matcher is inside a string that takes plain content.
  bool in_string() const;
  // The most characters a plain token may add: the roomiest of the matchers inside a string.
  int32_t string_room() const;
  int live() const { return count_; }

 private:
  SchemaMatcherSet() = default;
  SchemaMatcher& at(int i) { return *std::launder(reinterpret_cast<SchemaMatcher*>(storage_ + static_cast<size_t>(i) * sizeof(SchemaMatcher))); }
  const SchemaMatcher& at(int i) const {
    return *std::launder(reinterpret_cast<const SchemaMatcher*>(storage_ + static_cast<size_t>(i) * sizeof(SchemaMatcher)));
  }
  void copy_from(const SchemaMatcherSet& other) {
    std::memcpy(storage_, other.storage_, static_cast<size_t>(count_) * sizeof(SchemaMatcher));
  }
  // Adds `m`, forked into its alternatives while the value it expects next is an anyOf.
  void add_resolved(const SchemaMatcher& m, int depth);
  void add(const SchemaMatcher& m);

  int count_ = 0;
  alignas(SchemaMatcher) unsigned char storage_[kMaxLive * sizeof(SchemaMatcher)];
};

}  // namespace mnemo::grammar
