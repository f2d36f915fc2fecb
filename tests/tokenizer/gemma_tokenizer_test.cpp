// The tokenizer of the real Gemma 3 270M GGUF (reference_model_path(); a missing file fails).
// Expected ids below were produced by llama.cpp on the same file, as was
// tests/fixtures/gemma3_tokenize.json, which holds many more.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_support.h"
#include "util/paths.h"

namespace mnemo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

class GemmaTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = reference_model_path();
    if (!std::filesystem::exists(path)) {
      load_error_ = new std::string(path + " is missing: run scripts/fetch_model.py");
      return;
    }
    auto file = gguf::File::open(path);
    if (!file.ok()) {
      load_error_ = new std::string(file.error().message());
      return;
    }
    const auto start = Clock::now();
    auto tokenizer = Tokenizer::from_gguf(*file);
    load_seconds_ = seconds_since(start);
    if (!tokenizer.ok()) {
      load_error_ = new std::string(tokenizer.error().message());
      return;
    }
    tokenizer_ = std::move(tokenizer).value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
    delete load_error_;
    load_error_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(load_error_, nullptr) << *load_error_; }

  static const Tokenizer& tokenizer() { return *tokenizer_; }

  static inline Tokenizer* tokenizer_ = nullptr;
  static inline std::string* load_error_ = nullptr;
  static inline double load_seconds_ = 0;
};

TEST_F(GemmaTokenizerTest, LoadsQuicklyWithGemmaSpecialTokens) {
  std::printf("[ gemma    ] tokenizer built in %.1f ms\n", load_seconds_ * 1000);
  EXPECT_LT(load_seconds_, 1.0);  // typically ~0.1 s in Release; the budget is 0.5 s
  EXPECT_EQ(tokenizer().model_name(), "llama");
  EXPECT_EQ(tokenizer().vocab_size(), 262144);
  EXPECT_EQ(tokenizer().bos(), 2);
  EXPECT_EQ(tokenizer().eos(), 1);
  EXPECT_EQ(tokenizer().token_text(106), "<end_of_turn>");
  EXPECT_EQ(tokenizer().token_type(106), TokenType::kControl);
  EXPECT_EQ(tokenizer().token_type(138), TokenType::kUserDefined);  // two spaces
  EXPECT_EQ(tokenizer().token_type(-1), TokenType::kUndefined);
  EXPECT_EQ(tokenizer().token_text(262144), "");
}

TEST_F(GemmaTokenizerTest, EndOfGenerationAsLlamaCpp) {
  EXPECT_TRUE(tokenizer().is_end_of_generation(1));    // <eos>
  EXPECT_TRUE(tokenizer().is_end_of_generation(106));  // <end_of_turn>
  // llama.cpp also stops on "</s>" (listed for PaddleOCR) unless the vocabulary is Gemma 4's.
  EXPECT_TRUE(tokenizer().is_end_of_generation(212));
  EXPECT_FALSE(tokenizer().is_end_of_generation(2));    // <bos>
  EXPECT_FALSE(tokenizer().is_end_of_generation(105));  // <start_of_turn>
  EXPECT_FALSE(tokenizer().is_end_of_generation(9259));
  EXPECT_FALSE(tokenizer().is_end_of_generation(-1));
  EXPECT_FALSE(tokenizer().is_end_of_generation(262144));
}

struct Expected {
  const char* text;
  bool add_special;
  bool parse_special;
  std::vector<TokenId> tokens;
};

