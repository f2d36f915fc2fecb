// How long a user thinks between receiving a reply and sending the next question: exponential
// with a given mean, or drawn from the gaps between consecutive turns of real conversations in
// the Mooncake production trace, scaled to the benchmark's time frame.
#pragma once

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::loadgen {

class ThinkTime {
 public:
  static ThinkTime exponential(double mean_seconds);
  // Draws uniformly from `gaps_seconds` (must not be empty), each multiplied by `scale`.
  static ThinkTime empirical(std::vector<double> gaps_seconds, double scale);

  double sample(std::mt19937_64& rng) const;
  double mean() const;
  std::string describe() const;

 private:
  double mean_ = 0.0;
  std::vector<double> gaps_;  // empty: exponential
  double scale_ = 1.0;
};

// Infers the think times of the Mooncake conversation trace ({"timestamp" ms, "hash_ids"} per
// line; equal hash ids are equal 512-token prefix blocks). A request continues an earlier one
// when its hash ids start with all of the earlier request's ids, or all but the earlier one's
// last (a partly filled block changes once the conversation grows); the longest such earlier
// request is its previous turn, and only the first continuation of a request counts (later ones
// are regenerations or branches). Needs at least two shared blocks, as every request shares the
// first. Returns the gaps between the starts of consecutive turns, in seconds.
Result<std::vector<double>> mooncake_turn_gaps(const std::string& path);
Result<std::vector<double>> mooncake_turn_gaps_from_text(std::string_view text, std::string_view name);

}  // namespace mnemo::loadgen
