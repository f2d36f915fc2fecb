#include "kv/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace mnemo {
namespace {

using nlohmann::json;

enum class Bound { kPositive, kNonNegative };

bool within(double v, Bound bound) { return std::isfinite(v) && (bound == Bound::kPositive ? v > 0 : v >= 0); }
const char* bound_text(Bound bound) { return bound == Bound::kPositive ? "> 0" : ">= 0"; }

// A profile is read by a server long after it was written, possibly edited by hand: every field
// is checked, and the error says which (`field` is the dotted path, e.g. "measured.points[2].start").
Result<double> number_field(const json& j, const std::string& field, const char* key, Bound bound,
                            const std::string& path) {
  if (!j.contains(key)) return make_error("{}: missing field '{}'", path, field);
  const json& v = j[key];
  if (!v.is_number()) return make_error("{}: '{}' must be a number, got {}", path, field, v.dump());
  const double d = v.get<double>();
  if (!within(d, bound)) return make_error("{}: '{}' must be a finite number {}, got {}", path, field, bound_text(bound), d);
  return d;
}

Result<int64_t> integer_field(const json& j, const std::string& field, const char* key, int64_t min,
                              const std::string& path) {
  if (!j.contains(key)) return make_error("{}: missing field '{}'", path, field);
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < min) {
    return make_error("{}: '{}' must be an integer >= {}, got {}", path, field, min, v.dump());
  }
  return v.get<int64_t>();
}

Status optional_string(const json& j, const char* key, std::string& out, const std::string& path) {
  if (!j.contains(key)) return ok_status();
  if (!j[key].is_string()) return make_error("{}: 'measured.{}' must be a string, got {}", path, key, j[key].dump());
  out = j[key].get<std::string>();
  return ok_status();
}

Result<CostProvenance> parse_provenance(const json& m, const std::string& path) {
  if (!m.is_object()) return make_error("{}: 'measured' must be an object", path);
  CostProvenance p;
  MNEMO_RETURN_IF_ERROR(optional_string(m, "model_file", p.model_file, path));
  MNEMO_RETURN_IF_ERROR(optional_string(m, "measured_at", p.measured_at, path));
  MNEMO_RETURN_IF_ERROR(optional_string(m, "isa", p.isa, path));
  if (m.contains("threads")) {
    MNEMO_ASSIGN_OR_RETURN(const int64_t threads, integer_field(m, "measured.threads", "threads", 0, path));
    p.threads = static_cast<int32_t>(std::min<int64_t>(threads, INT32_MAX));
  }
  if (m.contains("disk_cache_dropped")) {
    if (!m["disk_cache_dropped"].is_boolean()) return make_error("{}: 'measured.disk_cache_dropped' must be true or false", path);
    p.disk_cache_dropped = m["disk_cache_dropped"].get<bool>();
  }
  if (!m.contains("points")) return p;
  if (!m["points"].is_array()) return make_error("{}: 'measured.points' must be an array", path);
  for (size_t i = 0; i < m["points"].size(); ++i) {
    const json& e = m["points"][i];
    const std::string field = "measured.points[" + std::to_string(i) + "]";
    if (!e.is_object()) return make_error("{}: '{}' must be an object", path, field);
    CostPoint point;
    MNEMO_ASSIGN_OR_RETURN(point.start, integer_field(e, field + ".start", "start", 0, path));
    MNEMO_ASSIGN_OR_RETURN(point.tokens, integer_field(e, field + ".tokens", "tokens", 1, path));
    MNEMO_ASSIGN_OR_RETURN(point.seconds_per_token,
                           number_field(e, field + ".seconds_per_token", "seconds_per_token", Bound::kPositive, path));
    p.points.push_back(point);
  }
  // Interpolation walks the points in order of position.
  std::sort(p.points.begin(), p.points.end(),
            [](const CostPoint& x, const CostPoint& y) { return x.mean_position() < y.mean_position(); });
  return p;
}

// The four numbers the policy uses, with the bound each must satisfy.
struct FieldSpec {
  const char* name;
  double CostModel::*member;
  Bound bound;
};
constexpr FieldSpec kFields[] = {
    {"per_token_seconds", &CostModel::per_token_seconds, Bound::kPositive},
    {"per_context_token_seconds", &CostModel::per_context_token_seconds, Bound::kNonNegative},
    {"copy_bytes_per_second", &CostModel::copy_bytes_per_second, Bound::kPositive},
    {"disk_read_bytes_per_second", &CostModel::disk_read_bytes_per_second, Bound::kPositive},
};

}  // namespace