TEST_F(GemmaTokenizerTest, MatchesLlamaCppOnSelectedTexts) {
  const std::vector<Expected> cases = {
      {"<start_of_turn>user\nWrite a haiku about llamas \xF0\x9F\xA6\x99.<end_of_turn>\n<start_of_turn>model\n", true,
       true, {2, 105, 2364, 107, 6974, 496, 678, 20517, 1003, 236136, 236743, 478, 397, 404, 391, 236761, 106, 107, 105, 4368, 107}},
      {"def add(a, b):\n    return a + b  # \xE5\x8A\xA0\xE6\xB3\x95\n", false, false,
       {2063, 1138, 236769, 236746, 236764, 518, 1473, 107, 140, 2060, 496, 900, 518, 138, 236865, 50624, 237380, 107}},
      {"\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84\xD9\x85 \xF0\x9F\x91\x8B "
       "\xE2\x80\x94 na\xC3\xAFve caf\xC3\xA9",
       false, false, {236873, 150345, 107602, 17193, 155818, 2192, 120362, 33443}},
      // User-defined tokens (</s>, HTML tags, runs of tabs) are split out even without parse_special.
      {"</s><table> <b>bold</b>\t\t\tend", false, true, {212, 168, 236743, 200, 15640, 209, 255970, 643}},
      {"\xF0\x9F\xA6\x99\xE2\x80\x8D\xE2\x99\x82\xEF\xB8\x8F \xEA\xB0\x80\xEA\xB0\x80 \xF0\x90\x8C\x80", false, false,
       {478, 397, 404, 391, 121457, 8486, 237272, 236743, 478, 382, 378, 366}},
      {"  two leading spaces, trailing  ", true, false, {2, 138, 13498, 5830, 9952, 236764, 45330, 138}},
      {"Hello world <start_of_turn>user\n</s> hi  there", true, true, {2, 9259, 1902, 236743, 105, 2364, 107, 212, 5631, 138, 13534}},
  };
  for (const Expected& expected : cases) {
    EXPECT_EQ(tokenizer().encode(expected.text, expected.add_special, expected.parse_special), expected.tokens)
        << "text '" << expected.text << "'";
  }
}

TEST_F(GemmaTokenizerTest, ControlTokenTextsArePlainTextWithoutParseSpecial) {
  const std::vector<TokenId> parsed = tokenizer().encode("<start_of_turn>user\n", false, true);
  EXPECT_EQ(parsed, (std::vector<TokenId>{105, 2364, 107}));
  const std::vector<TokenId> plain = tokenizer().encode("<start_of_turn>user\n", false, false);
  EXPECT_GT(plain.size(), 3U);
  EXPECT_EQ(tokenizer().decode(plain), "<start_of_turn>user\n");
  // Control tokens render only when asked to.
  EXPECT_EQ(tokenizer().decode(parsed), "user\n");
  EXPECT_EQ(tokenizer().decode(parsed, true), "<start_of_turn>user\n");
  EXPECT_EQ(tokenizer().token_to_piece(106, false), "");
  EXPECT_EQ(tokenizer().token_to_piece(106, true), "<end_of_turn>");
}

TEST_F(GemmaTokenizerTest, RoundTripsAVariedCorpus) {
  const std::vector<std::string> corpus = {
      "The quick brown fox jumps over the lazy dog.",
      "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
      "def f(x):\n    if x:\n        return [i ** 2 for i in range(x)]\n    return None\n",
      "emoji: \xF0\x9F\x98\x80\xF0\x9F\x9A\x80\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
      "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
      "\xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A\xD8\xA9 \xD9\x86\xD8\xB5 \xD9\xA1\xD9\xA2\xD9\xA3",
      "whitespace:  two   three    four\t\ttabs\n\n\nnewlines \r\n crlf \u00a0nbsp",
      std::string(100, ' ') + std::string(40, '\n') + std::string(33, '\t'),
      "<table><tr><td>cell</td></tr></table> <b>bold</b> <s>struck</s>",
      "e\xCC\x81 combining, \xE2\x88\x91\xE2\x88\xAB\xE2\x88\x9A\xE2\x88\x9E math, \xEF\xBC\xA1\xEF\xBC\xA2 fullwidth",
      "<0x41> a literal byte-token text, <unused3> and <pad> as plain text",
  };
  for (const std::string& text : corpus) {
    EXPECT_EQ(tokenizer().decode(tokenizer().encode(text, false, false)), text);
    EXPECT_EQ(tokenizer().decode(tokenizer().encode(text, true, false)), text);  // <bos> renders as ""
  }
  const std::string chat = "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n";
  const std::vector<TokenId> tokens = tokenizer().encode(chat, true, true);
  EXPECT_EQ(tokenizer().decode(tokens, true), "<bos>" + chat);
}

