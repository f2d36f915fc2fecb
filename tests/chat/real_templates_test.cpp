// Real templates (tests/chat/templates, from the models' tokenizer configs) and the built-in
// ones, rendering system + user + assistant + user with the generation prompt. Each expected
// prompt was worked out by hand from the template text, as HF's apply_chat_template renders it.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace mnemo {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a pirate."},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "How are you?"},
};

const std::vector<ChatMessage> kWithoutSystem(kConversation.begin() + 1, kConversation.end());

std::string read_template(const std::string& name) {
  const std::string path = std::string(MNEMO_SOURCE_DIR) + "/tests/chat/templates/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ChatTemplate load(const std::string& name) {
  auto parsed = ChatTemplate::parse(read_template(name));
  EXPECT_TRUE(parsed.ok()) << name << ": " << parsed.error().message();
  return std::move(parsed).value();
}

ChatTemplate builtin(const std::string& family) {
  auto parsed = ChatTemplate::builtin(family);
  EXPECT_TRUE(parsed.ok()) << family << ": " << parsed.error().message();
  return std::move(parsed).value();
}

std::string render_ok(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                      const ChatTemplateOptions& options) {
  auto text = chat_template.render(messages, options);
  EXPECT_TRUE(text.ok()) << text.error().message();
  return text.ok() ? *text : "";
}

std::string render_error(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                         const ChatTemplateOptions& options) {
  auto text = chat_template.render(messages, options);
  EXPECT_FALSE(text.ok()) << "rendered: " << (text.ok() ? *text : "");
  return text.ok() ? "" : text.error().message();
}

const ChatTemplateOptions kGemmaTokens{"<bos>", "<eos>", true, nullptr, nullptr};
const ChatTemplateOptions kLlamaTokens{"<|begin_of_text|>", "<|eot_id|>", true, nullptr, nullptr};
const ChatTemplateOptions kMistralTokens{"<s>", "</s>", true, nullptr, nullptr};

TEST(RealTemplates, Gemma3BuiltinFoldsTheSystemMessageIntoTheFirstTurn) {
  EXPECT_EQ(render_ok(builtin("gemma"), kConversation, kGemmaTokens),
            "<bos><start_of_turn>user\nYou are a pirate.\n\nHello<end_of_turn>\n"
            "<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nHow are you?<end_of_turn>\n"
            "<start_of_turn>model\n");
}

TEST(RealTemplates, Gemma3BuiltinWithoutSystemOrGenerationPrompt) {
  ChatTemplateOptions options = kGemmaTokens;
  options.add_generation_prompt = false;
  EXPECT_EQ(render_ok(builtin("gemma"), kWithoutSystem, options),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n"
            "<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nHow are you?<end_of_turn>\n");
}

