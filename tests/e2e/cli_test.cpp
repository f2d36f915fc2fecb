// The mnemo executable end to end on the real models: `info` describes the default (the chat
// model) and Gemma 3, `generate` streams the continuation llama.cpp produces on Gemma for a
// prompt where llama.cpp is decisive at every step (tests/fixtures/gemma3_greedy.json), the chat
// model answers a question, and bad arguments fail cleanly.
#include <gtest/gtest.h>

#include <string>

#include "e2e/run_mnemo.h"
#include "util/paths.h"

namespace {

using mnemo::testing::CommandResult;
using mnemo::testing::run_mnemo;

TEST(Cli, InfoDescribesTheDefaultChatModel) {
  const CommandResult r = run_mnemo("info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(mnemo::kChatModelFile), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("architecture:    llama"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("heads:           9 query, 3 key/value"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("chat template:"), std::string::npos) << r.output;
}

TEST(Cli, InfoDescribesGemma) {
  const CommandResult r = run_mnemo("info " + mnemo::reference_model_path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("architecture:    gemma3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("layers:          18"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Q4_K"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("262144 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LLLLLGLLLLLGLLLLLG"), std::string::npos) << r.output;
}

TEST(Cli, GenerateContinuesAPromptGreedily) {
  const CommandResult r = run_mnemo("generate -m " + mnemo::reference_model_path() +
                                    " -p \"The list of prime numbers: 2, 3, 5, 7,\" -n 24 --kv-type f32");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(" 11, 13, 17, 19, 23"), std::string::npos) << r.output;
}

TEST(Cli, TheDefaultChatModelAnswersAQuestion) {
  // SmolLM2's ChatML turn, written out: `generate` takes raw text (the shell's printf makes the
  // newlines; command substitution drops the last one, which the model does without).
  const CommandResult r = run_mnemo(
      "generate -n 16 -p \"$(printf '<|im_start|>user\\nWhat is the capital of France?<|im_end|>\\n<|im_start|>assistant\\n')\"");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("Paris"), std::string::npos) << r.output;
}

TEST(Cli, MissingModelFileFailsWithItsName) {
  const CommandResult r = run_mnemo("generate -m /nonexistent.gguf -p hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/nonexistent.gguf"), std::string::npos) << r.output;
}

TEST(Cli, MalformedModelFileFailsCleanly) {
  const std::string path = ::testing::TempDir() + "/not-a-model.gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("GGUF but not really", f);
  std::fclose(f);
  const CommandResult r = run_mnemo("info " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("not-a-model.gguf"), std::string::npos) << r.output;
  std::remove(path.c_str());
}

TEST(Cli, BadArgumentsAreRejected) {
  EXPECT_NE(run_mnemo("generate").status, 0);                       // no prompt
  EXPECT_NE(run_mnemo("generate -p hi -n 0").status, 0);            // out of range
  EXPECT_NE(run_mnemo("generate -p hi --kv-type q4").status, 0);    // not a choice
  EXPECT_NE(run_mnemo("frobnicate").status, 0);                     // unknown command
}

TEST(Cli, PlanSaysWhetherToDisaggregate) {
  CommandResult r = run_mnemo("plan -Y 2 -t 0.05 -N 40 -D 4 -m 1.2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("disaggregate, 2 prompt and 2 token machines"), std::string::npos) << r.output;
  r = run_mnemo("plan -Y 0.05 -t 0.05 -N 40 -D 4 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"disaggregate\": false"), std::string::npos) << r.output;
  r = run_mnemo("plan -Y 1 -t 1 -N 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("tokens generated N must be > 0"), std::string::npos) << r.output;
  r = run_mnemo("plan --from-loadgen /nonexistent.json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("/nonexistent.json"), std::string::npos) << r.output;
}

}  // namespace
