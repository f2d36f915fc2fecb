// XGrammar's token mask side by side with ours (docs/benchmarks.md, "Constrained decoding"), on
// the real vocabularies (Gemma 3 270M: 262k tokens, SmolLM2: 49k), one thread each.
// Both engines get the same vocabulary: every token id's bytes as TokenBytes has them (what the
// token adds to the text; empty for control tokens), given to XGrammar as a RAW vocabulary of
// the same size with the same end-of-generation tokens as its stop tokens.
// For each grammar (the JSON schema, GBNF grammar of JSON and regex of bench/mask_bench.cpp, and
// 16 schemas of bench/constrained_bench.py, schemas.json) it times
//   compile: ours: the schema's JSON parse, compile_schema (or Regex/Gbnf::compile) and the
//            OutputConstraint; XGrammar's: GrammarCompiler::Compile* with its cache off (the
//            grammar's parse and its per-grammar token-mask precomputation);
//   masks:   a valid document, tokenized by our tokenizer, walked token by token: at each step
//            the mask of both (OutputConstraint::allowed, GrammarMatcher::FillNextTokenBitmask
//            into an int32 DLTensor on the CPU), then the token accepted by both; after the
//            last token, the mask once more (where the end of generation is allowed) and the end
//            token. Every pass runs on fresh matchers (ours: a fresh OutputConstraint, whose
//            mask cache and GBNF stacks start empty; XGrammar: a fresh GrammarMatcher), pass 1
//            right after the compile. Against a busy machine's noise, the table gives each
//            step's fastest of --passes (5) passes, and each compile's fastest of --compiles (3).
// At every step it compares the two masks' counts and reports each step where they differ,
// with a few tokens that only one of them allows.
//   xgrammar_mask_compare [--json OUT] [--schemas schemas.json] [--vocab gemma,smollm2] [--passes 5] [--compiles 3]
//                         [--any-order]
#include <dlpack/dlpack.h>
#include <fmt/core.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../bench_grammars.h"
#include "gguf/gguf_file.h"
#include "grammar/output_constraint.h"
#include "util/paths.h"

namespace mnemo::grammar {
namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) { return std::chrono::duration<double, std::micro>(Clock::now() - start).count(); }

enum class Kind { kSchema, kGbnf, kRegex };

struct Case {
  std::string name;
  Kind kind = Kind::kSchema;
  std::string source;    // the schema's JSON, the GBNF text or the regex
  std::string document;  // a text the grammar accepts whole
};

// The grammars of bench/mask_bench.cpp, with a document for each.
std::vector<Case> mask_bench_cases() {
  return {
      {"mask_bench schema", Kind::kSchema, bench::kPersonSchema,
       R"({"name": "Ann Lee", "code": "ABC-123", "age": 42, "pet": "cat"})"},
      {"mask_bench GBNF (JSON)", Kind::kGbnf, bench::kJsonGbnf,
       R"({"name": "Ann Lee", "tags": ["tea", "maps"], "age": 42, "ok": true, "pet": null, "height": 1.68, "home": {"city": "Oslo", "floor": -1}})"},
      {"mask_bench regex", Kind::kRegex, bench::kAnswerRegex, "yes: the sky is blue today."},
  };
}

std::vector<Case> schema_cases(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  // Ordered: the schemas' properties keep their order (XGrammar's default order is theirs).
  const nlohmann::ordered_json file = nlohmann::ordered_json::parse(in);
  std::vector<Case> out;
  for (const auto& c : file.at("cases")) {
    out.push_back({c.at("name").get<std::string>(), Kind::kSchema, c.at("schema").dump(), c.at("document").get<std::string>()});
  }
  return out;
}

struct Vocabulary {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TokenBytes> bytes;
  double bytes_ms = 0;  // TokenBytes (ours, once per vocabulary)
  std::optional<xgrammar::TokenizerInfo> info;
  double info_ms = 0;  // TokenizerInfo (XGrammar's, once per vocabulary)
};

