// ChatTemplate::for_model on synthetic GGUFs: the file's template when usable, else the
// built-in one its architecture or vocabulary points to.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "gguf/gguf_writer.h"

namespace mnemo {
namespace {

// A metadata-only GGUF; the bytes must outlive the File parsed from them.
struct SyntheticModel {
  std::vector<uint8_t> bytes;
  gguf::File file;
};

SyntheticModel make_model(const std::string& architecture, const std::vector<std::string>& tokens,
                          const std::string& chat_template = "") {
  gguf::Writer writer;
  writer.set_string("general.architecture", architecture);
  if (!tokens.empty()) writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_u32("tokenizer.ggml.bos_token_id", 0);
  writer.set_u32("tokenizer.ggml.eos_token_id", 1);
  if (!chat_template.empty()) writer.set_string("tokenizer.chat_template", chat_template);
  std::vector<uint8_t> bytes = writer.to_bytes();
  auto file = gguf::File::parse(bytes, "synthetic.gguf");
  EXPECT_TRUE(file.ok()) << file.error().message();
  return SyntheticModel{std::move(bytes), std::move(file).value()};
}

std::string family_origin(const gguf::File& file) {
  auto chat_template = ChatTemplate::for_model(file);
  if (!chat_template.ok()) return "ERROR: " + chat_template.error().message();
  return chat_template->origin();
}

TEST(ChatTemplateForModel, InfersTheFamilyFromArchitectureAndVocabulary) {
  EXPECT_EQ(family_origin(make_model("gemma3", {"<pad>", "<eos>"}).file), "builtin gemma");
  EXPECT_EQ(family_origin(make_model("gemma2", {"<pad>", "<eos>"}).file), "builtin gemma");
  EXPECT_EQ(family_origin(make_model("qwen2", {"a", "<|im_start|>", "<|im_end|>"}).file), "builtin chatml");
  EXPECT_EQ(family_origin(make_model("llama", {"a", "<|start_header_id|>", "<|eot_id|>"}).file), "builtin llama3");
  EXPECT_EQ(family_origin(make_model("llama", {"<s>", "</s>", "[INST]", "[/INST]"}).file), "builtin mistral");
  EXPECT_EQ(family_origin(make_model("llama", {"<s>", "</s>"}).file), "builtin llama2");
  const std::string unknown = family_origin(make_model("phi3", {"a", "b"}).file);
  EXPECT_NE(unknown.find("synthetic.gguf: no chat template in the file and no built-in one for architecture 'phi3'"),
            std::string::npos)
      << unknown;
}

TEST(ChatTemplateForModel, PrefersTheFilesTemplate) {
  const SyntheticModel model = make_model("gemma3", {"<bos>", "<eos>"}, "{% for m in messages %}[{{ m.content }}]{% endfor %}");
  auto chat_template = ChatTemplate::for_model(model.file);
  ASSERT_TRUE(chat_template.ok()) << chat_template.error().message();
  EXPECT_EQ(chat_template->origin(), "tokenizer.chat_template");
  auto text = chat_template->render({{"user", "a"}, {"assistant", "b"}}, ChatTemplateOptions{});
  ASSERT_TRUE(text.ok()) << text.error().message();
  EXPECT_EQ(*text, "[a][b]");
}

TEST(ChatTemplateForModel, FallsBackWhenTheFilesTemplateDoesNotParse) {
  const SyntheticModel model = make_model("gemma3", {"<bos>", "<eos>"}, "{% if %}");
  auto chat_template = ChatTemplate::for_model(model.file);
  ASSERT_TRUE(chat_template.ok()) << chat_template.error().message();
  EXPECT_EQ(chat_template->origin().rfind("builtin gemma (the file's tokenizer.chat_template was not usable: ", 0), 0u)
      << chat_template->origin();
}

TEST(ChatTemplateForModel, OptionsCarryTheVocabularysBosAndEos) {
  const SyntheticModel model = make_model("gemma3", {"<bos>", "<eos>"});
  auto options = chat_template_options_for_model(model.file);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->bos_token, "<bos>");
  EXPECT_EQ(options->eos_token, "<eos>");
  EXPECT_TRUE(options->add_generation_prompt);
}

}  // namespace
}  // namespace mnemo
