#include "sim/cluster_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include <xxhash.h>

#include "loadgen/mooncake_record.h"
#include "util/mix64.h"

namespace mnemo::sim {
namespace {

constexpr int32_t kMooncakeBlockTokens = 512;
constexpr uint64_t kReplyBlocks = uint64_t{1} << 63;  // reply blocks: never a prompt's

TokenId token_of(uint64_t block, int64_t offset) {
  return static_cast<TokenId>(mix64(block * kSplitMixGamma + static_cast<uint64_t>(offset) + 1) & 0x3fffffff);
}

// One line of the Mooncake trace, checked.
Result<ClusterRequest> mooncake_request(const std::string& line, const MooncakeOptions& o, size_t index) {
  MNEMO_ASSIGN_OR_RETURN(const loadgen::MooncakeRecord record, loadgen::parse_mooncake_record(line));
  if (!record.input_length || !record.output_length) return make_error("a request needs its input_length and output_length");
  const int64_t input = *record.input_length;
  const int64_t output = *record.output_length;
  const double timestamp_ms = record.timestamp_ms;
  const std::vector<int64_t>& ids = record.hash_ids;
  if (input < 1 || input > (int64_t{1} << 24) || output < 0 || output > (int64_t{1} << 24) || !(timestamp_ms >= 0)) {
    return make_error("lengths or timestamp out of range (input {}, output {}, timestamp {})", input, output, timestamp_ms);
  }
  if (static_cast<int64_t>(ids.size()) != (input + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens) {
    return make_error("{} hash ids for {} input tokens of 512-token blocks", ids.size(), input);
  }
  ClusterRequest r;
  r.arrival_s = timestamp_ms / 1000.0;
  r.prompt_tokens = (input + o.scale - 1) / o.scale;
  r.reply_tokens = std::max<int64_t>(1, (output + o.scale / 2) / o.scale);
  for (const int64_t id : ids) {
    if (id < 0 || id >= (int64_t{1} << 40)) return make_error("hash id {} out of range", id);
    r.blocks.push_back(static_cast<uint64_t>(id));
  }
  const int32_t block_tokens = kMooncakeBlockTokens / o.scale;
  r.reply_apart = true;
  const int64_t reply_blocks = (r.reply_tokens + block_tokens - 1) / block_tokens;
  for (int64_t k = 0; k < reply_blocks; ++k) r.blocks.push_back(kReplyBlocks | (static_cast<uint64_t>(index) << 20) | static_cast<uint64_t>(k));
  const uint64_t first_two[2] = {r.blocks[0], ids.size() > 1 ? r.blocks[1] : r.blocks[0]};
  r.session = XXH3_64bits(first_two, sizeof(first_two));
  return r;
}

// Copy `copy` of a request: its own prompt blocks (replies are already unique per request and copy),
// its own session, its arrival shifted within the hour.
ClusterRequest copy_of(const ClusterRequest& r, uint64_t copy, double offset_s, double hour_s) {
  ClusterRequest c = r;
  for (uint64_t& b : c.blocks) b = (b & kReplyBlocks) != 0 ? b ^ (copy << 44) : b | (copy << 40);
  c.session = XXH3_64bits_withSeed(&r.session, sizeof(r.session), copy);
  c.arrival_s = std::fmod(r.arrival_s + offset_s, hour_s);
  return c;
}

}  // namespace

std::vector<TokenId> ClusterTrace::tokens(const ClusterRequest& r, int64_t n) const {
  std::vector<TokenId> out(static_cast<size_t>(n));
  const int64_t prompt_blocks = (r.prompt_tokens + block_tokens - 1) / block_tokens;
  for (int64_t p = 0; p < n; ++p) {
    const bool in_reply = r.reply_apart && p >= r.prompt_tokens;
    const int64_t q = in_reply ? p - r.prompt_tokens : p;
    const int64_t block = (in_reply ? prompt_blocks : 0) + q / block_tokens;
    out[static_cast<size_t>(p)] = token_of(r.blocks[static_cast<size_t>(block)], q % block_tokens);
  }
  return out;
}

Result<ClusterTrace> load_mooncake_trace(const std::string& path, const MooncakeOptions& o) {
  if (o.scale < 1 || o.scale > kMooncakeBlockTokens || kMooncakeBlockTokens % o.scale != 0) {
    return make_error("the Mooncake scale must divide 512, got {}", o.scale);
  }
  if (o.copies < 1 || o.copies > 4096) return make_error("copies must be within [1, 4096], got {}", o.copies);
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::kIoError, "cannot open {}", path);
  ClusterTrace trace;
  trace.block_tokens = kMooncakeBlockTokens / o.scale;
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line) && (o.max_requests == 0 || trace.requests.size() < o.max_requests)) {
    ++line_number;
    if (line.empty()) continue;
    auto r = mooncake_request(line, o, trace.requests.size());
    if (!r.ok()) return r.error().with_context(fmt::format("{} line {}", path, line_number));
    trace.requests.push_back(std::move(*r));
  }
  if (trace.requests.empty()) return make_error("{} holds no request", path);
  std::stable_sort(trace.requests.begin(), trace.requests.end(),
                   [](const ClusterRequest& a, const ClusterRequest& b) { return a.arrival_s < b.arrival_s; });
  if (o.copies > 1) {
    const double hour_s = std::max(1.0, trace.requests.back().arrival_s + 1e-3);
    std::mt19937_64 rng(o.seed);
    std::uniform_real_distribution<double> offset(0, hour_s);
    const size_t n = trace.requests.size();
    for (int32_t copy = 1; copy < o.copies; ++copy) {
      const double shift = offset(rng);
      for (size_t i = 0; i < n; ++i) trace.requests.push_back(copy_of(trace.requests[i], static_cast<uint64_t>(copy), shift, hour_s));
    }
    std::stable_sort(trace.requests.begin(), trace.requests.end(),
                     [](const ClusterRequest& a, const ClusterRequest& b) { return a.arrival_s < b.arrival_s; });
  }
  return trace;
}

ClusterTrace cluster_trace_of(const Trace& trace, int32_t block_tokens) {
  ClusterTrace out;
  out.block_tokens = block_tokens;
  for (size_t c = 0; c < trace.size(); ++c) {
    for (const TraceTurn& turn : trace[c].turns) {
      ClusterRequest r;
      r.arrival_s = turn.start_s;
      r.prompt_tokens = turn.prompt_tokens;
      r.reply_tokens = turn.reply_tokens;
      r.session = c;
      const int64_t blocks = (turn.prompt_tokens + turn.reply_tokens + block_tokens - 1) / block_tokens;
      for (int64_t k = 0; k < blocks; ++k) r.blocks.push_back(((static_cast<uint64_t>(c) + 1) << 32) | static_cast<uint64_t>(k));
      out.requests.push_back(std::move(r));
    }
  }
  std::stable_sort(out.requests.begin(), out.requests.end(),
                   [](const ClusterRequest& a, const ClusterRequest& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

}  // namespace mnemo::sim
