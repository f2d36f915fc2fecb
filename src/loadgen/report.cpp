#include "loadgen/report.h"

#include <fstream>

namespace mnemo::loadgen {

using nlohmann::json;

json to_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}};
}

json to_json(const GroupSummary& g) {
  return {{"requests", g.requests},          {"ttft_s", to_json(g.ttft)},
          {"tpot_s", to_json(g.tpot)},          {"e2e_s", to_json(g.e2e)},
          {"prompt_tokens", g.prompt_tokens},   {"cached_tokens", g.cached_tokens},
          {"cached_share", g.cached_share}};
}

json to_json(const RunSummary& s) {
  json j = {{"window_s", s.window_s},
          {"turns_planned", s.turns_planned},
          {"conversations", s.conversations},
          {"requests_sent", s.requests_sent},
          {"requests_ok", s.requests_ok},
          {"requests_failed", s.requests_failed},
          {"output_tokens", s.output_tokens},
          {"request_throughput", s.request_throughput},
          {"output_throughput", s.output_throughput},
          {"max_client_queue_s", s.max_client_queue_s},
          {"all", to_json(s.all)},
          {"first_turns", to_json(s.first_turns)},
          {"later_turns", to_json(s.later_turns)},
          {"slo", {{"ttft_p90_s", s.slo.ttft_s}, {"tpot_p90_s", s.slo.tpot_s}}},
          {"requests_meeting_slo", s.requests_meeting_slo},
          {"goodput", s.goodput},
          {"slo_met", s.slo_met}};
  if (s.tokens_per_forward) {
    j["tokens_per_forward"] = *s.tokens_per_forward;
    j["drafted_tokens"] = s.drafted_tokens;
    j["draft_acceptance"] = s.draft_acceptance;
  }
  return j;
}

