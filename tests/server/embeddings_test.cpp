// /v1/embeddings' request reading and reply shaping (server/embeddings.h), against scripted
// engine events: every input shape OpenAI accepts, every malformed one a 400 naming its field,
// vectors in input order whatever order they arrive in, unit length, base64 as little-endian
// float32s; and the pooling a model's GGUF asks for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "gguf/gguf_file.h"
#include "server/embeddings.h"
#include "support/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

class EmbeddingsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = testing::tiny_tokenizer().release();
    ASSERT_NE(tokenizer_, nullptr);
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  static std::variant<EmbeddingRequest, ApiError> read(const std::string& body, int32_t context = 64) {
    return read_embedding_request(json::parse(body), *tokenizer_, context, 8);
  }
  static EmbeddingRequest ok(const std::string& body) {
    auto r = read(body);
    EXPECT_TRUE(std::holds_alternative<EmbeddingRequest>(r)) << body << ": " << std::get<ApiError>(r).message;
    return std::holds_alternative<EmbeddingRequest>(r) ? std::get<EmbeddingRequest>(r) : EmbeddingRequest{};
  }
  static void refused(const std::string& body, const std::string& param) {
    auto r = read(body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    EXPECT_EQ(std::get<ApiError>(r).status, 400) << body;
    EXPECT_EQ(std::get<ApiError>(r).param, param) << body << ": " << std::get<ApiError>(r).message;
  }
  static Tokenizer* tokenizer_;
};
Tokenizer* EmbeddingsTest::tokenizer_ = nullptr;

TEST_F(EmbeddingsTest, EveryInputShapeOpenAiAcceptsIsRead) {
  const std::vector<TokenId> abc = tokenizer_->encode("abc", true, false);
  EXPECT_EQ(ok(R"({"input": "abc"})").inputs, std::vector<std::vector<TokenId>>{abc});
  EXPECT_EQ(ok(R"({"input": ["abc", "abc"], "model": "m"})").inputs, (std::vector<std::vector<TokenId>>{abc, abc}));
  EXPECT_EQ(ok(R"({"input": [5, 6, 7]})").inputs, (std::vector<std::vector<TokenId>>{{5, 6, 7}}));
  EXPECT_EQ(ok(R"({"input": [[5], [6, 7]]})").inputs, (std::vector<std::vector<TokenId>>{{5}, {6, 7}}));
  EXPECT_EQ(ok(R"({"input": "abc", "model": "m"})").model, "m");
  EXPECT_FALSE(ok(R"({"input": "abc", "encoding_format": "float", "user": "u", "dimensions": 8})").base64);
  EXPECT_TRUE(ok(R"({"input": "abc", "encoding_format": "base64"})").base64);
}

TEST_F(EmbeddingsTest, MalformedRequestsAre400sNamingTheField) {
  refused(R"({})", "input");
  refused(R"({"input": null})", "input");
  refused(R"({"input": ""})", "input");
  refused(R"({"input": ["a", ""]})", "input");
  refused(R"({"input": []})", "input");
  refused(R"({"input": [[]]})", "input");
  refused(R"({"input": 7})", "input");
  refused(R"({"input": ["a", 5]})", "input");
  refused(R"({"input": [5, "a"]})", "input");
  refused(R"({"input": [5, 300]})", "input");   // outside the vocabulary
  refused(R"({"input": [[5], [-1]]})", "input");
  refused(R"({"input": {"text": "a"}})", "input");
  refused(R"({"input": "abc", "encoding_format": "int8"})", "encoding_format");
  refused(R"({"input": "abc", "dimensions": 4})", "dimensions");  // the model has 8
  refused(R"({"input": "abc", "dimensions": "8"})", "dimensions");
  refused(R"({"input": "abc", "model": 3})", "model");
  refused(R"({"input": "abc", "user": 3})", "user");
  refused(R"({"input": "abc", "pooling": "mean"})", "pooling");  // not OpenAI's: refused by name
  // Each input shorter than the context; all of them within OpenAI's bounds.
  json long_input = json::array();
  for (int i = 0; i < 64; ++i) long_input.push_back(5);
  refused(json{{"input", long_input}}.dump(), "input");
  json many = json::array();
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many.push_back("a");
  refused(json{{"input", many}}.dump(), "input");
  json heavy = json::array();
  for (int i = 0; i < 2000; ++i) heavy.push_back(json(std::vector<int>(160, 5)));
  auto r = read_embedding_request(json{{"input", heavy}}, *tokenizer_, 4096, 8);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << "320,000 tokens";
  EXPECT_EQ(std::get<ApiError>(r).param, "input");
}

RequestDone done_with(int32_t prompt_tokens, std::string error = "") {
  RequestDone d;
  d.usage.prompt_tokens = prompt_tokens;
  d.error = std::move(error);
  return d;
}