// Ours, compiled: the constraint and what it needs to make a fresh one.
struct Ours {
  std::shared_ptr<const CompiledSchema> schema;
  std::shared_ptr<const Gbnf> gbnf;
  std::shared_ptr<const Regex> regex;
  std::unique_ptr<OutputConstraint> fresh(const Vocabulary& v) const {
    if (gbnf) return std::make_unique<OutputConstraint>(v.bytes, gbnf);
    if (regex) return std::make_unique<OutputConstraint>(v.bytes, regex);
    return std::make_unique<OutputConstraint>(v.bytes, schema);
  }
};

Ours compile_ours(const Case& c) {
  Ours out;
  if (c.kind == Kind::kSchema) {
    auto compiled = compile_schema(nlohmann::json::parse(c.source));
    if (!compiled.ok()) throw std::runtime_error("ours refused: " + compiled.error().message());
    out.schema = std::make_shared<const CompiledSchema>(std::move(*compiled));
  } else if (c.kind == Kind::kGbnf) {
    auto compiled = Gbnf::compile(c.source);
    if (!compiled.ok()) throw std::runtime_error("ours refused: " + compiled.error().message());
    out.gbnf = std::make_shared<const Gbnf>(std::move(*compiled));
  } else {
    auto compiled = Regex::compile(c.source, true);
    if (!compiled.ok()) throw std::runtime_error("ours refused: " + compiled.error().message());
    out.regex = std::make_shared<const Regex>(std::move(*compiled));
  }
  return out;
}

// XGrammar's schema options closest to our schema language: any whitespace, at most 16 bytes in
// a run (ours: at most two line breaks then 20 spaces or tabs, grammar::WhitespaceRun, which
// XGrammar cannot express: whitespace tokens are where the masks may differ), no properties
// beyond the schema's (strict mode).
// Properties in the schema's order, XGrammar's default: its any_order (--any-order) lets a
// property come again, where ours take the properties in any order, each once.
bool any_order = false;

xgrammar::CompiledGrammar compile_xgrammar(xgrammar::GrammarCompiler& compiler, const Case& c) {
  if (c.kind == Kind::kSchema) {
    return compiler.CompileJSONSchema(c.source, /*any_whitespace=*/true, std::nullopt, std::nullopt, /*strict_mode=*/true,
                                      /*max_whitespace_cnt=*/16, any_order);
  }
  if (c.kind == Kind::kGbnf) return compiler.CompileGrammar(xgrammar::Grammar::FromEBNF(c.source));
  return compiler.CompileRegex(c.source);
}

struct Step {
  double ours_us = 0, xgr_us = 0;                // the mask
  double ours_accept_us = 0, xgr_accept_us = 0;  // accepting the step's token
  int32_t ours_count = 0, xgr_count = 0;
};

struct Pass {
  std::vector<Step> steps;
  bool ours_accepted_all = true, xgr_accepted_all = true;
  std::string refused;  // which engine refused which token, if one did
};

struct Mismatch {
  size_t step = 0;
  std::string before;  // the document's tail before the step
  int32_t ours = 0, xgr = 0;
  std::vector<std::string> only_ours, only_xgr;  // a few tokens' bytes
};

struct CaseResult {
  std::string name;
  std::string skipped;  // why, if a side refused the grammar
  size_t tokens = 0;
  bool tokens_rebuild_document = true;
  double ours_compile_ms = 0, xgr_compile_ms = 0;  // the fastest of the compiles
  std::vector<Pass> passes;
  Pass best;                         // each step's fastest over the passes (the counts of pass 1)
  std::vector<Mismatch> mismatches;  // pass 1
};

int32_t bitmask_count(const std::vector<int32_t>& bits, int32_t vocab) {
  int32_t n = 0;
  for (int32_t t = 0; t < vocab; ++t) n += (static_cast<uint32_t>(bits[static_cast<size_t>(t / 32)]) >> (t % 32)) & 1U;
  return n;
}

