// Reasoning ("thinking") in a model's reply: the text a model writes between its reasoning tags
// (Qwen 3, DeepSeek R1, SmolLM3: <think> ... </think>) is returned apart from the answer, as
// OpenAI's reasoning models return it (chat: message.reasoning_content and delta.reasoning_content,
// as vLLM and llama-server name it; Responses: a `reasoning` output item).
//
// The split works on text as it streams: a tag's possible beginning is held back until it is
// known, whitespace right after a tag and before the closing one is dropped (as llama-server
// trims), and whatever follows the closing tag is the answer. A reply that does not open with the
// tag (after whitespace) is all answer; one whose prompt already opened the tag (a template that
// starts the thinking itself) starts inside it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mnemo {

struct ReasoningTags {
  std::string open = "<think>";
  std::string close = "</think>";
};

// The tags a chat template's source shows its models reason between, if any.
std::optional<ReasoningTags> reasoning_tags_of(std::string_view template_source);

// Whether a rendered prompt leaves the reasoning open: its last opening tag is not closed.
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags& tags);

class ReasoningSplitter {
 public:
  ReasoningSplitter(ReasoningTags tags, bool starts_inside);

  struct Pieces {
    std::string reasoning;
    std::string content;
  };
  // The next piece of the reply: what can be told apart now.
  Pieces feed(std::string_view text);
  // The reply's end: what was held back (an unfinished tag is text; unclosed reasoning stays
  // reasoning).
  Pieces finish();

  // Whether the reply opened reasoning (it may still be inside it), and whether it is inside it
  // (or may be: the reply has shown nothing yet).
  bool reasoned() const { return reasoned_; }
  bool inside() const { return state_ != State::kAfter; }

 private:
  enum class State { kBefore, kInside, kAfter };
  void step(Pieces& out, bool at_end);

  ReasoningTags tags_;
  State state_;
  bool reasoned_;
  bool skip_space_;      // after a tag: leading whitespace is dropped
  std::string pending_;  // held back: a possible tag, or whitespace that may end the reasoning
};

// The reply's tokens that went to its reasoning (usage's reasoning_tokens): each token fed with
// its text counts if the reply was inside the reasoning before or after it (so the tokens of
// the tags count too).
class ReasoningTokenCounter {
 public:
  ReasoningTokenCounter(ReasoningTags tags, bool starts_inside) : splitter_(std::move(tags), starts_inside) {}
  void feed(std::string_view text) {
    const bool before = splitter_.inside();
    splitter_.feed(text);
    if (before || splitter_.inside()) ++count_;
  }
  // The count, 0 for a reply that never reasoned.
  int32_t count() const { return splitter_.reasoned() ? count_ : 0; }

 private:
  ReasoningSplitter splitter_;
  int32_t count_ = 0;
};

}  // namespace mnemo
