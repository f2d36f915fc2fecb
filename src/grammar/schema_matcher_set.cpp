#include "grammar/schema_matcher_set.h"

#include <algorithm>

namespace mnemo::grammar {

SchemaMatcherSet::SchemaMatcherSet(const CompiledSchema* schema) { add_resolved(SchemaMatcher(schema), 0); }

void SchemaMatcherSet::add(const SchemaMatcher& m) {
  // The same state reached twice (alternatives that closed alike) is kept once.
  for (int i = 0; i < count_; ++i) {
    if (std::memcmp(&at(i), &m, sizeof(SchemaMatcher)) == 0) return;
  }
  if (count_ == kMaxLive) return;
  new (storage_ + static_cast<size_t>(count_) * sizeof(SchemaMatcher)) SchemaMatcher(m);
  ++count_;
}

void SchemaMatcherSet::add_resolved(const SchemaMatcher& m, int depth) {
  const int32_t next = m.next_value_node();
  const CompiledSchema& schema = *m.schema();
  if (next < 0 || schema.nodes[static_cast<size_t>(next)].kind != SchemaNode::Kind::kAnyOf) return add(m);
  if (depth > 16) return;  // anyOf nested in anyOf without end cannot be compiled; a bound all the same
  for (const int32_t alternative : schema.nodes[static_cast<size_t>(next)].alternatives) {
    SchemaMatcher fork = m;
    fork.choose(alternative);
    add_resolved(fork, depth + 1);
  }
}

bool SchemaMatcherSet::feed(uint8_t byte) {
  SchemaMatcherSet next;
  for (int i = 0; i < count_; ++i) {
    SchemaMatcher m = at(i);
    if (m.advance(byte)) next.add_resolved(m, 0);
  }
  if (next.count_ == 0) return false;
  *this = next;
  return true;
}

bool SchemaMatcherSet::complete() const {
  for (int i = 0; i < count_; ++i) {
    if (at(i).complete()) return true;
  }
  return false;
}

bool SchemaMatcherSet::in_string() const {
  // All of them: a plain token is then allowed exactly when one of them takes it (string_room).
  for (int i = 0; i < count_; ++i) {
    if (!at(i).in_string()) return false;
  }
  return count_ > 0;
}

int32_t SchemaMatcherSet::string_room() const {
  int32_t room = 0;
  for (int i = 0; i < count_; ++i) {
    if (at(i).in_string()) room = std::max(room, at(i).string_room());
  }
  return room;
}

}  // namespace mnemo::grammar
