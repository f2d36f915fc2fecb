// ChatTemplate::for_model on the real default model, Gemma 3 270M, which carries no chat
// template. Labelled "model": fails, rather than skips, when the model is missing.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"
#include "gguf/gguf_file.h"
#include "util/paths.h"

namespace mnemo {
namespace {

TEST(ChatTemplateDefaultModel, Gemma3_270mUsesTheBuiltinGemmaTemplate) {
  const std::string path = reference_model_path();
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message() << " (fetch it with scripts/fetch_model.py)";
  EXPECT_FALSE(file->has("tokenizer.chat_template"));  // why the fallback matters
  auto chat_template = ChatTemplate::for_model(*file);
  ASSERT_TRUE(chat_template.ok()) << chat_template.error().message();
  EXPECT_EQ(chat_template->origin(), "builtin gemma");
  EXPECT_EQ(chat_template->source(), ChatTemplate::builtin("gemma")->source());

  auto options = chat_template_options_for_model(*file);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->bos_token, "<bos>");
  auto text = chat_template->render({{"system", "Be brief."}, {"user", "Hi"}}, *options);
  ASSERT_TRUE(text.ok()) << text.error().message();
  EXPECT_EQ(*text, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
}

}  // namespace
}  // namespace mnemo