bool bitmask_test(const std::vector<int32_t>& bits, int32_t t) {
  return ((static_cast<uint32_t>(bits[static_cast<size_t>(t / 32)]) >> (t % 32)) & 1U) != 0;
}

std::string printable(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

Pass walk(const Vocabulary& v, const std::vector<TokenId>& tokens, OutputConstraint& ours, xgrammar::GrammarMatcher& xgr,
          std::vector<Mismatch>* mismatches, const std::string& document) {
  const int32_t vocab = v.bytes->size();
  std::vector<int32_t> bits(static_cast<size_t>(xgrammar::GetBitmaskSize(vocab)));
  int64_t shape = static_cast<int64_t>(bits.size());
  DLTensor tensor{};
  tensor.data = bits.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = &shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  TokenMask mask;
  Pass pass;
  size_t consumed = 0;  // document bytes accepted so far
  const TokenId end = v.bytes->end_tokens().front();
  for (size_t i = 0; i <= tokens.size(); ++i) {
    Step step;
    auto start = Clock::now();
    ours.allowed(mask);
    step.ours_us = micros_since(start);
    start = Clock::now();
    xgr.FillNextTokenBitmask(&tensor);
    step.xgr_us = micros_since(start);
    step.ours_count = mask.count();
    step.xgr_count = bitmask_count(bits, vocab);
    pass.steps.push_back(step);
    if (mismatches != nullptr && step.ours_count != step.xgr_count) {
      Mismatch m;
      m.step = i;
      m.before = document.substr(consumed > 24 ? consumed - 24 : 0, std::min<size_t>(consumed, 24));
      m.ours = step.ours_count;
      m.xgr = step.xgr_count;
      for (TokenId t = 0; t < vocab; ++t) {
        const bool a = mask.test(t), b = bitmask_test(bits, t);
        if (a && !b && m.only_ours.size() < 4) m.only_ours.push_back(v.bytes->ends_generation(t) ? "<end>" : v.bytes->bytes(t));
        if (b && !a && m.only_xgr.size() < 4) m.only_xgr.push_back(v.bytes->ends_generation(t) ? "<end>" : v.bytes->bytes(t));
      }
      mismatches->push_back(std::move(m));
    }
    const TokenId next = i < tokens.size() ? tokens[i] : end;
    start = Clock::now();
    const bool a = ours.accept(next);
    pass.steps.back().ours_accept_us = micros_since(start);
    start = Clock::now();
    const bool b = xgr.AcceptToken(next);
    pass.steps.back().xgr_accept_us = micros_since(start);
    if (!a || !b) {
      pass.ours_accepted_all = pass.ours_accepted_all && a;
      pass.xgr_accepted_all = pass.xgr_accepted_all && b;
      pass.refused =
          fmt::format("step {}: token {} {} refused by {}", i, next, printable(i < tokens.size() ? v.bytes->bytes(next) : "<end>"),
                      !a && !b ? "both" : (!a ? "ours" : "XGrammar"));
      break;
    }
    if (i < tokens.size()) consumed += v.bytes->bytes(next).size();
  }
  return pass;
}

CaseResult run_case(const Vocabulary& v, xgrammar::GrammarCompiler& compiler, const Case& c, int passes, int compiles) {
  CaseResult r;
  r.name = c.name;
  Ours ours;
  std::optional<xgrammar::CompiledGrammar> compiled;
  for (int k = 0; k < compiles; ++k) {
    // Ours: compile and a constraint (what a request pays before its first mask).
    auto start = Clock::now();
    try {
      ours = compile_ours(c);
      const std::unique_ptr<OutputConstraint> constraint = ours.fresh(v);
    } catch (const std::exception& e) {
      r.skipped = e.what();
      return r;
    }
    const double ours_ms = micros_since(start) / 1000;
    start = Clock::now();
    try {
      compiled.emplace(compile_xgrammar(compiler, c));
    } catch (const std::exception& e) {
      r.skipped = std::string("XGrammar refused: ") + e.what();
      return r;
    }
    const double xgr_ms = micros_since(start) / 1000;
    r.ours_compile_ms = k == 0 ? ours_ms : std::min(r.ours_compile_ms, ours_ms);
    r.xgr_compile_ms = k == 0 ? xgr_ms : std::min(r.xgr_compile_ms, xgr_ms);
  }

  const std::vector<TokenId> tokens = v.tokenizer->encode(c.document, false, false);
  r.tokens = tokens.size();
  std::string rebuilt;
  for (const TokenId t : tokens) rebuilt += v.bytes->bytes(t);
  r.tokens_rebuild_document = rebuilt == c.document;
  for (int p = 0; p < passes; ++p) {
    const std::unique_ptr<OutputConstraint> constraint = ours.fresh(v);
    xgrammar::GrammarMatcher matcher(*compiled);
    r.passes.push_back(walk(v, tokens, *constraint, matcher, p == 0 ? &r.mismatches : nullptr, c.document));
  }
  r.best = r.passes.front();
  for (const Pass& p : r.passes) {
    for (size_t i = 0; i < std::min(p.steps.size(), r.best.steps.size()); ++i) {
      r.best.steps[i].ours_us = std::min(r.best.steps[i].ours_us, p.steps[i].ours_us);
      r.best.steps[i].xgr_us = std::min(r.best.steps[i].xgr_us, p.steps[i].xgr_us);
      r.best.steps[i].ours_accept_us = std::min(r.best.steps[i].ours_accept_us, p.steps[i].ours_accept_us);
      r.best.steps[i].xgr_accept_us = std::min(r.best.steps[i].xgr_accept_us, p.steps[i].xgr_accept_us);
    }
  }
  return r;
}

double quantile(std::vector<double> xs, double q) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const auto at = static_cast<size_t>(q * static_cast<double>(xs.size() - 1) + 0.5);
  return xs[std::min(at, xs.size() - 1)];
}

