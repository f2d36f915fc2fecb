// The reasoning splitter (chat/reasoning.h): exact reasoning and content for whole replies, and
// the same pieces whatever the chunks the text streams in (every split point, one character at
// a time), with tags cut across chunks.
#include "chat/reasoning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mnemo {
namespace {

struct Split {
  std::string reasoning;
  std::string content;
  bool operator==(const Split&) const = default;
};

Split split_in_chunks(std::string_view text, const std::vector<size_t>& cuts, bool starts_inside = false) {
  ReasoningSplitter splitter(ReasoningTags{}, starts_inside);
  Split out;
  size_t from = 0;
  for (size_t cut : cuts) {
    const auto pieces = splitter.feed(text.substr(from, cut - from));
    out.reasoning += pieces.reasoning;
    out.content += pieces.content;
    from = cut;
  }
  const auto tail = splitter.feed(text.substr(from));
  const auto end = splitter.finish();
  out.reasoning += tail.reasoning + end.reasoning;
  out.content += tail.content + end.content;
  return out;
}

Split split_whole(std::string_view text, bool starts_inside = false) { return split_in_chunks(text, {}, starts_inside); }

TEST(ReasoningSplitter, QwenStyleReply) {
  EXPECT_EQ(split_whole("<think>\nThe user greets me.\n</think>\n\nHello!"), (Split{"The user greets me.", "Hello!"}));
}

TEST(ReasoningSplitter, NoTagIsAllContent) {
  EXPECT_EQ(split_whole("Hello, <b>world</b>"), (Split{"", "Hello, <b>world</b>"}));
  // Leading whitespace of a reply without reasoning is the reply's.
  EXPECT_EQ(split_whole("\n Hi"), (Split{"", "\n Hi"}));
  // A tag later in the reply is text: only a reply that opens with it reasons.
  EXPECT_EQ(split_whole("Use <think> tags"), (Split{"", "Use <think> tags"}));
}

TEST(ReasoningSplitter, EmptyThinkingOfANonThinkingTurn) {
  EXPECT_EQ(split_whole("<think>\n\n</think>\n\nSure."), (Split{"", "Sure."}));
}

TEST(ReasoningSplitter, UnclosedReasoningStaysReasoning) {
  EXPECT_EQ(split_whole("<think>\nStill thinking when the tokens ran out  "), (Split{"Still thinking when the tokens ran out", ""}));
}

TEST(ReasoningSplitter, PromptThatOpenedTheTag) {
  EXPECT_EQ(split_whole("Let me think.\n</think>\n\n42", true), (Split{"Let me think.", "42"}));
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n", ReasoningTags{}));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", ReasoningTags{}));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n", ReasoningTags{}));
}

TEST(ReasoningSplitter, AnUnfinishedOpeningTagIsText) {
  EXPECT_EQ(split_whole("<thi"), (Split{"", "<thi"}));
  EXPECT_EQ(split_whole("<thinking about it"), (Split{"", "<thinking about it"}));
}

TEST(ReasoningSplitter, InnerWhitespaceIsKept) {
  EXPECT_EQ(split_whole("<think>a\n\nb </think>c\nd"), (Split{"a\n\nb", "c\nd"}));
}

TEST(ReasoningSplitter, EveryChunkingGivesTheSamePieces) {
  const std::vector<std::string> replies = {"<think>\nThe user greets me.\n</think>\n\nHello!",
                                            "  <think>x < y </thin k></think> ok </think> done", "plain <think> answer",
                                            "<think>\n\n</think>\n\nSure.", "<think> unfinished \n"};
  for (const std::string& reply : replies) {
    const Split whole = split_whole(reply);
    for (size_t cut = 0; cut <= reply.size(); ++cut) {
      ASSERT_EQ(split_in_chunks(reply, {cut}), whole) << reply << " cut at " << cut;
    }
    std::vector<size_t> every;
    for (size_t i = 1; i < reply.size(); ++i) every.push_back(i);
    ASSERT_EQ(split_in_chunks(reply, every), whole) << reply << " one character at a time";
  }
}

TEST(ReasoningSplitter, PartialTagsAreHeldBackNotLost) {
  ReasoningSplitter splitter(ReasoningTags{}, false);
  auto p = splitter.feed("<thi");
  EXPECT_EQ(p.reasoning + p.content, "");
  p = splitter.feed("nk>step one</th");
  EXPECT_EQ(p.reasoning, "step one");
  EXPECT_TRUE(splitter.reasoned());
  p = splitter.feed("ink>answer");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "answer");
}

TEST(ReasoningTemplates, DetectsTheTags) {
  EXPECT_TRUE(reasoning_tags_of("{% if enable_thinking %}<think>\n{% endif %}... </think>").has_value());
  EXPECT_FALSE(reasoning_tags_of("{{ '<|im_start|>' + message.role }}").has_value());
}

}  // namespace
}  // namespace mnemo
