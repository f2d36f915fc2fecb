// CostModel: the least-squares fit `mnemo profile` stores, and the profile file's round trip and
// its rejection of malformed files (every error names the file and the field).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "gguf/temp_file.h"
#include "kv/cost_model.h"

namespace mnemo {
namespace {

using gguf::testing::temp_path;

std::vector<CostPoint> points_on(double a, double b, std::vector<int64_t> starts, int64_t tokens) {
  std::vector<CostPoint> out;
  for (const int64_t start : starts) {
    CostPoint p{start, tokens, 0.0};
    p.seconds_per_token = a + b * p.mean_position();
    out.push_back(p);
  }
  return out;
}

TEST(CostFit, PointsOnALineGiveThatLine) {
  const auto fit = fit_cost_line(points_on(2e-3, 1e-7, {0, 256, 512, 1024, 2048, 4096}, 32));
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_NEAR(fit->per_token_seconds, 2e-3, 1e-12);
  EXPECT_NEAR(fit->per_context_token_seconds, 1e-7, 1e-15);
}

TEST(CostFit, NoisyPointsGiveTheUnderlyingLineApproximately) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(-0.02, 0.02);  // +-2%, as repeated timings scatter
  std::vector<CostPoint> points;
  for (int repeat = 0; repeat < 4; ++repeat) {
    for (CostPoint p : points_on(2e-3, 1e-7, {0, 256, 512, 1024, 2048, 4096}, 32)) {
      p.seconds_per_token *= 1.0 + noise(rng);
      points.push_back(p);
    }
  }
  const auto fit = fit_cost_line(points);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_NEAR(fit->per_token_seconds, 2e-3, 0.02 * 2e-3);
  EXPECT_NEAR(fit->per_context_token_seconds, 1e-7, 0.25 * 1e-7);
}

TEST(CostFit, OnePointGivesAFlatLine) {
  const auto fit = fit_cost_line({CostPoint{0, 32, 3e-3}});
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_DOUBLE_EQ(fit->per_token_seconds, 3e-3);
  EXPECT_EQ(fit->per_context_token_seconds, 0.0);
}

TEST(CostFit, PointsAtOnePositionGiveTheirMean) {
  const auto fit = fit_cost_line({CostPoint{512, 32, 2e-3}, CostPoint{512, 32, 4e-3}});
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_DOUBLE_EQ(fit->per_token_seconds, 3e-3);
  EXPECT_EQ(fit->per_context_token_seconds, 0.0);
}

TEST(CostFit, ADecreasingSlopeIsClampedToFlat) {
  const auto fit = fit_cost_line(points_on(2e-3, -1e-7, {0, 1024, 2048}, 32));
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_EQ(fit->per_context_token_seconds, 0.0);
  EXPECT_NEAR(fit->per_token_seconds, 2e-3 - 1e-7 * (1024 + 15.5), 1e-12);  // the mean of the points
}

TEST(CostFit, RejectsNoPointsInvalidPointsAndAFreeToken) {
  EXPECT_FALSE(fit_cost_line({}).ok());
  EXPECT_FALSE(fit_cost_line({CostPoint{0, 32, std::nan("")}}).ok());
  EXPECT_FALSE(fit_cost_line({CostPoint{0, 0, 1e-3}}).ok());
  EXPECT_FALSE(fit_cost_line({CostPoint{-1, 32, 1e-3}}).ok());
  // Steeply convex: the line through them crosses zero before position 0.
  const auto fit = fit_cost_line({CostPoint{0, 1, 1e-9}, CostPoint{1000, 1, 1e-9}, CostPoint{2000, 1, 1.0}});
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.error().message().find("a > 0"), std::string::npos) << fit.error().message();
}

CostModel measured_model() {
  CostModel m;
  m.per_token_seconds = 1.5e-3;
  m.per_context_token_seconds = 2.5e-8;
  m.copy_bytes_per_second = 7.25e9;
  m.disk_read_bytes_per_second = 1.25e9;
  m.measured.model_file = "model.gguf";
  m.measured.measured_at = "2026-12-01T10:00:00Z";
  m.measured.threads = 2;
  m.measured.isa = "avx512";
  m.measured.disk_cache_dropped = true;
  m.measured.points = {CostPoint{0, 32, 1.5e-3}, CostPoint{256, 32, 1.6e-3}};
  return m;
}

