// What it costs to recompute KV, and what it costs to move it (SPEC P3, V6, M6): the numbers the
// cache's retention policy, the engine's preemption choice and the router's placement share.
//
// Computing one token at context position l costs (per_token_seconds + per_context_token_seconds
// * l): the constant non-attention work (the layer matrices) plus attention over l earlier
// positions. `mnemo profile` (src/cli/cmd_profile.cpp) measures both for the loaded model on
// this machine, with the copy and disk bandwidths, and stores them beside the model; without a
// profile the defaults below keep the policy's ordering sensible (a token at 4096 costs 2x one
// at 0).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo {

// One measured point: a chunk of `tokens` tokens computed at positions [start, start + tokens)
// with every earlier position cached.
struct CostPoint {
  int64_t start = 0;
  int64_t tokens = 1;
  double seconds_per_token = 0;
  // The position the line is evaluated at: recompute_seconds() charges a run of tokens at its
  // mean position, so the fit must use the same x.
  double mean_position() const { return static_cast<double>(start) + 0.5 * static_cast<double>(tokens - 1); }
};

// How a profile was measured, so that a stale or foreign one can be recognised. Empty for the
// defaults; optional in the file (a hand-written profile needs only the four numbers).
struct CostProvenance {
  std::string model_file;   // the profiled model's file name (no directory)
  std::string measured_at;  // UTC, ISO 8601
  int32_t threads = 0;
  std::string isa;          // kernels::isa_name of the run
  bool disk_cache_dropped = false;  // the disk figure was read past the page cache
  std::vector<CostPoint> points;

  bool empty() const { return model_file.empty() && measured_at.empty() && points.empty(); }
};

struct CostModel {
  double per_token_seconds = 1e-3;
  double per_context_token_seconds = 1e-3 / 4096;
  double copy_bytes_per_second = 8e9;        // host <-> device tier copy
  double disk_read_bytes_per_second = 1e9;   // disk tier -> device
  std::string source = "default";            // "default" or the profile's path
  CostProvenance measured;

  // Seconds to compute one token at `position` with everything before it cached: interpolated
  // between the measured points where a profile has two or more (the cost of a sliding-window
  // model bends at its window: a line alone misses by a third), else the fitted line; past the
  // last point, the last point plus the line's slope.
  double seconds_per_token_at(double position) const;
  // Seconds to compute positions [begin, end) of one sequence (with everything before cached).
  double recompute_seconds(int64_t begin, int64_t end) const;
  double copy_seconds(int64_t bytes) const { return static_cast<double>(bytes) / copy_bytes_per_second; }
  double disk_read_seconds(int64_t bytes) const { return static_cast<double>(bytes) / disk_read_bytes_per_second; }

  // Pensieve's retention value of a cached chunk covering [begin, end): the recompute it saves
  // per second of its conversation's idleness. The cache keeps the highest values; the lowest
  // leave a tier first. Leading chunks are cheaper to recompute, so they go before trailing ones
  // of the same conversation.
  double retention_value(int64_t begin, int64_t end, double idle_seconds) const {
    constexpr double kMinIdle = 1e-3;  // just-used chunks: finite, ordered by cost
    return recompute_seconds(begin, end) / (idle_seconds > kMinIdle ? idle_seconds : kMinIdle);
  }
};

// Reads a profile written by `mnemo profile` (JSON). An Error names the file and the field.
Result<CostModel> load_cost_model(const std::string& path);
// Writes one (atomically: a temporary file renamed over the target). Refuses values load would
// reject, so a written profile always loads.
Status save_cost_model(const CostModel& model, const std::string& path);
// The same as text, for profiles that travel (an instance publishes its own in the cluster, and
// the router's cost model reads it): `source` names it in errors and becomes CostModel::source.
Result<CostModel> parse_cost_model(std::string_view json_text, const std::string& source);
Result<std::string> cost_model_json(const CostModel& model, int indent = -1);

// The least-squares line seconds_per_token = per_token + per_context * mean_position through the
// points, with per_context clamped at 0 (more context never makes a token cheaper; a negative
// slope is noise). One point, or points at one position, give a flat line. An Error for no
// points, invalid points, or a line whose intercept is not positive (the points do not look like
// a + b * l, and a profile with a free token would be wrong).
struct CostLine {
  double per_token_seconds = 0;
  double per_context_token_seconds = 0;
};
Result<CostLine> fit_cost_line(const std::vector<CostPoint>& points);
// Where the profile of a model file lives: beside it, "<model>.profile.json".
std::string cost_model_path_for(const std::string& model_path);

}  // namespace mnemo