double total(const std::vector<double>& xs) {
  double s = 0;
  for (const double x : xs) s += x;
  return s;
}

std::vector<double> ours_times(const Pass& p) {
  std::vector<double> out;
  for (const Step& s : p.steps) out.push_back(s.ours_us);
  return out;
}
std::vector<double> xgr_times(const Pass& p) {
  std::vector<double> out;
  for (const Step& s : p.steps) out.push_back(s.xgr_us);
  return out;
}
double accepts_ms(const Pass& p, bool ours) {
  double sum = 0;
  for (const Step& s : p.steps) sum += ours ? s.ours_accept_us : s.xgr_accept_us;
  return sum / 1000;
}

Vocabulary load(const std::string& name) {
  Vocabulary v;
  v.name = name;
  auto file = gguf::File::open(name == "gemma" ? reference_model_path() : chat_model_path());
  if (!file.ok()) throw std::runtime_error(file.error().message());
  auto tokenizer = Tokenizer::from_gguf(*file);
  if (!tokenizer.ok()) throw std::runtime_error(tokenizer.error().message());
  v.tokenizer = std::move(*tokenizer);
  auto start = Clock::now();
  v.bytes = std::make_shared<const TokenBytes>(*v.tokenizer);
  v.bytes_ms = micros_since(start) / 1000;
  std::vector<std::string> encoded(static_cast<size_t>(v.bytes->size()));
  for (TokenId t = 0; t < v.bytes->size(); ++t) encoded[static_cast<size_t>(t)] = v.bytes->bytes(t);
  std::vector<int32_t> stop(v.bytes->end_tokens().begin(), v.bytes->end_tokens().end());
  start = Clock::now();
  v.info.emplace(encoded, xgrammar::VocabType::RAW, v.bytes->size(), stop, false);
  v.info_ms = micros_since(start) / 1000;
  return v;
}