TEST(RealTemplates, Gemma3BuiltinTrimsContent) {
  EXPECT_EQ(render_ok(builtin("gemma"), {{"user", "  Hello \n"}}, kGemmaTokens),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
}

TEST(RealTemplates, Gemma3BuiltinRejectsRolesThatDoNotAlternate) {
  const std::string error = render_error(builtin("gemma"), {{"user", "a"}, {"user", "b"}}, kGemmaTokens);
  EXPECT_NE(error.find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos) << error;
  EXPECT_NE(error.find("chat template: line 1, column "), std::string::npos) << error;
  EXPECT_FALSE(render_error(builtin("gemma"), {{"assistant", "first"}}, kGemmaTokens).empty());
}

TEST(RealTemplates, Gemma2) {
  const ChatTemplate gemma2 = load("google-gemma-2-2b-it.jinja");
  EXPECT_EQ(render_ok(gemma2, kWithoutSystem, kGemmaTokens),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n"
            "<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nHow are you?<end_of_turn>\n"
            "<start_of_turn>model\n");
  const std::string error = render_error(gemma2, kConversation, kGemmaTokens);
  EXPECT_NE(error.find("System role not supported"), std::string::npos) << error;
}

TEST(RealTemplates, Llama31) {
  EXPECT_EQ(render_ok(load("meta-llama-Llama-3.1-8B-Instruct.jinja"), kConversation, kLlamaTokens),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\n"
            "You are a pirate.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Today's date as Llama 3.2's template asks strftime_now for it: "%d %b %Y".
std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[64];
  return std::string(text, std::strftime(text, sizeof(text), "%d %b %Y", &local));
}

TEST(RealTemplates, Llama32PrintsTodaysDateThroughStrftimeNow) {
  const ChatTemplate llama32 = load("meta-llama-Llama-3.2-3B-Instruct.jinja");
  const std::string before = today();
  const std::string text = render_ok(llama32, kConversation, kLlamaTokens);
  const std::string after = today();  // the render may straddle midnight
  const auto expected = [](const std::string& date) {
    return "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\n"
           "Today Date: " + date + "\n\n"
           "You are a pirate.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n";
  };
  EXPECT_TRUE(text == expected(before) || text == expected(after)) << text;
}

TEST(RealTemplates, Qwen25) {
  const ChatTemplate qwen = load("Qwen-Qwen2.5-7B-Instruct.jinja");
  EXPECT_EQ(render_ok(qwen, kConversation, ChatTemplateOptions{}),
            "<|im_start|>system\nYou are a pirate.<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there<|im_end|>\n"
            "<|im_start|>user\nHow are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Without a system message Qwen adds its own; content is not trimmed.
  EXPECT_EQ(render_ok(qwen, {{"user", " Hi "}}, ChatTemplateOptions{}),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\n Hi <|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(RealTemplates, MistralNemoPutsTheSystemMessageIntoTheLastUserTurn) {
  const ChatTemplate nemo = load("mistralai-Mistral-Nemo-Instruct-2407.jinja");
  EXPECT_EQ(render_ok(nemo, kConversation, kMistralTokens),
            "<s>[INST]Hello[/INST]Hi there</s>[INST]You are a pirate.\n\nHow are you?[/INST]");
  const std::string error = render_error(nemo, {{"user", "a"}, {"user", "b"}}, kMistralTokens);
  EXPECT_NE(error.find("conversation roles must alternate"), std::string::npos) << error;
}

TEST(BuiltinTemplates, Llama3) {
  EXPECT_EQ(render_ok(builtin("llama3"), kConversation, kLlamaTokens),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a pirate.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(BuiltinTemplates, Chatml) {
  EXPECT_EQ(render_ok(builtin("chatml"), kConversation, ChatTemplateOptions{}),
            "<|im_start|>system\nYou are a pirate.<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there<|im_end|>\n"
            "<|im_start|>user\nHow are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(BuiltinTemplates, Mistral) {
  EXPECT_EQ(render_ok(builtin("mistral"), kConversation, kMistralTokens),
            "<s>[INST] You are a pirate.\n\nHello [/INST]Hi there</s>[INST] How are you? [/INST]");
  EXPECT_FALSE(render_error(builtin("mistral"), {{"user", "a"}, {"user", "b"}}, kMistralTokens).empty());
}

TEST(BuiltinTemplates, Llama2) {
  EXPECT_EQ(render_ok(builtin("llama2"), kConversation, kMistralTokens),
            "<s>[INST] <<SYS>>\nYou are a pirate.\n<</SYS>>\n\nHello [/INST] Hi there </s>"
            "<s>[INST] How are you? [/INST]");
}

TEST(BuiltinTemplates, UnknownFamilyIsAnError) {
  auto unknown = ChatTemplate::builtin("vicuna");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("vicuna"), std::string::npos);
  EXPECT_NE(unknown.error().message().find("gemma"), std::string::npos);  // lists the known ones
}

TEST(BuiltinTemplates, ComeWithTheirOriginAndSource) {
  const ChatTemplate gemma = builtin("gemma");
  EXPECT_EQ(gemma.origin(), "builtin gemma");
  EXPECT_EQ(gemma.source().rfind("{{ bos_token }}", 0), 0u);
  const ChatTemplate copy = gemma;  // copies share the parsed template
  EXPECT_EQ(render_ok(copy, kConversation, kGemmaTokens), render_ok(gemma, kConversation, kGemmaTokens));
}

}  // namespace
}  // namespace mnemo
