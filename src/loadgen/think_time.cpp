#include "loadgen/think_time.h"

#include <cstdint>
#include <fstream>
#include <numeric>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "loadgen/mooncake_record.h"

namespace mnemo::loadgen {

ThinkTime ThinkTime::exponential(double mean_seconds) {
  ThinkTime t;
  t.mean_ = mean_seconds;
  return t;
}

ThinkTime ThinkTime::empirical(std::vector<double> gaps_seconds, double scale) {
  ThinkTime t;
  t.gaps_ = std::move(gaps_seconds);
  t.scale_ = scale;
  t.mean_ = t.gaps_.empty() ? 0.0 : scale * std::accumulate(t.gaps_.begin(), t.gaps_.end(), 0.0) / static_cast<double>(t.gaps_.size());
  return t;
}

double ThinkTime::sample(std::mt19937_64& rng) const {
  if (!gaps_.empty()) {
    std::uniform_int_distribution<size_t> pick(0, gaps_.size() - 1);
    return gaps_[pick(rng)] * scale_;
  }
  if (mean_ <= 0.0) return 0.0;
  return std::exponential_distribution<double>(1.0 / mean_)(rng);
}

double ThinkTime::mean() const { return mean_; }

std::string ThinkTime::describe() const {
  if (!gaps_.empty()) return fmt::format("Mooncake trace gaps x{} (mean {:.2f} s)", scale_, mean_);
  return fmt::format("exponential, mean {} s", mean_);
}

namespace {

// One 64-bit key per prefix length of a hash-id list, so that "is this prefix some request's
// id list" is one lookup. A collision could only pair two unrelated requests, once in 2^64.
std::vector<uint64_t> prefix_keys(const std::vector<int64_t>& ids) {
  std::vector<uint64_t> keys;
  keys.reserve(ids.size() + 1);
  uint64_t key = 0x9e3779b97f4a7c15ull;
  keys.push_back(key);
  for (const int64_t id : ids) {
    key ^= static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull + (key << 6) + (key >> 2);
    key *= 0xff51afd7ed558ccdull;
    keys.push_back(key);
  }
  return keys;
}

}  // namespace

Result<std::vector<double>> mooncake_turn_gaps_from_text(std::string_view text, std::string_view name) {
  std::vector<double> start_ms;
  std::unordered_map<uint64_t, size_t> request_by_prefix;  // key of an id list (or all but its last) -> request
  std::unordered_set<size_t> continued;
  std::vector<double> gaps;

  std::istringstream lines{std::string(text)};
  std::string line;
  for (int line_number = 1; std::getline(lines, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto record = parse_mooncake_record(line);
    if (!record.ok()) return record.error().with_context(fmt::format("{}:{}", name, line_number));
    const std::vector<int64_t>& ids = record->hash_ids;
    const size_t index = start_ms.size();
    start_ms.push_back(record->timestamp_ms);
    const std::vector<uint64_t> keys = prefix_keys(ids);

    // The longest earlier request this one extends: a proper prefix of at least two blocks.
    for (size_t length = ids.size() > 0 ? ids.size() - 1 : 0; length >= 2; --length) {
      const auto found = request_by_prefix.find(keys[length]);
      if (found == request_by_prefix.end()) continue;
      const size_t previous = found->second;
      if (continued.insert(previous).second) {
        const double gap_s = (start_ms[index] - start_ms[previous]) / 1000.0;
        if (gap_s > 0.0) gaps.push_back(gap_s);
      }
      break;
    }
    if (!ids.empty()) request_by_prefix[keys[ids.size()]] = index;
    if (ids.size() > 1) request_by_prefix[keys[ids.size() - 1]] = index;
  }
  return gaps;
}

Result<std::vector<double>> mooncake_turn_gaps(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return make_error("{}: cannot open the trace", path);
  std::ostringstream text;
  text << file.rdbuf();
  return mooncake_turn_gaps_from_text(text.str(), path);
}

}  // namespace mnemo::loadgen
