// `mnemo simulate` takes the KV geometry (bytes per token, layers, window, global layers) from
// the model whose tokenizer counts the tokens, and a geometry flag given overrides its part.
#include <gtest/gtest.h>

#include "e2e/run_mnemo.h"
#include "util/paths.h"

namespace mnemo::sim {
namespace {

using mnemo::testing::run_mnemo;

constexpr const char* kSmall = " -n 3 --policies lru --device-bytes 64M --host-bytes 0";

TEST(SimulateGeometry, GemmaIsSlidingWindowedWithThreeGlobalLayersOf18) {
  const auto r = run_mnemo("simulate -m " + reference_model_path() + kSmall);
  ASSERT_EQ(r.status, 0) << r.output;
  // 18 layers x 1 KV head x (256 + 256) x 2 bytes x 32 tokens = 576 KiB.
  EXPECT_NE(r.output.find("32-token chunks of 576 KiB (96 KiB compact: 3 of 18 layers, 512-token window)"), std::string::npos)
      << r.output;
}

TEST(SimulateGeometry, SmolLM2IsGlobalWithItsOwnBytesPerToken) {
  const auto r = run_mnemo("simulate -m " + chat_model_path() + kSmall);
  ASSERT_EQ(r.status, 0) << r.output;
  // 30 layers x 3 KV heads x (64 + 64) x 2 bytes x 32 tokens = 720 KiB, no window.
  EXPECT_NE(r.output.find("32-token chunks of 720 KiB;"), std::string::npos) << r.output;
}

TEST(SimulateGeometry, AFlagOverridesItsPartOfTheModelsGeometry) {
  const auto r = run_mnemo("simulate -m " + chat_model_path() + kSmall + " --kv-bytes-per-token 1024");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("32-token chunks of 32 KiB;"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mnemo::sim
