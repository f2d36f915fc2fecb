#include "tokenizer_test_support.h"

#include <fstream>
#include <sstream>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace mnemo::tokenizer_test {

Result<std::unique_ptr<Tokenizer>> tokenizer_from(const gguf::Writer& writer) {
  const std::vector<uint8_t> bytes = writer.to_bytes();
  MNEMO_ASSIGN_OR_RETURN(const gguf::File file, gguf::File::parse(bytes, "tiny.gguf"));
  return Tokenizer::from_gguf(file);
}

gguf::Writer spm_writer(const SpmVocabSpec& spec) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int byte = 0; byte < 256; ++byte) {
    tokens.push_back(fmt::format("<0x{:02X}>", byte));
    scores.push_back(0);
    types.push_back(6);
  }
  for (const auto& [piece, score] : spec.pieces) {
    tokens.push_back(piece);
    scores.push_back(score);
    types.push_back(1);
  }
  for (const std::string& control : spec.controls) {
    tokens.push_back(control);
    scores.push_back(0);
    types.push_back(3);
  }
  for (const std::string& user : spec.user_defined) {
    tokens.push_back(user);
    scores.push_back(0);
    types.push_back(4);
  }
  gguf::Writer writer;
  writer.set_string("tokenizer.ggml.model", "llama");
  writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_f32_array("tokenizer.ggml.scores", scores);
  writer.set_i32_array("tokenizer.ggml.token_type", types);
  writer.set_u32("tokenizer.ggml.bos_token_id", 1);
  writer.set_u32("tokenizer.ggml.eos_token_id", 2);
  writer.set_u32("tokenizer.ggml.unknown_token_id", 0);
  return writer;
}

gguf::Writer bpe_writer(const std::vector<std::string>& merges, const std::vector<std::string>& controls,
                        const std::string& pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int byte = 0; byte < 256; ++byte) {
    tokens.emplace_back(tokenizer::byte_level_char(static_cast<uint8_t>(byte)));
    types.push_back(1);
  }
  for (const std::string& merge : merges) {
    std::string joined = merge;
    joined.erase(joined.find(' ', 1), 1);
    tokens.push_back(joined);
    types.push_back(1);
  }
  for (const std::string& control : controls) {
    tokens.push_back(control);
    types.push_back(3);
  }
  gguf::Writer writer;
  writer.set_string("tokenizer.ggml.model", "gpt2");
  writer.set_string("tokenizer.ggml.pre", pre);
  writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_i32_array("tokenizer.ggml.token_type", types);
  writer.set_string_array("tokenizer.ggml.merges", merges);
  return writer;
}

bool is_valid_utf8(std::string_view text) { return tokenizer::sanitize_utf8(text) == text; }

std::string read_file_or_fail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace mnemo::tokenizer_test