std::string ms(double x) { return x >= 100 ? fmt::format("{:.0f}", x) : (x >= 10 ? fmt::format("{:.1f}", x) : fmt::format("{:.2f}", x)); }
std::string us(double x) { return x >= 100 ? fmt::format("{:.0f}", x) : fmt::format("{:.1f}", x); }

nlohmann::json report(const Vocabulary& v, const std::vector<CaseResult>& results, int passes, int compiles) {
  nlohmann::json out;
  out["vocabulary"] = v.name;
  out["vocab_size"] = v.bytes->size();
  out["end_tokens"] = v.bytes->end_tokens();
  out["ours_token_bytes_ms"] = v.bytes_ms;
  out["xgrammar_tokenizer_info_ms"] = v.info_ms;
  fmt::print("\n### {} ({} tokens)\n\n", v.name, v.bytes->size());
  fmt::print(
      "Per vocabulary, once: ours TokenBytes {} ms, XGrammar TokenizerInfo {} ms. Compile: the fastest of {}; masks: each "
      "step's fastest of {} passes on fresh matchers (pass 1 alone: right after the compile).\n\n",
      ms(v.bytes_ms), ms(v.info_ms), compiles, passes);
  fmt::print(
      "| grammar | steps | compile ms (ours / XGr) | mask median µs (ours / XGr) | mask p90 µs (ours / XGr) "
      "| masks total ms (ours / XGr) | pass 1 alone (ours / XGr) | accepts total ms (ours / XGr) | steps with other counts |\n");
  fmt::print("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  std::vector<double> all_ours, all_xgr, wide_ours, wide_xgr, narrow_ours, narrow_xgr;
  double sum_ours_compile = 0, sum_xgr_compile = 0, sum_ours_masks = 0, sum_xgr_masks = 0, sum_ours_accepts = 0, sum_xgr_accepts = 0;
  for (const CaseResult& r : results) {
    nlohmann::json j;
    j["grammar"] = r.name;
    if (!r.skipped.empty()) {
      j["skipped"] = r.skipped;
      out["grammars"].push_back(j);
      fmt::print("| {} | skipped: {} | | | | | | | |\n", r.name, r.skipped);
      continue;
    }
    const Pass& first = r.passes.front();
    const auto o = ours_times(r.best), x = xgr_times(r.best);
    // Wide: a state where ours allow a sixteenth of the vocabulary or more (inside a string, a
    // format, a regex class); narrow: the JSON structure, keys, numbers, enums.
    const int32_t wide_at = v.bytes->size() / 16;
    for (const Step& s : r.best.steps) {
      (s.ours_count >= wide_at ? wide_ours : narrow_ours).push_back(s.ours_us);
      (s.ours_count >= wide_at ? wide_xgr : narrow_xgr).push_back(s.xgr_us);
    }
    all_ours.insert(all_ours.end(), o.begin(), o.end());
    all_xgr.insert(all_xgr.end(), x.begin(), x.end());
    sum_ours_compile += r.ours_compile_ms;
    sum_xgr_compile += r.xgr_compile_ms;
    sum_ours_masks += total(o) / 1000;
    sum_xgr_masks += total(x) / 1000;
    const std::string alone = ms(total(ours_times(first)) / 1000) + " / " + ms(total(xgr_times(first)) / 1000);
    std::string note;
    if (!first.refused.empty()) note = " (" + first.refused + ")";
    if (!r.tokens_rebuild_document) note += " (tokens do not spell the document)";
    fmt::print("| {}{} | {} | {} / {} | {} / {} | {} / {} | {} / {} | {} | {} / {} | {} |\n", r.name, note, first.steps.size(),
               ms(r.ours_compile_ms), ms(r.xgr_compile_ms), us(quantile(o, 0.5)), us(quantile(x, 0.5)), us(quantile(o, 0.9)),
               us(quantile(x, 0.9)), ms(total(o) / 1000), ms(total(x) / 1000), alone, ms(accepts_ms(r.best, true)),
               ms(accepts_ms(r.best, false)), r.mismatches.size());
    sum_ours_accepts += accepts_ms(r.best, true);
    sum_xgr_accepts += accepts_ms(r.best, false);
    j["tokens"] = r.tokens;
    j["tokens_rebuild_document"] = r.tokens_rebuild_document;
    j["ours_compile_ms"] = r.ours_compile_ms;
    j["xgrammar_compile_ms"] = r.xgr_compile_ms;
    nlohmann::json bj;
    for (const Step& s : r.best.steps) {
      bj.push_back({{"ours_us", s.ours_us},
                    {"xgrammar_us", s.xgr_us},
                    {"ours_accept_us", s.ours_accept_us},
                    {"xgrammar_accept_us", s.xgr_accept_us}});
    }
    j["fastest_per_step"] = bj;
    for (const Pass& p : r.passes) {
      nlohmann::json pj;
      for (const Step& s : p.steps)
        pj["steps"].push_back(
            {{"ours_us", s.ours_us}, {"xgrammar_us", s.xgr_us}, {"ours_count", s.ours_count}, {"xgrammar_count", s.xgr_count}});
      pj["ours_median_us"] = quantile(ours_times(p), 0.5);
      pj["xgrammar_median_us"] = quantile(xgr_times(p), 0.5);
      pj["ours_p90_us"] = quantile(ours_times(p), 0.9);
      pj["xgrammar_p90_us"] = quantile(xgr_times(p), 0.9);
      pj["ours_total_ms"] = total(ours_times(p)) / 1000;
      pj["xgrammar_total_ms"] = total(xgr_times(p)) / 1000;
      pj["ours_accepted_all"] = p.ours_accepted_all;
      pj["xgrammar_accepted_all"] = p.xgr_accepted_all;
      if (!p.refused.empty()) pj["refused"] = p.refused;
      j["passes"].push_back(pj);
    }
    for (const Mismatch& m : r.mismatches) {
      j["mismatches"].push_back({{"step", m.step},
                                 {"before", m.before},
                                 {"ours", m.ours},
                                 {"xgrammar", m.xgr},
                                 {"only_ours", m.only_ours},
                                 {"only_xgrammar", m.only_xgr}});
    }
    out["grammars"].push_back(j);
  }
  size_t mismatched = 0;
  for (const CaseResult& r : results) mismatched += r.mismatches.size();
  fmt::print("| **all grammars** | {} | {} / {} (sum) | {} / {} | {} / {} | {} / {} (sum) | | {} / {} (sum) | {} |\n", all_ours.size(),
             ms(sum_ours_compile), ms(sum_xgr_compile), us(quantile(all_ours, 0.5)), us(quantile(all_xgr, 0.5)),
             us(quantile(all_ours, 0.9)), us(quantile(all_xgr, 0.9)), ms(sum_ours_masks), ms(sum_xgr_masks), ms(sum_ours_accepts),
             ms(sum_xgr_accepts), mismatched);
  fmt::print("| wide states (ours allow ≥ 1/16 of the vocabulary) | {} | | {} / {} | {} / {} | {} / {} | | | |\n", wide_ours.size(),
             us(quantile(wide_ours, 0.5)), us(quantile(wide_xgr, 0.5)), us(quantile(wide_ours, 0.9)), us(quantile(wide_xgr, 0.9)),
             ms(total(wide_ours) / 1000), ms(total(wide_xgr) / 1000));
  fmt::print("| narrow states (the others) | {} | | {} / {} | {} / {} | {} / {} | | | |\n", narrow_ours.size(),
             us(quantile(narrow_ours, 0.5)), us(quantile(narrow_xgr, 0.5)), us(quantile(narrow_ours, 0.9)), us(quantile(narrow_xgr, 0.9)),
             ms(total(narrow_ours) / 1000), ms(total(narrow_xgr) / 1000));
  out["summary"] = {{"steps", all_ours.size()},
                    {"ours_compile_ms_sum", sum_ours_compile},
                    {"xgrammar_compile_ms_sum", sum_xgr_compile},
                    {"ours_median_us", quantile(all_ours, 0.5)},
                    {"xgrammar_median_us", quantile(all_xgr, 0.5)},
                    {"ours_p90_us", quantile(all_ours, 0.9)},
                    {"xgrammar_p90_us", quantile(all_xgr, 0.9)},
                    {"ours_masks_ms_sum", sum_ours_masks},
                    {"xgrammar_masks_ms_sum", sum_xgr_masks},
                    {"ours_accepts_ms_sum", sum_ours_accepts},
                    {"xgrammar_accepts_ms_sum", sum_xgr_accepts},
                    {"mismatched_steps", mismatched},
                    {"wide_steps", wide_ours.size()},
                    {"wide_ours_median_us", quantile(wide_ours, 0.5)},
                    {"wide_xgrammar_median_us", quantile(wide_xgr, 0.5)},
                    {"narrow_ours_median_us", quantile(narrow_ours, 0.5)},
                    {"narrow_xgrammar_median_us", quantile(narrow_xgr, 0.5)}};

  // The steps where the counts differ, and what differs.
  bool any = false;
  for (const CaseResult& r : results) {
    for (const Mismatch& m : r.mismatches) {
      if (!any) fmt::print("\nSteps where the two masks' counts differ (pass 1; a few tokens only one side allows):\n\n");
      any = true;
      std::string a, b;
      for (const auto& s : m.only_ours) a += printable(s) + " ";
      for (const auto& s : m.only_xgr) b += printable(s) + " ";
      fmt::print("- {} step {} after …{}: ours {}, XGrammar {}; only ours: {}; only XGrammar: {}\n", r.name, m.step, printable(m.before),
                 m.ours, m.xgr, a.empty() ? "-" : a, b.empty() ? "-" : b);
    }
  }
  if (!any) fmt::print("\nThe two masks' counts agree at every step.\n");
  return out;
}

}  // namespace
}  // namespace mnemo::grammar

