// The token mask of constrained decoding on the real vocabularies (Gemma 3: 262k tokens,
// SmolLM2: 49k), at the states a JSON reply passes through: between structure (after '{' or ':'),
// inside a free string, inside a string with a pattern, and a regex grammar. Google Benchmark;
// run with the model cache in place (scripts/setup.sh).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "grammar/output_constraint.h"
#include "util/paths.h"

namespace mnemo::grammar {
namespace {

struct Vocabulary {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TokenBytes> bytes;
};

const Vocabulary& vocabulary(int which) {
  static Vocabulary loaded[2];
  Vocabulary& v = loaded[which];
  if (!v.tokenizer) {
    auto file = gguf::File::open(which == 0 ? reference_model_path() : chat_model_path());
    if (!file.ok()) throw std::runtime_error(file.error().message());
    v.tokenizer = std::move(*Tokenizer::from_gguf(*file));
    v.bytes = std::make_shared<const TokenBytes>(*v.tokenizer);
  }
  return v;
}

std::shared_ptr<const CompiledSchema> schema() {
  static auto compiled = std::make_shared<const CompiledSchema>(*compile_schema(nlohmann::json::parse(R"({"type":"object",
      "properties":{"name":{"type":"string"},"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]+$"},"age":{"type":"integer"},
      "pet":{"anyOf":[{"enum":["cat","dog"]},{"type":"null"}]}},"required":["name","code","age"]})")));
  return compiled;
}

// The mask after `prefix` of a reply.
void BM_Mask(benchmark::State& state, int which, std::string prefix, bool regex) {
  const Vocabulary& v = vocabulary(which);
  std::unique_ptr<OutputConstraint> constraint;
  if (regex) {
    constraint = std::make_unique<OutputConstraint>(v.bytes, std::make_shared<const Regex>(*Regex::compile("(yes|no): [a-z ]+\\.", true)));
  } else {
    constraint = std::make_unique<OutputConstraint>(v.bytes, schema());
  }
  for (const char c : prefix) {
    const auto ids = v.tokenizer->encode(std::string(1, c), false, false);
    if (ids.size() != 1 || !constraint->accept(ids[0])) throw std::runtime_error("prefix refused at " + std::string(1, c));
  }
  TokenMask allowed;
  for (auto _ : state) {
    constraint->allowed(allowed);
    benchmark::DoNotOptimize(allowed.data());
  }
  state.counters["allowed"] = static_cast<double>(allowed.count());
}

void register_all() {
  for (const int which : {0, 1}) {
    const std::string model = which == 0 ? "gemma" : "smollm2";
    for (const auto& [name, prefix, regex] : std::vector<std::tuple<std::string, std::string, bool>>{
             {"start", "", false}, {"after_brace", "{", false}, {"after_colon", "{\"name\":", false},
             {"in_string", "{\"name\": \"Ann Le", false}, {"in_pattern", "{\"code\": \"AB", false},
             {"in_any_of", "{\"pet\": ", false}, {"regex", "yes: a b", true}}) {
      benchmark::RegisterBenchmark(("mask/" + model + "/" + name).c_str(),
                                   [which = which, prefix = prefix, regex = regex](benchmark::State& s) { BM_Mask(s, which, prefix, regex); })
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace mnemo::grammar

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  mnemo::grammar::register_all();
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