double CostModel::seconds_per_token_at(double position) const {
  const std::vector<CostPoint>& pts = measured.points;
  if (pts.size() < 2) return per_token_seconds + per_context_token_seconds * position;
  if (position <= pts.front().mean_position()) return pts.front().seconds_per_token;
  for (size_t i = 1; i < pts.size(); ++i) {
    const double x0 = pts[i - 1].mean_position();
    const double x1 = pts[i].mean_position();
    if (position <= x1 && x1 > x0) {
      const double t = (position - x0) / (x1 - x0);
      return pts[i - 1].seconds_per_token + t * (pts[i].seconds_per_token - pts[i - 1].seconds_per_token);
    }
  }
  return pts.back().seconds_per_token + per_context_token_seconds * (position - pts.back().mean_position());
}

double CostModel::recompute_seconds(int64_t begin, int64_t end) const {
  // Piecewise: each step of up to kStep tokens at its mean position (exact for a line, and
  // within a step of the bends for the interpolated curve).
  constexpr int64_t kStep = 256;
  double total = 0;
  for (int64_t b = begin; b < end; b += kStep) {
    const int64_t e = std::min(end, b + kStep);
    total += static_cast<double>(e - b) * seconds_per_token_at(0.5 * static_cast<double>(b + e - 1));
  }
  return total;
}

Result<CostModel> parse_cost_model(std::string_view text, const std::string& source) {
  const json j = json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error("{}: not valid JSON", source);
  if (!j.is_object()) return make_error("{}: not a JSON object", source);
  CostModel m;
  for (const FieldSpec& f : kFields) {
    MNEMO_ASSIGN_OR_RETURN(m.*f.member, number_field(j, f.name, f.name, f.bound, source));
  }
  if (j.contains("measured")) {
    MNEMO_ASSIGN_OR_RETURN(m.measured, parse_provenance(j["measured"], source));
  }
  m.source = source;
  return m;
}

Result<std::string> cost_model_json(const CostModel& m, int indent) {
  json j = json::object();
  for (const FieldSpec& f : kFields) {
    if (!within(m.*f.member, f.bound)) {
      return make_error("refusing to write '{}' = {} (must be finite and {})", f.name, m.*f.member, bound_text(f.bound));
    }
    j[f.name] = m.*f.member;
  }
  if (!m.measured.empty()) {
    const CostProvenance& p = m.measured;
    json points = json::array();
    for (const CostPoint& point : p.points) {
      if (point.start < 0 || point.tokens < 1 || !within(point.seconds_per_token, Bound::kPositive)) {
        return make_error("refusing to write an invalid measured point at position {}", point.start);
      }
      points.push_back({{"start", point.start}, {"tokens", point.tokens}, {"seconds_per_token", point.seconds_per_token}});
    }
    j["measured"] = {{"model_file", p.model_file}, {"measured_at", p.measured_at}, {"threads", p.threads},
                     {"isa", p.isa}, {"disk_cache_dropped", p.disk_cache_dropped}, {"points", points}};
  }
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

Result<CostModel> load_cost_model(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error("{}: cannot open the profile", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_cost_model(text.str(), path);
}

Status save_cost_model(const CostModel& m, const std::string& path) {
  auto text = cost_model_json(m, 2);
  if (!text.ok()) return text.error().with_context(path);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return make_error("{}: cannot write the profile", tmp);
    out << *text << "\n";
    if (!out) return make_error("{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return make_error("{}: cannot rename to {}", tmp, path);
  return ok_status();
}

std::string cost_model_path_for(const std::string& model_path) { return model_path + ".profile.json"; }

Result<CostLine> fit_cost_line(const std::vector<CostPoint>& points) {
  if (points.empty()) return make_error("no measured points to fit");
  double mean_x = 0, mean_y = 0;
  for (const CostPoint& p : points) {
    if (p.start < 0 || p.tokens < 1 || !within(p.seconds_per_token, Bound::kPositive)) {
      return make_error("invalid measured point at position {} ({} tokens, {} s/token)", p.start, p.tokens, p.seconds_per_token);
    }
    mean_x += p.mean_position();
    mean_y += p.seconds_per_token;
  }
  const double n = static_cast<double>(points.size());
  mean_x /= n;
  mean_y /= n;
  double sxx = 0, sxy = 0;
  for (const CostPoint& p : points) {
    const double dx = p.mean_position() - mean_x;
    sxx += dx * dx;
    sxy += dx * (p.seconds_per_token - mean_y);
  }
  CostLine line{mean_y, 0.0};  // flat: one position only, or a slope clamped at 0
  if (sxx > 0 && sxy > 0) {
    line.per_context_token_seconds = sxy / sxx;
    line.per_token_seconds = mean_y - line.per_context_token_seconds * mean_x;
  }
  if (!within(line.per_token_seconds, Bound::kPositive) || !within(line.per_context_token_seconds, Bound::kNonNegative)) {
    return make_error("the measured points do not fit a + b * position with a > 0 (fit: a = {}, b = {})",
                      line.per_token_seconds, line.per_context_token_seconds);
  }
  return line;
}

}  // namespace mnemo