TEST(CostModelFile, RoundTripsEveryField) {
  const std::string path = temp_path("profile.json");
  const CostModel m = measured_model();
  ASSERT_TRUE(save_cost_model(m, path).ok());
  const auto loaded = load_cost_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded->per_token_seconds, m.per_token_seconds);
  EXPECT_EQ(loaded->per_context_token_seconds, m.per_context_token_seconds);
  EXPECT_EQ(loaded->copy_bytes_per_second, m.copy_bytes_per_second);
  EXPECT_EQ(loaded->disk_read_bytes_per_second, m.disk_read_bytes_per_second);
  EXPECT_EQ(loaded->source, path);
  const CostProvenance& p = loaded->measured;
  EXPECT_EQ(p.model_file, "model.gguf");
  EXPECT_EQ(p.measured_at, "2026-12-01T10:00:00Z");
  EXPECT_EQ(p.threads, 2);
  EXPECT_EQ(p.isa, "avx512");
  EXPECT_TRUE(p.disk_cache_dropped);
  ASSERT_EQ(p.points.size(), 2u);
  EXPECT_EQ(p.points[1].start, 256);
  EXPECT_EQ(p.points[1].tokens, 32);
  EXPECT_EQ(p.points[1].seconds_per_token, 1.6e-3);
  std::remove(path.c_str());
}

TEST(CostModelFile, TravelsAsTextWithTheSameChecks) {
  const CostModel m = measured_model();
  const auto text = cost_model_json(m);
  ASSERT_TRUE(text.ok()) << text.error().message();
  EXPECT_EQ(text->find('\n'), std::string::npos);  // compact, for an etcd value
  const auto back = parse_cost_model(*text, "instance i-1");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->source, "instance i-1");
  EXPECT_EQ(back->per_token_seconds, m.per_token_seconds);
  ASSERT_EQ(back->measured.points.size(), 2u);
  EXPECT_EQ(back->seconds_per_token_at(300), m.seconds_per_token_at(300));
  const auto bad = parse_cost_model(R"({"per_token_seconds": -1})", "instance i-2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("instance i-2: 'per_token_seconds' must be a finite number > 0"), std::string::npos)
      << bad.error().message();
  EXPECT_FALSE(parse_cost_model("{", "x").ok());
  EXPECT_FALSE(parse_cost_model("[]", "x").ok());
}

TEST(CostModelFile, TheFourNumbersAloneAreAProfile) {
  const std::string path = temp_path("profile.json");
  std::ofstream(path) << R"({"per_token_seconds": 0.002, "per_context_token_seconds": 0,
                            "copy_bytes_per_second": 1e10, "disk_read_bytes_per_second": 5e8})";
  const auto loaded = load_cost_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded->per_token_seconds, 0.002);
  EXPECT_EQ(loaded->per_context_token_seconds, 0.0);
  EXPECT_TRUE(loaded->measured.empty());
  std::remove(path.c_str());
}

TEST(CostModelFile, SaveRefusesWhatLoadWouldReject) {
  const std::string path = temp_path("profile.json");
  CostModel m = measured_model();
  m.per_token_seconds = std::nan("");
  const Status s = save_cost_model(m, path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("per_token_seconds"), std::string::npos) << s.error().message();
  m = measured_model();
  m.copy_bytes_per_second = 0;
  EXPECT_FALSE(save_cost_model(m, path).ok());
  m = measured_model();
  m.measured.points[0].seconds_per_token = -1;
  EXPECT_FALSE(save_cost_model(m, path).ok());
  EXPECT_FALSE(std::ifstream(path).good());  // nothing written
}

// Writes `text` as a profile, loads it, and returns the error (empty when it loaded).
std::string load_error(const std::string& text) {
  const std::string path = temp_path("profile.json");
  std::ofstream(path) << text;
  const auto loaded = load_cost_model(path);
  std::remove(path.c_str());
  if (loaded.ok()) return "";
  EXPECT_NE(loaded.error().message().find(path), std::string::npos) << loaded.error().message();
  return loaded.error().message();
}

// A valid profile's text with one field's raw JSON value replaced (or, when empty, removed).
std::string profile_with(const std::string& field, const std::string& value) {
  std::map<std::string, std::string> fields = {{"per_token_seconds", "0.002"},
                                               {"per_context_token_seconds", "1e-7"},
                                               {"copy_bytes_per_second", "1e10"},
                                               {"disk_read_bytes_per_second", "5e8"}};
  if (value.empty()) {
    fields.erase(field);
  } else {
    fields[field] = value;
  }
  std::string text = "{";
  for (const auto& [name, raw] : fields) text += (text.size() > 1 ? ", \"" : "\"") + name + "\": " + raw;
  return text + "}";
}

