#include "loadgen/load_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <queue>
#include <random>
#include <thread>

#include "loadgen/progress_bar.h"

namespace mnemo::loadgen {

Schedule make_schedule(const std::vector<PlannedConversation>& workload, double rate, const ThinkTime& think,
                       uint64_t seed) {
  Schedule schedule;
  std::mt19937_64 arrivals(seed);
  std::mt19937_64 thinking(seed ^ 0x5bd1e995u);
  std::exponential_distribution<double> gap(rate > 0.0 ? rate : 1.0);
  double t = 0.0;
  for (const PlannedConversation& conversation : workload) {
    schedule.arrival_s.push_back(t);
    t += rate > 0.0 ? gap(arrivals) : 0.0;
    std::vector<double> thinks;
    for (size_t turn = 1; turn < conversation.turns.size(); ++turn) thinks.push_back(think.sample(thinking));
    schedule.think_s.push_back(std::move(thinks));
  }
  return schedule;
}

namespace {

using Clock = std::chrono::steady_clock;

struct DueTurn {
  double at_s;
  int32_t conversation;
  int32_t turn;
  bool operator>(const DueTurn& other) const { return at_s > other.at_s; }
};

// The shared state of a run: the scheduler (the calling thread) moves due turns to `ready`;
// workers, one per allowed in-flight request, send them and schedule the next turn.
class Run {
 public:
  Run(const std::vector<PlannedConversation>& workload, const ThinkTime& think, const ServerEndpoint& endpoint, Api api,
      const RequestOptions& options, const RunConfig& config)
      : workload_(workload),
        config_(config),
        api_(api),
        history_(options.history),
        schedule_(make_schedule(workload, config.rate, think, config.seed)),
        conversation_state_(workload.size()),
        start_(Clock::now()) {
    for (size_t c = 0; c < workload.size(); ++c) due_.push({schedule_.arrival_s[c], static_cast<int32_t>(c), 0});
    const int32_t workers = std::max<int32_t>(1, config.max_in_flight);
    for (int32_t i = 0; i < workers; ++i) clients_.push_back(std::make_unique<OpenAiClient>(endpoint, api, options));
  }

  RunResult execute() {
    RunResult result;
    // The turns of the conversations that start; those arriving after the duration never do.
    for (size_t c = 0; c < workload_.size(); ++c) {
      if (config_.duration_s <= 0.0 || schedule_.arrival_s[c] <= config_.duration_s) {
        result.turns_planned += static_cast<int64_t>(workload_[c].turns.size());
      }
    }
    std::vector<std::thread> workers;
    for (auto& client : clients_) workers.emplace_back([this, c = client.get()] { work(*c); });
    schedule_turns(result.turns_planned);
    for (std::thread& worker : workers) worker.join();
    result.records = std::move(records_);
    result.wall_s = now();
    return result;
  }

 private:
  double now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  Clock::time_point at(double seconds) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  void schedule_turns(int64_t turns_planned) {
    ProgressBar bar(config_.label, config_.show_progress);
    const double kInfinity = std::numeric_limits<double>::infinity();
    const double arrivals_until = config_.duration_s > 0.0 ? config_.duration_s : kInfinity;
    const double abort_at = arrivals_until + std::max(0.0, config_.drain_timeout_s);
    bool aborted = false;
    std::unique_lock lock(mutex_);
    while (true) {
      const double t = now();
      while (!due_.empty() && due_.top().at_s <= t) {
        // A conversation arriving after the duration does not start; started ones go on.
        if (due_.top().turn > 0 || due_.top().at_s <= arrivals_until) {
          ready_.push_back(due_.top());
          work_ready_.notify_one();
        }
        due_.pop();
      }
      if (t >= abort_at) {
        // The drain deadline: nothing more is sent, and what still runs is aborted.
        due_ = {};
        ready_.clear();
        if (!aborted) {
          aborted = true;
          for (auto& client : clients_) client->abort();
        }
      }
      const Progress progress{static_cast<int64_t>(records_.size()), turns_planned, failed_, in_flight_, t};
      bar.update(progress);
      if (due_.empty() && ready_.empty() && in_flight_ == 0) {
        bar.finish(progress);
        break;
      }
      double wake = t + 0.5;  // progress refresh
      if (!due_.empty()) wake = std::min(wake, due_.top().at_s);
      if (abort_at > t) wake = std::min(wake, abort_at);
      scheduler_wakeup_.wait_until(lock, at(wake));
    }
    finished_ = true;
    work_ready_.notify_all();
  }

  void work(OpenAiClient& client) {
    std::unique_lock lock(mutex_);
    while (true) {
      work_ready_.wait(lock, [&] { return finished_ || !ready_.empty(); });
      if (ready_.empty()) return;
      const DueTurn due = ready_.front();
      ready_.pop_front();
      ++in_flight_;
      const ConversationState state = conversation_state_[static_cast<size_t>(due.conversation)];
      lock.unlock();

      const PlannedConversation& conversation = workload_[static_cast<size_t>(due.conversation)];
      const auto turn = static_cast<size_t>(due.turn);
      RequestRecord record;
      record.conversation = due.conversation;
      record.conversation_id = conversation.id;
      record.turn = due.turn;
      record.max_tokens = conversation.turns[turn].max_tokens;
      record.planned_prompt_tokens = conversation.turns[turn].prompt_tokens;
      record.scheduled_s = due.at_s;
      client.send(conversation, turn, state, [this] { return now(); }, record);

      lock.lock();
      --in_flight_;
      if (!record.ok) ++failed_;
      // A turn whose next one needs its reply (a response to chain to, or the text) ends its
      // conversation when it fails.
      const bool chain_broken = (api_ == Api::kResponses || history_ == History::kModel) && !record.ok;
      if (turn + 1 < conversation.turns.size() && !chain_broken) {
        ConversationState& next = conversation_state_[static_cast<size_t>(due.conversation)];
        next.previous_response_id = record.response_id;
        if (history_ == History::kModel) next.model_replies.push_back(record.reply_text);
        const double think = schedule_.think_s[static_cast<size_t>(due.conversation)][turn];
        due_.push({record.finished_s + think, due.conversation, due.turn + 1});
      }
      record.reply_text.clear();
      record.reply_text.shrink_to_fit();
      records_.push_back(std::move(record));
      scheduler_wakeup_.notify_one();
    }
  }

  const std::vector<PlannedConversation>& workload_;
  const RunConfig config_;
  const Api api_;
  const History history_;
  const Schedule schedule_;
  std::vector<std::unique_ptr<OpenAiClient>> clients_;

  std::mutex mutex_;
  std::condition_variable scheduler_wakeup_;
  std::condition_variable work_ready_;
  // Guarded by mutex_:
  std::priority_queue<DueTurn, std::vector<DueTurn>, std::greater<>> due_;
  std::deque<DueTurn> ready_;
  std::vector<ConversationState> conversation_state_;
  std::vector<RequestRecord> records_;  // without reply_text, which only the next turn needs
  int32_t in_flight_ = 0;
  int64_t failed_ = 0;
  bool finished_ = false;

  const Clock::time_point start_;
};

}  // namespace

RunResult run_load(const std::vector<PlannedConversation>& workload, const ThinkTime& think, const ServerEndpoint& endpoint,
                   Api api, const RequestOptions& options, const RunConfig& config) {
  Run run(workload, think, endpoint, api, options, config);
  return run.execute();
}

}  // namespace mnemo::loadgen