TEST(EmbeddingShaper, VectorsComeInInputOrderAtUnitLength) {
  EmbeddingShaper shaper("m", 2, false);
  EXPECT_FALSE(shaper.gather(PooledEmbedding{1, {0.0f, 3.0f, 4.0f}}));
  EXPECT_FALSE(shaper.gather(done_with(5)));
  EXPECT_FALSE(shaper.gather(PooledEmbedding{0, {2.0f, 0.0f, 0.0f}}));
  EXPECT_FALSE(shaper.gather(ChoiceFinished{0, FinishReason::kStop}));
  EXPECT_TRUE(shaper.gather(done_with(7)));
  const ReplyShaper::Whole whole = shaper.whole();
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json body = json::parse(whole.body);
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["usage"], (json{{"prompt_tokens", 12}, {"total_tokens", 12}}));
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][0]["index"], 0);
  EXPECT_EQ(body["data"][0]["object"], "embedding");
  EXPECT_EQ(body["data"][0]["embedding"], (json{1.0, 0.0, 0.0}));
  EXPECT_EQ(body["data"][1]["index"], 1);
  const std::vector<float> second = body["data"][1]["embedding"].get<std::vector<float>>();
  EXPECT_FLOAT_EQ(second[1], 0.6f);
  EXPECT_FLOAT_EQ(second[2], 0.8f);
}

TEST(EmbeddingShaper, Base64IsLittleEndianFloat32s) {
  EmbeddingShaper shaper("m", 1, true);
  shaper.gather(PooledEmbedding{0, {0.0f, -3.0f, 4.0f}});
  ASSERT_TRUE(shaper.gather(done_with(3)));
  const json body = json::parse(shaper.whole().body);
  const std::string text = body["data"][0]["embedding"].get<std::string>();
  std::string bytes(text.size(), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(bytes.data()), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  ASSERT_GE(n, 12);  // EVP_DecodeBlock counts the padding's zero bytes too
  float values[3];
  std::memcpy(values, bytes.data(), sizeof(values));
  EXPECT_EQ(values[0], 0.0f);
  EXPECT_FLOAT_EQ(values[1], -0.6f);
  EXPECT_FLOAT_EQ(values[2], 0.8f);
}

TEST(EmbeddingShaper, AnInputThatFailsOrNeverGetsItsVectorIsAServerError) {
  EmbeddingShaper failed("m", 2, false);
  failed.gather(PooledEmbedding{0, {1.0f}});
  failed.gather(done_with(1));
  ASSERT_TRUE(failed.gather(done_with(1, "the engine could not run this request")));
  EXPECT_EQ(failed.whole().status, 500);
  EmbeddingShaper cancelled("m", 1, false);
  ASSERT_TRUE(cancelled.gather(done_with(1)));
  EXPECT_EQ(cancelled.whole().status, 500);
}

TEST(EmbeddingShaper, ZeroAndNonFiniteVectorsAreLeftAsTheyAre) {
  EXPECT_EQ(l2_normalized({0.0f, 0.0f}), (std::vector<float>{0.0f, 0.0f}));
  const std::vector<float> huge = l2_normalized({3e38f, 3e38f});  // squares summed in double: no overflow
  EXPECT_FLOAT_EQ(huge[0], std::sqrt(0.5f));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(l2_normalized({inf, 1.0f}), (std::vector<float>{inf, 1.0f}));  // no scaling rather than NaNs
}

TEST(EmbeddingPooling, TheFlagThenTheModelsPoolingTypeThenTheMean) {
  testing::TinyModelSpec spec;
  for (const auto& [type, flag, want] : std::vector<std::tuple<int, std::string, std::optional<Pooling>>>{
           {-1, "", Pooling::kMean}, {1, "", Pooling::kMean}, {3, "", Pooling::kLast}, {3, "mean", Pooling::kMean},
           {1, "last", Pooling::kLast}, {2, "", std::nullopt}, {0, "", std::nullopt}, {2, "last", Pooling::kLast}}) {
    gguf::Writer writer = testing::make_tiny_model(spec);
    if (type >= 0) writer.set_u32("llama.pooling_type", static_cast<uint32_t>(type));
    const std::string path = ::testing::TempDir() + "/pooling.gguf";
    ASSERT_TRUE(writer.write(path).ok());
    auto file = gguf::File::open(path);
    ASSERT_TRUE(file.ok());
    const Result<Pooling> pooling = pooling_for(*file, flag);
    EXPECT_EQ(pooling.ok(), want.has_value()) << "type " << type << " flag '" << flag << "'";
    if (pooling.ok() && want) {
      EXPECT_EQ(*pooling, *want) << "type " << type << " flag '" << flag << "'";
    }
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace mnemo::server