int main(int argc, char** argv) {
  using namespace mnemo::grammar;
  std::string json_out, schemas = MNEMO_XGRAMMAR_SCHEMAS, vocabs = "gemma,smollm2";
  int passes = 5, compiles = 3;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--any-order") {
      any_order = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      fmt::print(stderr, "{} needs a value\n", flag);
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--json")
      json_out = value;
    else if (flag == "--schemas")
      schemas = value;
    else if (flag == "--vocab")
      vocabs = value;
    else if (flag == "--passes")
      passes = std::max(1, std::stoi(value));
    else if (flag == "--compiles")
      compiles = std::max(1, std::stoi(value));
    else {
      fmt::print(stderr, "unknown flag {}\n", flag);
      return 2;
    }
  }
  try {
    std::vector<Case> cases = mask_bench_cases();
    for (auto& c : schema_cases(schemas)) cases.push_back(std::move(c));
    nlohmann::json out;
    out["xgrammar_version"] = "0.2.8";
    out["xgrammar_schema_options"] = {
        {"any_whitespace", true}, {"max_whitespace_cnt", 16}, {"strict_mode", true}, {"any_order", any_order}};
    out["threads"] = 1;
    out["passes"] = passes;
    out["compiles"] = compiles;
    fmt::print("## XGrammar 0.2.8 against Mnemo: token masks, one thread\n");
    for (const std::string name : {"gemma", "smollm2"}) {
      if (vocabs.find(name) == std::string::npos) continue;
      const Vocabulary v = load(name);
      // One thread, no cache: every compile is timed whole.
      xgrammar::GrammarCompiler compiler(*v.info, /*max_threads=*/1, /*cache_enabled=*/false);
      std::vector<CaseResult> results;
      for (const Case& c : cases) results.push_back(run_case(v, compiler, c, passes, compiles));
      out["runs"].push_back(report(v, results, passes, compiles));
      std::fflush(stdout);
    }
    if (!json_out.empty()) std::ofstream(json_out) << out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