TEST_F(GemmaTokenizerTest, StreamingEmitsOnlyWholeCharacters) {
  // 🦙 and 𐌀 have no token: each is spelled by four byte tokens.
  const std::string text = "llama \xF0\x9F\xA6\x99 and \xF0\x90\x8C\x80 and \xE4\xB8\xAD\xE6\x96\x87";
  const std::vector<TokenId> tokens = tokenizer().encode(text, true, false);
  StreamingDetokenizer stream(tokenizer());
  std::string streamed;
  int empty_pushes = 0;
  for (const TokenId token : tokens) {
    const std::string piece = stream.push(token);
    EXPECT_TRUE(tokenizer_test::is_valid_utf8(piece)) << "token " << token;
    empty_pushes += piece.empty() ? 1 : 0;
    streamed += piece;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, tokenizer().decode(tokens));
  EXPECT_EQ(streamed, text);
  EXPECT_GE(empty_pushes, 1 + 6);  // <bos>, then 3 + 3 held-back bytes
}

TEST_F(GemmaTokenizerTest, EncodesTenKilobytesFast) {
  std::string text;
  const std::string paragraph =
      "Mnemo serves language models. It tokenises prompts, runs the model, and streams text back; "
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x82\x82 \xF0\x9F\x98\x80 and code like `for (int i = 0; i < n; ++i) {}`.\n";
  while (text.size() < 10 * 1024) text += paragraph;
  std::vector<TokenId> tokens;
  constexpr int kRepeats = 20;
  const auto start = Clock::now();
  for (int i = 0; i < kRepeats; ++i) tokens = tokenizer().encode(text, true, true);
  const double seconds = seconds_since(start) / kRepeats;
  std::printf("[ gemma    ] encode of %zu bytes: %.2f ms (%zu tokens, %.1f MB/s)\n", text.size(), seconds * 1000,
              tokens.size(), static_cast<double>(text.size()) / seconds / 1e6);
  EXPECT_LT(seconds, 0.05);
  EXPECT_EQ(tokenizer().decode(tokens), text);
}

// llama-cpp-python's Llama.detokenize, which scripts/gen_llama_fixtures.py uses: the pieces
// (special = false), less one leading space when the first token is BOS, decoded as UTF-8 with
// errors="replace".
std::string python_detokenize(const Tokenizer& tokenizer, const std::vector<TokenId>& tokens) {
  std::string text;
  for (const TokenId token : tokens) text += tokenizer.token_to_piece(token, false);
  if (!tokens.empty() && tokens[0] == tokenizer.bos() && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return tokenizer::sanitize_utf8(text);
}

// Every case of tests/fixtures/gemma3_tokenize.json, generated by llama.cpp on the same file:
// {"cases": [{"text", "add_special", "parse_special", "tokens", "detokenized"}]}.
TEST_F(GemmaTokenizerTest, MatchesLlamaCppFixture) {
  const std::string path = std::string(MNEMO_SOURCE_DIR) + "/tests/fixtures/gemma3_tokenize.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing (scripts/gen_llama_fixtures.py makes it)";
  std::ifstream in(path);
  const nlohmann::json fixture = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(fixture.is_discarded()) << path << " is not valid JSON";
  ASSERT_TRUE(fixture.contains("cases") && fixture["cases"].is_array()) << path << " has no \"cases\" array";
  size_t matched = 0;
  for (const nlohmann::json& test_case : fixture["cases"]) {
    const std::string text = test_case.at("text").get<std::string>();
    const bool add_special = test_case.at("add_special").get<bool>();
    const bool parse_special = test_case.at("parse_special").get<bool>();
    const std::vector<TokenId> expected = test_case.at("tokens").get<std::vector<TokenId>>();
    const std::vector<TokenId> tokens = tokenizer().encode(text, add_special, parse_special);
    EXPECT_EQ(tokens, expected) << "text '" << text << "' add_special=" << add_special
                                << " parse_special=" << parse_special;
    if (test_case.contains("detokenized")) {
      EXPECT_EQ(python_detokenize(tokenizer(), expected), test_case["detokenized"].get<std::string>())
          << "text '" << text << "'";
    }
    matched += tokens == expected ? 1 : 0;
  }
  std::printf("[ gemma    ] fixture: %zu/%zu cases match llama.cpp\n", matched, fixture["cases"].size());
}

}  // namespace
}  // namespace mnemo
