// `mnemo profile` end to end on the real default model: a short profile (positions 0 and 256, one
// repeat) writes a file that loads, with plausible figures; bad arguments and an unwritable
// output fail before anything is measured. Fails (never skips) when the model is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "e2e/run_mnemo.h"
#include "kv/cost_model.h"
#include "util/paths.h"

namespace mnemo {
namespace {

using testing::run_mnemo;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ProfileCli, MeasuresTheDefaultModelAndWritesALoadableProfile) {
  const std::string path = ::testing::TempDir() + "mnemo_profile_cli_test.profile.json";
  std::remove(path.c_str());
  const auto r = run_mnemo("profile --max-context 256 --repeats 1 --output " + path);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "compute positions")) << r.output;
  EXPECT_TRUE(contains(r.output, "fit: per token")) << r.output;
  EXPECT_TRUE(contains(r.output, "copy:")) << r.output;
  EXPECT_TRUE(contains(r.output, "disk read:")) << r.output;
  EXPECT_TRUE(contains(r.output, "wrote " + path)) << r.output;

  const auto m = load_cost_model(path);
  ASSERT_TRUE(m.ok()) << m.error().message();
  // Plausible for a 270M model on any CPU: between a microsecond and a second per token, and
  // attention over 4096 positions no dearer than a second more.
  EXPECT_GT(m->per_token_seconds, 1e-6);
  EXPECT_LT(m->per_token_seconds, 1.0);
  EXPECT_GE(m->per_context_token_seconds, 0.0);
  EXPECT_LT(m->per_context_token_seconds * 4096, 1.0);
  EXPECT_GT(m->copy_bytes_per_second, 1e8);   // memcpy: well above 100 MB/s anywhere
  EXPECT_LT(m->copy_bytes_per_second, 1e13);
  EXPECT_GT(m->disk_read_bytes_per_second, 1e6);
  EXPECT_EQ(m->measured.model_file, kReferenceModelFile);
  EXPECT_GE(m->measured.threads, 1);
  EXPECT_FALSE(m->measured.isa.empty());
  EXPECT_FALSE(m->measured.measured_at.empty());
  ASSERT_EQ(m->measured.points.size(), 2u);  // positions 0 and 256
  EXPECT_EQ(m->measured.points[0].start, 0);
  EXPECT_EQ(m->measured.points[1].start, 256);
  for (const CostPoint& p : m->measured.points) {
    EXPECT_EQ(p.tokens, 32);
    EXPECT_GT(p.seconds_per_token, 1e-6);
    EXPECT_LT(p.seconds_per_token, 1.0);
  }
  std::remove(path.c_str());
}

TEST(ProfileCli, BadArgumentsFailBeforeMeasuring) {
  EXPECT_NE(run_mnemo("profile --chunk 0").status, 0);
  EXPECT_NE(run_mnemo("profile --repeats 0").status, 0);
  EXPECT_NE(run_mnemo("profile --max-context -1").status, 0);

  const auto unwritable = run_mnemo("profile --output /nonexistent-dir/model.profile.json");
  EXPECT_EQ(unwritable.status, 1);
  EXPECT_TRUE(contains(unwritable.output, "/nonexistent-dir")) << unwritable.output;

  const auto missing = run_mnemo("profile -m /nonexistent.gguf --output " + ::testing::TempDir() + "unused.json");
  EXPECT_EQ(missing.status, 1);
  EXPECT_TRUE(contains(missing.output, "/nonexistent.gguf")) << missing.output;
}

}  // namespace
}  // namespace mnemo