json to_json(const RequestRecord& r) {
  json j = {{"conversation", r.conversation},
            {"conversation_id", r.conversation_id},
            {"turn", r.turn},
            {"max_tokens", r.max_tokens},
            {"planned_prompt_tokens", r.planned_prompt_tokens},
            {"scheduled_s", r.scheduled_s},
            {"sent_s", r.sent_s},
            {"first_token_s", r.first_token_s},
            {"finished_s", r.finished_s},
            {"prompt_tokens", r.prompt_tokens},
            {"cached_tokens", r.cached_tokens},
            {"completion_tokens", r.completion_tokens},
            {"http_status", r.http_status},
            {"ok", r.ok}};
  if (r.ok) {
    j["ttft_s"] = r.ttft();
    j["e2e_s"] = r.e2e();
    if (r.has_tpot()) j["tpot_s"] = r.tpot();
  }
  if (!r.response_id.empty()) j["response_id"] = r.response_id;
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

json to_json(const std::vector<RequestRecord>& records) {
  json list = json::array();
  for (const RequestRecord& r : records) list.push_back(to_json(r));
  return list;
}

namespace {

std::string csv_quote(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + '"';
}

std::string optional_seconds(bool present, double value) { return present ? fmt::format("{:.6f}", value) : ""; }

}  // namespace

std::string csv_header() {
  return "rate,conversation,conversation_id,turn,max_tokens,planned_prompt_tokens,scheduled_s,sent_s,first_token_s,"
         "finished_s,ttft_s,tpot_s,e2e_s,prompt_tokens,cached_tokens,completion_tokens,http_status,ok,error\n";
}

std::string csv_row(const RequestRecord& r, double rate) {
  return fmt::format("{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{},{},{},{},{},{},{},{},{}\n", rate, r.conversation,
                     csv_quote(r.conversation_id), r.turn, r.max_tokens, r.planned_prompt_tokens, r.scheduled_s, r.sent_s,
                     r.first_token_s, r.finished_s, optional_seconds(r.ok, r.ttft()),
                     optional_seconds(r.ok && r.has_tpot(), r.ok && r.has_tpot() ? r.tpot() : 0.0),
                     optional_seconds(r.ok, r.e2e()), r.prompt_tokens, r.cached_tokens, r.completion_tokens, r.http_status,
                     r.ok ? 1 : 0, csv_quote(r.error));
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return make_error("{}: cannot open for writing", path);
  file << text;
  if (!file.flush()) return make_error("{}: write failed", path);
  return ok_status();
}

namespace {

std::string group_row(const char* name, const GroupSummary& g) {
  return fmt::format("{:<12} {:>6}  {:>7.3f} {:>7.3f} {:>7.3f}  {:>7.1f} {:>7.1f} {:>7.1f}  {:>7.3f} {:>7.3f} {:>7.3f}  {:>5.1f}%\n", name,
                     g.requests, g.ttft.p50, g.ttft.p90, g.ttft.p99, g.tpot.p50 * 1e3, g.tpot.p90 * 1e3, g.tpot.p99 * 1e3,
                     g.e2e.p50, g.e2e.p90, g.e2e.p99, g.cached_share * 100.0);
}

std::string bound(double value, const char* unit) { return value > 0.0 ? fmt::format("{} {}", value, unit) : "any"; }

}  // namespace

std::string format_summary(const RunSummary& s) {
  std::string out = fmt::format(
      "requests: {} planned, {} sent, {} ok, {} failed in {:.1f} s: {:.3f} requests/s, {:.1f} output tokens/s\n",
      s.turns_planned, s.requests_sent, s.requests_ok, s.requests_failed, s.window_s, s.request_throughput,
      s.output_throughput);
  if (s.max_client_queue_s > 0.5) {  // below that it is only thread wake-up latency
    out += fmt::format("note: the in-flight cap held requests back (up to {:.2f} s); raise --max-in-flight\n", s.max_client_queue_s);
  }
  out += "                   TTFT (s)                 TPOT (ms)                E2E (s)            cached\n";
  out += "group        n       p50     p90     p99      p50     p90     p99      p50     p90     p99  prompt\n";
  out += group_row("all", s.all);
  out += group_row("first turns", s.first_turns);
  out += group_row("turns >= 2", s.later_turns);
  out += fmt::format("SLO p90 TTFT <= {}, p90 TPOT <= {}: {}; goodput {:.3f} requests/s ({} of {} within)\n",
                     bound(s.slo.ttft_s, "s"), bound(s.slo.tpot_s, "s"), s.slo_met ? "met" : "NOT met", s.goodput,
                     s.requests_meeting_slo, s.requests_ok);
  if (s.tokens_per_forward) {
    out += fmt::format("decode: {:.2f} tokens per sequence and forward pass (server metrics); {:.0f} tokens drafted, {:.1f}% kept\n",
                       *s.tokens_per_forward, s.drafted_tokens, 100.0 * s.draft_acceptance);
  }
  return out;
}

std::string describe_workload(const std::vector<PlannedConversation>& workload) {
  std::vector<double> first_prompts;
  std::vector<double> later_prompts;
  std::vector<double> replies;
  int64_t stateless_prefill = 0;
  int64_t incremental_prefill = 0;  // what is new each turn: the last reply and the question
  for (const PlannedConversation& c : workload) {
    int32_t context_after_previous_turn = 0;
    for (size_t i = 0; i < c.turns.size(); ++i) {
      const PlannedTurn& t = c.turns[i];
      (i == 0 ? first_prompts : later_prompts).push_back(t.prompt_tokens);
      replies.push_back(t.max_tokens);
      stateless_prefill += t.prompt_tokens;
      incremental_prefill += std::max(0, t.prompt_tokens - context_after_previous_turn);
      // Only the prompt is reused: the generated reply differs from the data set's.
      context_after_previous_turn = t.prompt_tokens;
    }
  }
  const int64_t turns = total_turns(workload);
  const Distribution first = distribution_of(first_prompts);
  const Distribution later = distribution_of(later_prompts);
  const Distribution reply = distribution_of(replies);
  return fmt::format(
      "workload: {} conversations, {} turns ({:.2f} per conversation)\n"
      "prompt tokens, first turns: mean {:.0f}, p50 {:.0f}, p90 {:.0f}\n"
      "prompt tokens, turns >= 2:  mean {:.0f}, p50 {:.0f}, p90 {:.0f} ({} turns)\n"
      "forced reply tokens: mean {:.1f}, p50 {:.0f}; {} in all\n"
      "prefill tokens: {} without reuse, {} reusing each earlier prompt ({:.2f}x less)\n",
      workload.size(), turns, workload.empty() ? 0.0 : static_cast<double>(turns) / static_cast<double>(workload.size()),
      first.mean, first.p50, first.p90, later.mean, later.p50, later.p90, later.count, reply.mean, reply.p50,
      static_cast<int64_t>(reply.mean * static_cast<double>(reply.count) + 0.5), stateless_prefill, incremental_prefill,
      incremental_prefill > 0 ? static_cast<double>(stateless_prefill) / static_cast<double>(incremental_prefill) : 0.0);
}

}  // namespace mnemo::loadgen
