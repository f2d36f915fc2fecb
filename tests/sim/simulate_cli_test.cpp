// `mnemo simulate` end to end on a small slice of the English ShareGPT set with estimated token
// counts (no model): the table names every policy, the JSON carries the configuration and the
// per-policy figures, and bad sizes or policies are refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "e2e/run_mnemo.h"

namespace mnemo::sim {
namespace {

using mnemo::testing::run_mnemo;

TEST(SimulateCli, PrintsTheTableAndWritesJson) {
  const std::string json_path = (std::filesystem::temp_directory_path() / ("mnemo_simulate_" + std::to_string(getpid()) + ".json")).string();
  const auto r = run_mnemo("simulate --estimate-tokens -n 60 --rate 0.2 --think-mean 60 --device-bytes 16M --host-bytes 48M "
                           "--seed 3 --json " + json_path);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* name : {"pensieve", "lru", "tail-first", "mnemo", "oracle", "slru", "arc", "live working set"}) {
    EXPECT_NE(r.output.find(name), std::string::npos) << name << "\n" << r.output;
  }
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["config"]["capacity_bytes"]["device"], 16 << 20);
  EXPECT_EQ(j["config"]["capacity_bytes"]["host"], 48 << 20);
  EXPECT_EQ(j["config"]["kv_bytes_per_token"], 18432);
  EXPECT_EQ(j["config"]["sliding_window"], 512);  // the default model's geometry
  EXPECT_EQ(j["config"]["global_layers"], 3);
  EXPECT_EQ(j["trace"]["conversations"], 60);
  ASSERT_EQ(j["policies"].size(), 7u);
  for (const auto& p : j["policies"]) {
    EXPECT_EQ(p["hit_tokens"]["device"].get<int64_t>() + p["hit_tokens"]["host"].get<int64_t>() +
                  p["hit_tokens"]["disk"].get<int64_t>() + p["recomputed_tokens"].get<int64_t>(),
              p["reusable_tokens"].get<int64_t>());
    if (p["policy"] == "lru") {
      EXPECT_DOUBLE_EQ(p["recomputed_vs_lru"].get<double>(), 1.0);
    }
  }
}

// --instances: the cluster simulation of each count and routing policy on the Mooncake trace.
TEST(SimulateCli, AClusterOfEachSizeUnderEachRoutingPolicy) {
  const std::string json_path = (std::filesystem::temp_directory_path() / ("mnemo_cluster_" + std::to_string(getpid()) + ".json")).string();
  const auto r = run_mnemo("simulate --estimate-tokens --sliding-window 0 --instances 2,8 --routing cache-aware,round-robin "
                           "--max-requests 300 --json " + json_path);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cluster: 300 requests"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cache policy mnemo"), std::string::npos) << r.output;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(j.is_object()) << r.output;
  ASSERT_EQ(j["outcomes"].size(), 4u);
  EXPECT_EQ(j["outcomes"][0]["instances"], 2);
  EXPECT_EQ(j["outcomes"][1]["routing"], "round-robin");
  EXPECT_EQ(j["outcomes"][3]["instances"], 8);
  for (const auto& o : j["outcomes"]) {
    EXPECT_EQ(o["requests"], 300);
    EXPECT_GT(o["ttft_s"]["mean"].get<double>(), 0.0);
  }
  EXPECT_NE(run_mnemo("simulate --estimate-tokens --instances 2 --mooncake-trace /nonexistent.jsonl").status, 0);
  EXPECT_NE(run_mnemo("simulate --estimate-tokens --instances 2 --routing nearest").status, 0);
}

// A compressed host holds more chunks in the same bytes, less the share `serve` keeps in F16;
// with F16 everywhere the capacities are the bytes' own. Fewer tokens recomputed at equal bytes.
TEST(SimulateCli, ACompressedHostHoldsMoreChunksInTheSameBytes) {
  const std::string base = "simulate --estimate-tokens -n 60 --rate 0.2 --think-mean 60 --device-bytes 64M --host-bytes 32M "
                           "--seed 3 --policies lru ";
  const auto f16 = run_mnemo(base + "--kv-types f16");
  const auto q8 = run_mnemo(base + "--kv-types device=f16,host=q8_0,disk=q8_0 --host-exact-share 0.1");
  ASSERT_EQ(f16.status, 0) << f16.output;
  ASSERT_EQ(q8.status, 0) << q8.output;
  // 576 KiB chunks: 32 MiB hold 56 of F16; q8_0 (306 KiB a chunk) in 90% of them: 96.
  EXPECT_NE(f16.output.find("host 32 MiB (56 chunks"), std::string::npos) << f16.output;
  EXPECT_NE(q8.output.find("KV device=f16,host=q8_0,disk=q8_0 (10% of the host in f16, empty here)"), std::string::npos) << q8.output;
  EXPECT_NE(q8.output.find("host 32 MiB (96 chunks"), std::string::npos) << q8.output;
  const auto recomputed = [](const std::string& out) {
    const size_t row = out.find("\nlru ");
    return row == std::string::npos ? -1L : std::stol(out.substr(row + 5));
  };
  EXPECT_LT(recomputed(q8.output), recomputed(f16.output)) << f16.output << q8.output;
  // 64 MiB hold fewer tokens than the running turns at 0.2 conversations a second: turns wait,
  // and one turn (a 3,580-token prompt, 112 of the device's 113 chunks, and its reply) is refused.
  EXPECT_NE(f16.output.find("turns found the device held by running turns and waited for them"), std::string::npos)
      << f16.output;
  EXPECT_NE(f16.output.find("lru: 1 turns (3580 prompt tokens) need more blocks than the whole device has"), std::string::npos)
      << f16.output;
  const auto bad = run_mnemo(base + "--kv-types host=q3");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("unknown KV element type 'q3'"), std::string::npos) << bad.output;
}

TEST(SimulateCli, RefusesBadSizesAndUnknownPolicies) {
  const auto bad_size = run_mnemo("simulate --estimate-tokens -n 5 --device-bytes 12Q");
  EXPECT_NE(bad_size.status, 0);
  EXPECT_NE(bad_size.output.find("--device-bytes"), std::string::npos) << bad_size.output;
  const auto bad_policy = run_mnemo("simulate --estimate-tokens -n 5 --policies lru,mru");
  EXPECT_NE(bad_policy.status, 0);
  const auto too_small = run_mnemo("simulate --estimate-tokens -n 5 --device-bytes 1K");
  EXPECT_NE(too_small.status, 0);
  EXPECT_NE(too_small.output.find("holds no chunk"), std::string::npos) << too_small.output;
}

}  // namespace
}  // namespace mnemo::sim
