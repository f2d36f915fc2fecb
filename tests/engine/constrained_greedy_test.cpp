// Constrained greedy decoding on the real models: a greedy request with an output format gets
// its token from the output product with the format's mask applied inside it (LogitsFor::
// kArgmax); with logprobs it gets the logits and the sampler applies the mask. Both must give
// the same tokens, alone and batched with free and other constrained requests, and the text
// must be what the format asks for.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/stream_collect.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "util/paths.h"

namespace mnemo {
namespace {

using Reply = testing::Collected;
using testing::collect;

class ConstrainedGreedyTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto model = Model::load(GetParam() ? reference_model_path() : chat_model_path());
    ASSERT_TRUE(model.ok()) << model.error().message() << " (scripts/setup.sh fetches the models)";
    model_ = std::move(*model);
    auto tokenizer = Tokenizer::from_gguf(model_->file());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message();
    tokenizer_ = std::move(*tokenizer);
  }

  GenerationRequest request(const std::string& question, bool logprobs) const {
    GenerationRequest r;
    r.prompt = tokenizer_->encode(question, /*add_special=*/true, /*parse_special=*/false);
    r.max_tokens = 60;
    r.sampling.temperature = 0.0f;
    r.top_logprobs = logprobs ? 0 : -1;
    return r;
  }
  GenerationRequest with_regex(GenerationRequest r, const std::string& pattern) const {
    auto regex = grammar::Regex::compile(pattern, /*anchored=*/true);
    EXPECT_TRUE(regex.ok());
    r.format = OutputFormat::kRegex;
    r.regex = std::make_shared<const grammar::Regex>(std::move(*regex));
    return r;
  }
  GenerationRequest with_schema(GenerationRequest r, const nlohmann::json& schema) const {
    auto compiled = grammar::compile_schema(schema);
    EXPECT_TRUE(compiled.ok());
    r.format = OutputFormat::kJsonSchema;
    r.schema = std::make_shared<const grammar::CompiledSchema>(std::move(*compiled));
    return r;
  }

  std::vector<Reply> run(const std::vector<GenerationRequest>& requests) const {
    EngineConfig c;
    c.threads = 2;
    c.block_size = 32;
    c.kv_blocks = 128;
    c.host_swap_blocks = 0;
    Engine engine(*model_, *tokenizer_, c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest& r : requests) {
      auto s = engine.submit(r);
      EXPECT_TRUE(s.ok()) << s.error().message();
      if (s.ok()) streams.push_back(*s);
    }
    std::vector<Reply> replies;
    for (auto& s : streams) {
      replies.push_back(collect(*s));
      EXPECT_TRUE(replies.back().error.empty()) << replies.back().error;
      // With logprobs the end of generation comes as a token too.
      std::vector<TokenId>& tokens = replies.back().tokens;
      if (!tokens.empty() && tokenizer_->is_end_of_generation(tokens.back())) tokens.pop_back();
    }
    return replies;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

const nlohmann::json kSchema = nlohmann::json::parse(R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"},
    "river": {"enum": ["yes", "no"]}}, "required": ["city", "population", "river"], "additionalProperties": false})");
constexpr const char* kDate = "[0-9]{4}-[0-9]{2}-[0-9]{2}";

TEST_P(ConstrainedGreedyTest, TheMaskInsideTheProductGivesTheSamplersTokens) {
  const std::string ask_json = "Describe Paris as JSON with city, population and river.\n";
  const std::string ask_date = "When did the Berlin wall fall? Give the date.\n";
  std::vector<GenerationRequest> folded = {with_schema(request(ask_json, false), kSchema),
                                           with_regex(request(ask_date, false), kDate)};
  std::vector<GenerationRequest> sampled = {with_schema(request(ask_json, true), kSchema),
                                            with_regex(request(ask_date, true), kDate)};
  const std::vector<Reply> alone_folded = run(folded);
  const std::vector<Reply> alone_sampled = run(sampled);
  // Batched with a free greedy request (folded without a mask) and a free sampled one.
  GenerationRequest free_greedy = request("Tell me about rivers.\n", false);
  GenerationRequest free_sampled = request("Tell me about bridges.\n", false);
  free_sampled.sampling.temperature = 0.8f;
  free_sampled.sampling.seed = 9;
  folded.push_back(free_greedy);
  folded.push_back(free_sampled);
  const std::vector<Reply> mixed = run(folded);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(alone_folded[i].tokens, alone_sampled[i].tokens) << "request " << i;
    EXPECT_EQ(mixed[i].tokens, alone_folded[i].tokens) << "request " << i << " batched";
    EXPECT_EQ(alone_folded[i].reason, FinishReason::kStop) << alone_folded[i].text;
  }
  const nlohmann::json parsed = nlohmann::json::parse(alone_folded[0].text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(parsed.is_object()) << alone_folded[0].text;
  EXPECT_EQ(parsed.size(), 3u) << alone_folded[0].text;
  EXPECT_TRUE(parsed["population"].is_number_integer()) << alone_folded[0].text;
  EXPECT_TRUE(folded[1].regex->matches(alone_folded[1].text)) << alone_folded[1].text;
}

INSTANTIATE_TEST_SUITE_P(Models, ConstrainedGreedyTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Gemma3" : "SmolLM2"; });

}  // namespace
}  // namespace mnemo
