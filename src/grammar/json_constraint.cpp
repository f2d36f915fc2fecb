#include "grammar/json_constraint.h"

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
  }
}

void JsonConstraint::allowed(std::vector<uint8_t>& allowed) const {
  const TokenBytes& v = *vocabulary_;
  allowed.assign(static_cast<size_t>(v.size()), 0);
  const bool done = matcher_.complete();
  const bool in_string = matcher_.in_string();
  for (TokenId t = 0; t < v.size(); ++t) {
    const std::string& bytes = v.bytes(t);
    bool ok = false;
    if (v.ends_generation(t)) {
      ok = done;
    } else if (bytes.empty() || done) {
      ok = false;
    } else if (in_string && v.plain(t)) {
      ok = true;
    } else {
      JsonMatcher trial = matcher_;
      ok = trial.feed(bytes);
    }
    allowed[static_cast<size_t>(t)] = ok ? 1 : 0;
  }
}

bool JsonConstraint::accept(TokenId token) {
  const TokenBytes& v = *vocabulary_;
  if (token < 0 || token >= v.size()) return false;
  if (v.ends_generation(token)) return matcher_.complete();
  JsonMatcher next = matcher_;
  if (v.bytes(token).empty() || !next.feed(v.bytes(token))) return false;
  matcher_ = next;
  return true;
}

}  // namespace mnemo::grammar