TEST(CostModelFile, MalformedFilesNameTheFileAndTheField) {
  EXPECT_NE(load_error("per_token_seconds = 1").find("not valid JSON"), std::string::npos);
  EXPECT_NE(load_error("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(load_error(profile_with("copy_bytes_per_second", "")).find("missing field 'copy_bytes_per_second'"),
            std::string::npos);
  EXPECT_NE(load_error(profile_with("per_token_seconds", "-0.001")).find("'per_token_seconds' must be"), std::string::npos);
  EXPECT_NE(load_error(profile_with("per_token_seconds", "0")).find("'per_token_seconds' must be"), std::string::npos);
  EXPECT_NE(load_error(profile_with("per_context_token_seconds", "-1e-9")).find("'per_context_token_seconds'"),
            std::string::npos);
  EXPECT_NE(load_error(profile_with("disk_read_bytes_per_second", "\"fast\"")).find("'disk_read_bytes_per_second' must be a number"),
            std::string::npos);
  EXPECT_NE(load_error(profile_with("disk_read_bytes_per_second", "null")).find("'disk_read_bytes_per_second'"),
            std::string::npos);
  // JSON has no NaN or infinity: such files do not parse (and overflow is refused too).
  EXPECT_NE(load_error(profile_with("per_token_seconds", "NaN")), "");
  EXPECT_NE(load_error(profile_with("per_token_seconds", "1e999")), "");
  EXPECT_EQ(load_error(profile_with("per_context_token_seconds", "0")), "");  // a flat line is valid
}

TEST(CostModelFile, MalformedMeasurementsNameTheField) {
  const std::string base = profile_with("per_token_seconds", "0.002");
  const auto with_measured = [&](const std::string& measured) {
    return base.substr(0, base.size() - 1) + ", \"measured\": " + measured + "}";
  };
  EXPECT_NE(load_error(with_measured("3")).find("'measured' must be an object"), std::string::npos);
  EXPECT_NE(load_error(with_measured(R"({"threads": -2})")).find("'measured.threads'"), std::string::npos);
  EXPECT_NE(load_error(with_measured(R"({"isa": 5})")).find("'measured.isa'"), std::string::npos);
  EXPECT_NE(load_error(with_measured(R"({"points": {}})")).find("'measured.points' must be an array"), std::string::npos);
  EXPECT_NE(load_error(with_measured(R"({"points": [{"start": 0, "tokens": 0, "seconds_per_token": 1e-3}]})"))
                .find("'measured.points[0].tokens'"),
            std::string::npos);
  EXPECT_NE(load_error(with_measured(R"({"points": [{"start": 0, "tokens": 32, "seconds_per_token": 1e-3},
                                                     {"start": 256, "tokens": 32, "seconds_per_token": "slow"}]})"))
                .find("'measured.points[1].seconds_per_token'"),
            std::string::npos);
  EXPECT_EQ(load_error(with_measured(R"({"model_file": "m.gguf", "points": []})")), "");
}

TEST(CostModelFile, AMissingFileIsAnErrorNamingIt) {
  const auto loaded = load_cost_model("/nonexistent/model.gguf.profile.json");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message().find("/nonexistent/model.gguf.profile.json"), std::string::npos);
}

TEST(CostModelFile, TheProfileLivesBesideTheModel) {
  EXPECT_EQ(cost_model_path_for("/models/gemma.gguf"), "/models/gemma.gguf.profile.json");
}

}  // namespace
}  // namespace mnemo

namespace mnemo {
namespace {

TEST(CostModelInterpolation, FollowsTheMeasuredPointsAndExtendsWithTheSlope) {
  CostModel m;
  m.per_token_seconds = 1.0;
  m.per_context_token_seconds = 0.001;
  EXPECT_DOUBLE_EQ(m.seconds_per_token_at(1000), 2.0);  // no points: the line
  EXPECT_DOUBLE_EQ(m.recompute_seconds(0, 4), 4 * (1.0 + 0.001 * 1.5));
  // A bend at 512, as a sliding-window model has: steep before, flat after.
  m.measured.points = {{0, 1, 1.0}, {512, 1, 3.0}, {2048, 1, 3.5}};
  EXPECT_DOUBLE_EQ(m.seconds_per_token_at(-5), 1.0);
  EXPECT_DOUBLE_EQ(m.seconds_per_token_at(256), 2.0);
  EXPECT_DOUBLE_EQ(m.seconds_per_token_at(512), 3.0);
  EXPECT_DOUBLE_EQ(m.seconds_per_token_at(1280), 3.25);
  EXPECT_DOUBLE_EQ(m.seconds_per_token_at(3048), 3.5 + 0.001 * 1000);
  // A 3-token run at its mean position (256); long runs summed step by step.
  EXPECT_DOUBLE_EQ(m.recompute_seconds(255, 258), 3 * 2.0);
  EXPECT_NEAR(m.recompute_seconds(0, 512), 512 * 2.0, 512 * 0.01);
  EXPECT_DOUBLE_EQ(m.recompute_seconds(10, 10), 0.0);
}

}  // namespace
}  // namespace mnemo
