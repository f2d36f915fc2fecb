// OutputConstraint on the real vocabularies: the sorted walk's mask equals trying every token's
// bytes on a copy of the matcher (the reference), state after state of a schema-shaped document;
// once the object is whole only the end of generation is allowed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "grammar/output_constraint.h"
#include "util/paths.h"

namespace mnemo::grammar {
namespace {

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto file = gguf::File::open(path);
  EXPECT_TRUE(file.ok()) << (file.ok() ? "" : file.error().message()) << " (scripts/setup.sh fetches the models)";
  if (!file.ok()) return nullptr;
  auto tokenizer = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tokenizer.ok());
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

// `may_go_on`: a complete match may still be extended (a regex), unlike a whole JSON document.
template <class Matcher>
std::vector<uint8_t> reference_mask(const TokenBytes& v, const Matcher& m, bool may_go_on = false) {
  std::vector<uint8_t> allowed(static_cast<size_t>(v.size()), 0);
  for (TokenId t = 0; t < v.size(); ++t) {
    if (v.ends_generation(t)) {
      allowed[static_cast<size_t>(t)] = m.complete() ? 1 : 0;
    } else if (!v.bytes(t).empty() && (may_go_on || !m.complete())) {
      Matcher trial = m;
      allowed[static_cast<size_t>(t)] = trial.feed(v.bytes(t)) ? 1 : 0;
    }
  }
  return allowed;
}

// The mask as a byte per token, after checking that no bit past the vocabulary is set (readers
// take 16 bits at a time, padding included).
std::vector<uint8_t> bytes_of(const TokenMask& mask) {
  std::vector<uint8_t> bytes(static_cast<size_t>(mask.size()), 0);
  int32_t set = 0;
  for (TokenId t = 0; t < mask.size(); ++t) {
    bytes[static_cast<size_t>(t)] = mask.test(t) ? 1 : 0;
    set += bytes[static_cast<size_t>(t)];
  }
  EXPECT_EQ(mask.count(), set) << "bits set past the vocabulary";
  EXPECT_GE(mask.words().size() * 64, static_cast<size_t>(mask.size()) + 64) << "no padding word";
  return bytes;
}

class OutputConstraintTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OutputConstraintTest, TheWalkAllowsExactlyWhatTryingEveryTokenAllows) {
  const auto tokenizer = load(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  auto vocabulary = std::make_shared<const TokenBytes>(*tokenizer);
  const nlohmann::json schema = nlohmann::json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"},"pet":{"enum":["cat","dog"]},
      "tags":{"type":"array","items":{"type":"number"},"maxItems":3}},"required":["name","age"]})");
  auto compiled = compile_schema(schema);
  ASSERT_TRUE(compiled.ok());
  auto shared = std::make_shared<const CompiledSchema>(std::move(*compiled));
  const std::string doc = R"({"name": "Ann \"A\"", "age": 31, "pet": "dog", "tags": [1.5, -2]})";
  OutputConstraint free(vocabulary);
  OutputConstraint schematic(vocabulary, shared);
  JsonMatcher free_ref;
  SchemaMatcher schema_ref(shared.get());
  TokenMask got;
  // Advance byte by byte through tokens that are single bytes where the vocabulary has them;
  // compare masks at every prefix.
  for (size_t i = 0; i <= doc.size(); ++i) {
    free.allowed(got);
    ASSERT_EQ(bytes_of(got), reference_mask(*vocabulary, free_ref)) << "json_object after " << doc.substr(0, i);
    schematic.allowed(got);
    ASSERT_EQ(bytes_of(got), reference_mask(*vocabulary, schema_ref)) << "json_schema after " << doc.substr(0, i);
    if (i == doc.size()) break;
    const std::string byte = doc.substr(i, 1);
    const auto ids = tokenizer->encode(byte, false, false);
    ASSERT_EQ(ids.size(), 1u) << byte;
    ASSERT_TRUE(free.accept(ids[0])) << doc.substr(0, i + 1);
    ASSERT_TRUE(schematic.accept(ids[0])) << doc.substr(0, i + 1);
    ASSERT_TRUE(free_ref.feed(byte));
    ASSERT_TRUE(schema_ref.feed(byte));
  }
  EXPECT_TRUE(free.complete() && schematic.complete());
  int ends = 0;
  for (TokenId t = 0; t < got.size(); ++t) {
    if (!got.test(t)) continue;
    EXPECT_TRUE(vocabulary->ends_generation(static_cast<TokenId>(t))) << t;
    ++ends;
  }
  EXPECT_GE(ends, 1);
}

