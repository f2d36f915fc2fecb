#include "grammar/output_constraint.h"

#include <algorithm>
#include <cstdint>

namespace mnemo::grammar {

TokenBytes::TokenBytes(const Tokenizer& tokenizer)
    : bytes_(static_cast<size_t>(tokenizer.vocab_size())),
      plain_(static_cast<size_t>(tokenizer.vocab_size()), 0),
      end_(static_cast<size_t>(tokenizer.vocab_size()), 0) {
  for (TokenId t = 0; t < tokenizer.vocab_size(); ++t) {
    const auto i = static_cast<size_t>(t);
    end_[i] = tokenizer.is_end_of_generation(t) ? 1 : 0;
    // Control tokens add no text (special = false): never allowed but to end.
    bytes_[i] = tokenizer.token_to_piece(t, /*special=*/false);
    bool plain = !bytes_[i].empty();
    for (const char c : bytes_[i]) {
      const auto b = static_cast<uint8_t>(c);
      if (b == '"' || b == '\\' || b < 0x20) plain = false;
    }
    plain_[i] = plain ? 1 : 0;
    if (!bytes_[i].empty() && end_[i] == 0) sorted_.push_back(t);
  }
  std::sort(sorted_.begin(), sorted_.end(), [this](TokenId a, TokenId b) { return bytes(a) < bytes(b); });
  common_prefix_.assign(sorted_.size(), 0);
  for (size_t k = 1; k < sorted_.size(); ++k) {
    const std::string& a = bytes(sorted_[k - 1]);
    const std::string& b = bytes(sorted_[k]);
    const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    common_prefix_[k] = static_cast<uint32_t>(mismatch.first - a.begin());
  }
}

OutputConstraint::OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const CompiledSchema> schema)
    : vocabulary_(std::move(vocabulary)),
      schema_(std::move(schema)),
      matcher_(JsonMatcher(/*object_root=*/true)) {
  if (schema_ && schema_->has_any_of) {
    matcher_.emplace<SchemaMatcherSet>(schema_.get());
  } else if (schema_) {
    matcher_.emplace<SchemaMatcher>(schema_.get());
  }
}

OutputConstraint::OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const Regex> regex)
    : vocabulary_(std::move(vocabulary)), regex_(std::move(regex)), matcher_(RegexMatcher(regex_.get())) {}

namespace {

// Nothing may follow: a JSON document is whole once complete; a regex's match may go on.
template <class Matcher>
bool exhausted(const Matcher& matcher) {
  return matcher.complete();
}
template <>
bool exhausted(const RegexMatcher&) {
  return false;
}

}  // namespace

template <class Matcher>
void OutputConstraint::walk_sorted(const Matcher& matcher, bool in_string, std::vector<uint8_t>& allowed) const {
  const TokenBytes& v = *vocabulary_;
  const std::vector<TokenId>& sorted = v.sorted();
  const std::vector<uint32_t>& common = v.common_prefix();
  std::vector<Matcher> states{matcher};  // states[d]: after the first d bytes of the last token walked
  // The common prefix of the next token with the last one walked: the least of the common
  // prefixes of the tokens between (those skipped as plain string content count too).
  uint32_t shared = UINT32_MAX;
  size_t i = 0;
  while (i < sorted.size()) {
    const TokenId t = sorted[i];
    shared = std::min(shared, common[i]);
    if (in_string && v.plain(t)) {  // allowed already
      ++i;
      continue;
    }
    const std::string& bytes = v.bytes(t);
    const size_t keep = std::min<size_t>(shared, states.size() - 1) + 1;
    shared = UINT32_MAX;
    states.erase(states.begin() + static_cast<std::ptrdiff_t>(keep), states.end());
    size_t depth = states.size() - 1;
    bool ok = true;
    for (; depth < bytes.size(); ++depth) {
      Matcher next = states.back();
      if (!next.feed(static_cast<uint8_t>(bytes[depth]))) {
        ok = false;
        break;
      }
      states.push_back(next);
    }
    ++i;
    if (ok) {
      allowed[static_cast<size_t>(t)] = 1;
      continue;
    }
    // Byte `depth` failed: every following token sharing the bytes up to it fails as well (and
    // shares more than the states kept, so `shared` needs no update for them).
    while (i < sorted.size() && common[i] > depth) ++i;
  }
}

template <class Matcher>
void OutputConstraint::allowed_by(const Matcher& matcher, std::vector<uint8_t>& allowed) const {
  const TokenBytes& v = *vocabulary_;
  allowed.assign(static_cast<size_t>(v.size()), 0);
  const bool done = matcher.complete();
  for (TokenId t = 0; t < v.size(); ++t) {
    if (v.ends_generation(t)) allowed[static_cast<size_t>(t)] = done ? 1 : 0;
  }
  if (exhausted(matcher)) return;  // only the end of generation
  const bool in_string = matcher.in_string();
  if (in_string) {
    for (TokenId t = 0; t < v.size(); ++t) {
      if (v.plain(t)) allowed[static_cast<size_t>(t)] = 1;  // plain content continues a free string
    }
  }
  walk_sorted(matcher, in_string, allowed);
}

void OutputConstraint::allowed(std::vector<uint8_t>& allowed) const {
  std::visit([&](const auto& m) { allowed_by(m, allowed); }, matcher_);
}

bool OutputConstraint::accept(TokenId token) {
  const TokenBytes& v = *vocabulary_;
  if (token < 0 || token >= v.size()) return false;
  if (v.ends_generation(token)) return complete();
  if (v.bytes(token).empty()) return false;
  return std::visit(
      [&](auto& m) {
        auto next = m;
        if (!next.feed(v.bytes(token))) return false;
        m = next;
        return true;
      },
      matcher_);
}

}  // namespace mnemo::grammar
