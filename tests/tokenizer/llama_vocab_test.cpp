// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0: add_special = false,
// parse_special = false) for the vocab-only GGUFs of Llama 2 (SentencePiece), Llama 3, Qwen 2 and
// GPT-2 (byte-level BPE), and for Mistral's tekken and GPT-4o's o200k (Phi-4), whose vocab files
// scripts/make_vocabs.py makes from the tokenizers' own files on PyPI and whose test vectors
// llama.cpp computed on them (tests/fixtures/vocabs, scripts/gen_vocab_fixtures.py: llama.cpp's
// corpus and more scripts). The vocab files live in llama_vocab_dir(); a missing file is a failure.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_support.h"
#include "util/paths.h"

namespace mnemo {
namespace {

struct VocabCase {
  std::string text;
  std::vector<TokenId> tokens;
};

// Inputs are separated by "\n__ggml_vocab_test__\n"; each output line holds one input's ids.
// `cases_path` + ".inp" / ".out" hold them.
std::vector<VocabCase> read_cases(const std::string& cases_path) {
  const std::string inputs = tokenizer_test::read_file_or_fail(cases_path + ".inp");
  const std::string outputs = tokenizer_test::read_file_or_fail(cases_path + ".out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t pos = 0; pos < inputs.size();) {
    size_t next = inputs.find(separator, pos);
    if (next == std::string::npos) next = inputs.size();
    cases.push_back({inputs.substr(pos, next - pos), {}});
    pos = next == inputs.size() ? next : next + separator.size();
  }
  std::istringstream lines(outputs);
  std::string line;
  size_t index = 0;
  while (std::getline(lines, line)) {
    if (index >= cases.size()) {
      ADD_FAILURE() << cases_path << ".out has more lines than .inp has inputs";
      break;
    }
    std::istringstream ids(line);
    for (TokenId id = 0; ids >> id;) cases[index].tokens.push_back(id);
    ++index;
  }
  EXPECT_EQ(index, cases.size()) << cases_path << ": .inp and .out disagree on the number of cases";
  return cases;
}

// Where a vocabulary's test vectors are: beside llama.cpp's own vocab files, or in the fixtures for
// the ones scripts/make_vocabs.py makes.
std::string cases_path_of(const std::string& vocab) {
  if (vocab == "tekken" || vocab == "gpt-4o") return std::string(MNEMO_SOURCE_DIR) + "/tests/fixtures/vocabs/ggml-vocab-" + vocab + ".gguf";
  return llama_vocab_dir() + "/ggml-vocab-" + vocab + ".gguf";
}

// `text` without the spaces that directly precede a '?'.
std::string without_space_before_question_mark(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '?' && !out.empty() && out.back() == ' ') out.pop_back();
    out.push_back(c);
  }
  return out;
}

std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

class LlamaVocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaVocabTest, EncodesEveryCaseLikeLlamaCpp) {
  const std::string path = llama_vocab_dir() + "/ggml-vocab-" + GetParam() + ".gguf";
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/setup.sh (it downloads llama.cpp's vocab test files)";
  const auto file = gguf::File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message();
  const auto started = std::chrono::steady_clock::now();
  const auto tokenizer = Tokenizer::from_gguf(*file);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message();

  const std::vector<VocabCase> cases = read_cases(cases_path_of(GetParam()));
  ASSERT_FALSE(cases.empty());
  const bool spm = (*tokenizer)->model_name() == "llama";
  int encoded = 0;
  int decoded = 0;
  for (const VocabCase& test_case : cases) {
    const std::vector<TokenId> tokens = (*tokenizer)->encode(test_case.text, false, false);
    EXPECT_EQ(tokens, test_case.tokens) << "input '" << printable(test_case.text) << "'";
    encoded += tokens == test_case.tokens ? 1 : 0;

    // The pieces are exactly the input (after SentencePiece's space prefix)...
    std::string pieces;
    for (const TokenId token : test_case.tokens) pieces += (*tokenizer)->token_to_piece(token, true);
    std::string expected_pieces = test_case.text;
    if (spm && !expected_pieces.empty()) expected_pieces.insert(expected_pieces.begin(), ' ');
    EXPECT_EQ(pieces, expected_pieces) << "input '" << printable(test_case.text) << "'";
    // ... and decode() gives the input back as llama.cpp's llama_detokenize does, which for GPT-2
    // and Llama 3 removes a space before '?' (the only clean-up rule these inputs trigger).
    std::string expected = test_case.text;
    if ((*tokenizer)->detokenize_rules().clean_up_spaces) expected = without_space_before_question_mark(expected);
    const std::string text = (*tokenizer)->decode(test_case.tokens);
    EXPECT_EQ(text, expected) << "input '" << printable(test_case.text) << "'";
    decoded += text == expected ? 1 : 0;
  }
  std::printf("[ vocab    ] %s: %d/%zu cases encode as in llama.cpp, %d/%zu decode; tokenizer built in %.1f ms\n",
              GetParam().c_str(), encoded, cases.size(), decoded, cases.size(), load_seconds * 1000);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, LlamaVocabTest, ::testing::Values("llama-spm", "llama-bpe", "qwen2", "gpt-2", "tekken", "gpt-4o"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace mnemo
