// The token mask of constrained decoding on the real vocabularies (Gemma 3: 262k tokens,
// SmolLM2: 49k), at the states a JSON reply passes through: between structure (after '{' or ':'),
// inside a free string, inside a string with a pattern, a regex grammar, and a GBNF grammar of
// JSON (structure, then inside a string). Google Benchmark;
// run with the model cache in place (scripts/setup.sh).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_grammars.h"
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
  static auto compiled = std::make_shared<const CompiledSchema>(*compile_schema(nlohmann::json::parse(bench::kPersonSchema)));
  return compiled;
}

std::shared_ptr<const Gbnf> json_gbnf() {
  static auto compiled = std::make_shared<const Gbnf>(*Gbnf::compile(bench::kJsonGbnf));
  return compiled;
}

// kGbnfCold: a GBNF grammar's mask computed afresh each time (a state met the first time: no
// cached mask, no cached steps), where kGbnf meets the same state again (its mask cached).
enum class Kind { kSchema, kRegex, kGbnf, kGbnfCold };

std::unique_ptr<OutputConstraint> constraint_after(const Vocabulary& v, const std::string& prefix, Kind kind) {
  std::unique_ptr<OutputConstraint> constraint;
  if (kind == Kind::kGbnf || kind == Kind::kGbnfCold) {
    constraint = std::make_unique<OutputConstraint>(v.bytes, json_gbnf());
  } else if (kind == Kind::kRegex) {
    constraint = std::make_unique<OutputConstraint>(v.bytes, std::make_shared<const Regex>(*Regex::compile(bench::kAnswerRegex, true)));
  } else {
    constraint = std::make_unique<OutputConstraint>(v.bytes, schema());
  }
  for (const char c : prefix) {
    const auto ids = v.tokenizer->encode(std::string(1, c), false, false);
    if (ids.size() != 1 || !constraint->accept(ids[0])) throw std::runtime_error("prefix refused at " + std::string(1, c));
  }
  return constraint;
}

// The mask after `prefix` of a reply.
void BM_Mask(benchmark::State& state, int which, std::string prefix, Kind kind) {
  const Vocabulary& v = vocabulary(which);
  std::unique_ptr<OutputConstraint> constraint = constraint_after(v, prefix, kind);
  TokenMask allowed;
  for (auto _ : state) {
    if (kind == Kind::kGbnfCold) {
      state.PauseTiming();
      constraint = constraint_after(v, prefix, kind);
      state.ResumeTiming();
    }
    constraint->allowed(allowed);
    benchmark::DoNotOptimize(allowed.data());
  }
  state.counters["allowed"] = static_cast<double>(allowed.count());
}

void register_all() {
  for (const int which : {0, 1}) {
    const std::string model = which == 0 ? "gemma" : "smollm2";
    for (const auto& [name, prefix, kind] : std::vector<std::tuple<std::string, std::string, Kind>>{
             {"start", "", Kind::kSchema}, {"after_brace", "{", Kind::kSchema}, {"after_colon", "{\"name\":", Kind::kSchema},
             {"in_string", "{\"name\": \"Ann Le", Kind::kSchema}, {"in_pattern", "{\"code\": \"AB", Kind::kSchema},
             {"in_any_of", "{\"pet\": ", Kind::kSchema}, {"regex", "yes: a b", Kind::kRegex},
             {"gbnf_after_colon", "{\"name\":", Kind::kGbnf}, {"gbnf_in_string", "{\"name\": \"Ann Le", Kind::kGbnf},
             {"gbnf_after_colon_cold", "{\"name\":", Kind::kGbnfCold},
             {"gbnf_in_string_cold", "{\"name\": \"Ann Le", Kind::kGbnfCold}}) {
      benchmark::RegisterBenchmark(("mask/" + model + "/" + name).c_str(),
                                   [which = which, prefix = prefix, kind = kind](benchmark::State& s) { BM_Mask(s, which, prefix, kind); })
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
