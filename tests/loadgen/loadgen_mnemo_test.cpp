// `mnemo loadgen` against real `mnemo serve` processes on the default model, at a tiny scale
// (3 conversations of at most 2 turns, 8-token replies, 0.1 s think time): every planned turn is
// sent once, every reply has exactly the forced length, the prompt lengths planned here equal
// the server's, and later turns reuse cached KV only when the prefix cache is on; the Responses
// API mode chains turns by previous_response_id.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "loadgen/loadgen.h"
#include "util/paths.h"

namespace mnemo::loadgen {
namespace {

const std::string kFixture = std::string(MNEMO_SOURCE_DIR) + "/tests/loadgen/fixtures/conversations.jsonl";

// A `mnemo serve --port 0` child process; its port is read from the line it prints on start.
class ServerProcess {
 public:
  explicit ServerProcess(std::string extra_args) {
    // Each server gets its own state (the KV disk tier persists): a conversation cached by an
    // earlier test or run must not be found by this one.
    if (extra_args.find("--state-dir") == std::string::npos) {
      char tmpl[] = "/tmp/mnemo-loadgen-state-XXXXXX";
      if (mkdtemp(tmpl) != nullptr) {
        state_dir_ = tmpl;
        extra_args += " --state-dir " + state_dir_;
      }
    }
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      // Gemma 3, whose tokenizer the load generator plans with (serve's own default is the chat model).
      const std::string command = std::string("exec ") + MNEMO_BIN + " serve -m " + reference_model_path() +
                                  " --port 0 --kv-tokens 4096 --grace-seconds 1 " + extra_args;
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    stdout_ = out[0];
    std::string seen;
    const std::regex address(R"(at http://127\.0\.0\.1:(\d+)/)");
    for (int waited_ms = 0; waited_ms < 60000 && port_ == 0;) {
      pollfd fd{stdout_, POLLIN, 0};
      if (poll(&fd, 1, 200) <= 0) {
        waited_ms += 200;
        continue;
      }
      std::array<char, 512> buffer{};
      const ssize_t n = read(stdout_, buffer.data(), buffer.size());
      if (n <= 0) break;  // the server exited
      seen.append(buffer.data(), static_cast<size_t>(n));
      std::smatch match;
      if (std::regex_search(seen, match, address)) port_ = std::stoi(match[1]);
    }
  }

  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (stdout_ >= 0) close(stdout_);
    if (!state_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(state_dir_, ec);
    }
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  int port_ = 0;
  std::string state_dir_;
};

LoadgenOptions tiny_options(const std::string& url) {
  LoadgenOptions o;
  o.url = url;
  o.data_path = kFixture;
  o.tokenizer_model = reference_model_path();
  o.num_conversations = 3;
  o.limits = WorkloadLimits{.max_context = 512, .max_output_tokens = 8, .max_turns = 2};
  o.think_time_s = 0.1;
  o.request_timeout_s = 60.0;
  o.slo = Slo{30.0, 5.0};  // generous: a loaded 2-core machine must still pass
  o.run.seed = 0;          // file order: the fixture's first three conversations
  o.run.show_progress = false;
  return o;
}

void expect_every_turn_served_at_its_forced_length(const Loadgen& loadgen, const RunOutcome& outcome) {
  const auto workload = loadgen.plan(outcome.rate, 0);
  ASSERT_TRUE(workload.ok());
  ASSERT_EQ(total_turns(*workload), 6);  // 2 + 2 + 2 turns
  ASSERT_EQ(outcome.records.size(), 6u);
  for (const RequestRecord& r : outcome.records) {
    SCOPED_TRACE(r.conversation_id + " turn " + std::to_string(r.turn));
    ASSERT_TRUE(r.ok) << r.error;
    const PlannedTurn& planned = (*workload)[static_cast<size_t>(r.conversation)].turns[static_cast<size_t>(r.turn)];
    EXPECT_EQ(r.max_tokens, planned.max_tokens);
    EXPECT_EQ(r.completion_tokens, planned.max_tokens);
    EXPECT_EQ(r.prompt_tokens, planned.prompt_tokens);  // same tokenizer and template as the server
    EXPECT_GE(r.first_token_s, r.sent_s);
    EXPECT_GE(r.finished_s, r.first_token_s);
  }
  // Each conversation's turns in order, the second a think time after the first ended.
  for (const RequestRecord& later : outcome.records) {
    if (later.turn == 0) continue;
    for (const RequestRecord& first : outcome.records) {
      if (first.conversation == later.conversation && first.turn == 0) {
        EXPECT_GE(later.scheduled_s, first.finished_s);
      }
    }
  }
  const RunSummary& s = outcome.summary;
  EXPECT_EQ(s.requests_ok, 6);
  EXPECT_EQ(s.first_turns.requests, 3);
  EXPECT_EQ(s.later_turns.requests, 3);
  EXPECT_EQ(s.output_tokens, 6 * 8);  // the fixture's replies are all longer than 8 tokens
  EXPECT_TRUE(s.slo_met);
  EXPECT_GT(s.request_throughput, 0.0);
}

TEST(LoadgenOnMnemo, PrefixCacheOnReusesEarlierTurns) {
  ServerProcess server("");
  ASSERT_NE(server.port(), 0) << "mnemo serve did not start";
  auto loadgen = Loadgen::prepare(tiny_options(server.url()));
  ASSERT_TRUE(loadgen.ok()) << loadgen.error().message();
  auto outcome = loadgen->run(2.0);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message();
  expect_every_turn_served_at_its_forced_length(*loadgen, *outcome);
  for (const RequestRecord& r : outcome->records) {
    if (r.turn == 0) {
      EXPECT_EQ(r.cached_tokens, 0) << r.conversation_id;
    } else {
      EXPECT_GT(r.cached_tokens, 0) << r.conversation_id;
      EXPECT_LT(r.cached_tokens, r.prompt_tokens);
    }
  }
  EXPECT_GT(outcome->summary.later_turns.cached_share, 0.3);
  // The server's decode counters over the run: every generated token came from some pass.
  ASSERT_TRUE(outcome->summary.tokens_per_forward.has_value());
  EXPECT_GE(*outcome->summary.tokens_per_forward, 1.0);
  EXPECT_GE(outcome->summary.draft_acceptance, 0.0);
  EXPECT_LE(outcome->summary.draft_acceptance, 1.0);
}

TEST(LoadgenOnMnemo, NoPrefixCacheReusesNothing) {
  ServerProcess server("--no-prefix-cache");
  ASSERT_NE(server.port(), 0) << "mnemo serve did not start";
  auto loadgen = Loadgen::prepare(tiny_options(server.url()));
  ASSERT_TRUE(loadgen.ok()) << loadgen.error().message();
  auto outcome = loadgen->run(2.0);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message();
  expect_every_turn_served_at_its_forced_length(*loadgen, *outcome);
  for (const RequestRecord& r : outcome->records) EXPECT_EQ(r.cached_tokens, 0) << r.conversation_id;
}

// The second turn's prompt of a conversation, its first turn's prompt and reply lengths.
struct TwoTurns {
  int32_t first_prompt = 0;
  int32_t first_reply = 0;
  int32_t second_cached = 0;
};
std::vector<TwoTurns> two_turns_of(const RunOutcome& outcome) {
  std::vector<TwoTurns> pairs;
  for (const RequestRecord& later : outcome.records) {
    if (later.turn != 1) continue;
    for (const RequestRecord& first : outcome.records) {
      if (first.conversation == later.conversation && first.turn == 0) {
        pairs.push_back({first.prompt_tokens, first.completion_tokens, later.cached_tokens});
      }
    }
  }
  return pairs;
}

// With the model's own replies as history, a second turn hits the first turn's prompt and the
// whole chunks of its generated reply; with the data set's it cannot get past the first prompt.
// 40-token replies, so that every reply fills at least one chunk (32 tokens) of its own.
TEST(LoadgenOnMnemo, ModelHistoryHitsTheGeneratedReply) {
  ServerProcess server("");
  ASSERT_NE(server.port(), 0) << "mnemo serve did not start";
  for (const History history : {History::kModel, History::kDataset}) {
    const bool model = history == History::kModel;
    SCOPED_TRACE(model ? "model history" : "dataset history");
    LoadgenOptions options = tiny_options(server.url());
    options.limits.max_output_tokens = 40;
    options.history = history;
    // The same conversations in both passes: the model's replies never equal the data set's,
    // so what one pass cached cannot change the other's bound.
    auto loadgen = Loadgen::prepare(options);
    ASSERT_TRUE(loadgen.ok()) << loadgen.error().message();
    auto outcome = loadgen->run(2.0);
    ASSERT_TRUE(outcome.ok()) << outcome.error().message();
    for (const RequestRecord& r : outcome->records) ASSERT_TRUE(r.ok) << r.error;
    const std::vector<TwoTurns> pairs = two_turns_of(*outcome);
    ASSERT_EQ(pairs.size(), 3u);
    for (const TwoTurns& p : pairs) {
      ASSERT_EQ(p.first_reply, 40);
      if (model) {
        EXPECT_GE(p.second_cached, (p.first_prompt + p.first_reply) / 32 * 32 - 32);
        EXPECT_GT(p.second_cached, p.first_prompt);
      } else {
        EXPECT_LE(p.second_cached, p.first_prompt);
      }
    }
  }
}

TEST(LoadgenOnMnemo, ModelHistoryIsForChatCompletionsOnly) {
  LoadgenOptions options = tiny_options("http://127.0.0.1:1");
  options.model = "m";  // no server to ask
  options.api = Api::kResponses;
  options.history = History::kModel;
  const auto loadgen = Loadgen::prepare(options);
  ASSERT_FALSE(loadgen.ok());
  EXPECT_NE(loadgen.error().message().find("Chat Completions"), std::string::npos);
}

TEST(LoadgenOnMnemo, ResponsesApiChainsTurnsByPreviousResponseId) {
  ServerProcess server("--state-dir " + ::testing::TempDir() + "/loadgen_responses_state");
  ASSERT_NE(server.port(), 0) << "mnemo serve did not start";
  LoadgenOptions options = tiny_options(server.url());
  options.api = Api::kResponses;
  auto loadgen = Loadgen::prepare(options);
  ASSERT_TRUE(loadgen.ok()) << loadgen.error().message();
  auto outcome = loadgen->run(2.0);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message();
  ASSERT_EQ(outcome->records.size(), 6u);
  for (const RequestRecord& later : outcome->records) {
    SCOPED_TRACE(later.conversation_id + " turn " + std::to_string(later.turn));
    ASSERT_TRUE(later.ok) << later.error;
    EXPECT_EQ(later.completion_tokens, later.max_tokens);
    EXPECT_FALSE(later.response_id.empty());
    if (later.turn == 0) continue;
    // The server rebuilt the history from the stored first turn (with its own reply) and
    // reused the KV of its prompt.
    EXPECT_GT(later.cached_tokens, 0);
    for (const RequestRecord& first : outcome->records) {
      if (first.conversation == later.conversation && first.turn == 0) {
        EXPECT_GT(later.prompt_tokens, first.prompt_tokens + first.completion_tokens);
      }
    }
  }
}

TEST(LoadgenOnMnemo, SweepCommandWritesEveryPoint) {
  ServerProcess server("");
  ASSERT_NE(server.port(), 0) << "mnemo serve did not start";
  const std::string json_path = ::testing::TempDir() + "/loadgen_sweep.json";
  const std::string csv_path = ::testing::TempDir() + "/loadgen_sweep.csv";
  const std::string command = std::string(MNEMO_BIN) + " loadgen sweep --url " + server.url() + " --data " + kFixture +
                              " -n 1 --max-turns 2 --max-output-tokens 4 --think-time 0.1 --seed 0 --rates 2,1"
                              " --slo-ttft-p90 30 --slo-tpot-p90 5 --label mnemo -q --json " + json_path + " --csv " + csv_path +
                              " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  for (size_t n; (n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) output.append(buffer.data(), n);
  ASSERT_EQ(pclose(pipe), 0) << output;
  EXPECT_NE(output.find("highest rate meeting the SLO: 2"), std::string::npos) << output;

  std::ifstream json_file(json_path);
  const auto result = nlohmann::json::parse(json_file, nullptr, false);
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result["system"], "mnemo");
  ASSERT_EQ(result["points"].size(), 2u);
  EXPECT_EQ(result["points"][0]["rate"], 1.0);  // run in increasing order
  EXPECT_EQ(result["max_rate_meeting_slo"], 2.0);
  // Point 0 replays the fixture's first conversation, point 1 its second: 2 turns each.
  EXPECT_EQ(result["points"][0]["requests"].size(), 2u);
  EXPECT_EQ(result["points"][1]["requests"][0]["conversation_id"], "trip_1");
  EXPECT_EQ(result["points"][1]["summary"]["first_turns"]["cached_tokens"], 0);

  std::ifstream csv_file(csv_path);
  std::stringstream csv;
  csv << csv_file.rdbuf();
  const std::string text = csv.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);  // header + 4 requests
}

}  // namespace
}  // namespace mnemo::loadgen