// Feeds `text` one single-byte token at a time, comparing the constraint's mask with the
// reference's at every prefix.
template <class Matcher>
void follow(const Tokenizer& tokenizer, const TokenBytes& vocabulary, OutputConstraint& constraint, Matcher reference,
            const std::string& text, bool may_go_on) {
  TokenMask got;
  for (size_t i = 0; i <= text.size(); ++i) {
    constraint.allowed(got);
    ASSERT_EQ(bytes_of(got), reference_mask(vocabulary, reference, may_go_on)) << "after " << text.substr(0, i);
    if (i == text.size()) break;
    const auto ids = tokenizer.encode(text.substr(i, 1), false, false);
    ASSERT_EQ(ids.size(), 1u) << text.substr(i, 1);
    ASSERT_TRUE(constraint.accept(ids[0])) << text.substr(0, i + 1);
    ASSERT_TRUE(reference.feed(text.substr(i, 1)));
  }
  EXPECT_TRUE(constraint.complete());
}

TEST_P(OutputConstraintTest, AnyOfPatternsLengthsAndRegexAndGbnfGrammarsMaskExactly) {
  const auto tokenizer = load(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  auto vocabulary = std::make_shared<const TokenBytes>(*tokenizer);
  auto compiled = compile_schema(nlohmann::json::parse(R"({"type":"object","properties":{
      "id":{"anyOf":[{"type":"string","format":"uuid"},{"type":"integer"}]},
      "code":{"type":"string","pattern":"^[A-Z]{3}$"},"note":{"type":"string","maxLength":5}},
      "required":["id","code"]})"));
  ASSERT_TRUE(compiled.ok()) << compiled.error().message();
  auto schema = std::make_shared<const CompiledSchema>(std::move(*compiled));
  OutputConstraint constrained(vocabulary, schema);
  follow(*tokenizer, *vocabulary, constrained, SchemaMatcherSet(schema.get()),
         R"({"note": "a\"b", "id": "123e4567-e89b-12d3-a456-426614174000", "code": "ABC"})", false);
  auto regex = Regex::compile("(yes|no), [0-9]+ items?", /*anchored=*/true);
  ASSERT_TRUE(regex.ok());
  auto shared_regex = std::make_shared<const Regex>(std::move(*regex));
  OutputConstraint grammar(vocabulary, shared_regex);
  follow(*tokenizer, *vocabulary, grammar, RegexMatcher(shared_regex.get()), "no, 12 item", true);
  auto gbnf = Gbnf::compile("root ::= (\"yes\" | \"no\") \", \" [0-9]+ \" item\" \"s\"? (\"\\n\" note)?\nnote ::= [^\\n]{0,10}\n");
  ASSERT_TRUE(gbnf.ok()) << gbnf.error().message();
  auto shared_gbnf = std::make_shared<const Gbnf>(std::move(*gbnf));
  OutputConstraint gbnf_grammar(vocabulary, shared_gbnf);
  GbnfStacks reference_stacks(shared_gbnf.get());
  follow(*tokenizer, *vocabulary, gbnf_grammar, GbnfMatcher(&reference_stacks), "no, 12 items\nok go", true);
}

INSTANTIATE_TEST_SUITE_P(RealVocabularies, OutputConstraintTest, ::testing::Values(chat_model_path(), reference_model_path()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param.find("gemma") != std::string::npos ? std::string("Gemma") : std::string("SmolLM2");
                         });

}  // namespace
}  // namespace mnemo::grammar
