#include "chat/reasoning.h"

#include <utility>

namespace mnemo {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void drop_leading_space(std::string& s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  s.erase(0, i);
}

std::string_view without_trailing_space(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_at_end(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

std::optional<ReasoningTags> reasoning_tags_of(std::string_view template_source) {
  ReasoningTags tags;
  if (template_source.find(tags.open) == std::string_view::npos || template_source.find(tags.close) == std::string_view::npos) {
    return std::nullopt;
  }
  return tags;
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags& tags) {
  const size_t open = prompt.rfind(tags.open);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(tags.close);
  return close == std::string_view::npos || close < open;
}

ReasoningSplitter::ReasoningSplitter(ReasoningTags tags, bool starts_inside)
    : tags_(std::move(tags)),
      state_(starts_inside ? State::kInside : State::kBefore),
      reasoned_(starts_inside),
      skip_space_(starts_inside) {}

ReasoningSplitter::Pieces ReasoningSplitter::feed(std::string_view text) {
  Pieces out;
  pending_ += text;
  step(out, false);
  return out;
}

ReasoningSplitter::Pieces ReasoningSplitter::finish() {
  Pieces out;
  step(out, true);
  return out;
}

void ReasoningSplitter::step(Pieces& out, bool at_end) {
  for (;;) {
    switch (state_) {
      case State::kBefore: {
        // Whitespace before the opening tag is dropped with it; before anything else it is text.
        size_t first = 0;
        while (first < pending_.size() && is_space(pending_[first])) ++first;
        const std::string_view rest = std::string_view(pending_).substr(first);
        if (rest.starts_with(tags_.open)) {
          pending_.erase(0, first + tags_.open.size());
          state_ = State::kInside;
          reasoned_ = true;
          skip_space_ = true;
          continue;
        }
        if (!at_end && std::string_view(tags_.open).starts_with(rest)) return;  // maybe the tag, not yet whole
        state_ = State::kAfter;
        continue;
      }
      case State::kInside: {
        if (skip_space_) {
          drop_leading_space(pending_);
          if (pending_.empty()) return;
          skip_space_ = false;
        }
        const size_t close = pending_.find(tags_.close);
        if (close != std::string::npos) {
          out.reasoning += without_trailing_space(std::string_view(pending_).substr(0, close));
          pending_.erase(0, close + tags_.close.size());
          state_ = State::kAfter;
          skip_space_ = true;
          continue;
        }
        if (at_end) {
          out.reasoning += without_trailing_space(pending_);
          pending_.clear();
          return;
        }
        // Hold back a possible closing tag, and the whitespace before it (dropped if it closes).
        size_t ready = pending_.size() - partial_tag_at_end(pending_, tags_.close);
        while (ready > 0 && is_space(pending_[ready - 1])) --ready;
        out.reasoning.append(pending_, 0, ready);
        pending_.erase(0, ready);
        return;
      }
      case State::kAfter: {
        if (skip_space_) {
          drop_leading_space(pending_);
          if (pending_.empty()) return;
          skip_space_ = false;
        }
        out.content += pending_;
        pending_.clear();
        return;
      }
    }
  }
}

}  // namespace mnemo
