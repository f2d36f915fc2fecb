#include "server/sampling_defaults.h"

#include <type_traits>

#include <fmt/format.h>

namespace mnemo::server {
namespace {

Result<double> number_at(const gguf::File& file, const char* key, bool integral) {
  if (!integral) return file.get_float(key);
  MNEMO_ASSIGN_OR_RETURN(int64_t value, file.get_int(key));
  return static_cast<double>(value);
}

// One default: the flag, else the model's key, else `fallback`; `from` collects the keys used.
template <class T>
Result<T> pick(const std::optional<T>& flag, const gguf::File& file, const char* key, T fallback, double lo, double hi,
               std::string& from) {
  if (flag) return *flag;
  if (!file.has(key)) return fallback;
  auto read = number_at(file, key, std::is_integral_v<T>);
  if (!read.ok()) return read.error().with_context(key);
  if (!(*read >= lo && *read <= hi)) return make_error("{} = {} is out of range [{}, {}]", key, *read, lo, hi);
  from += from.empty() ? std::string(key) : fmt::format(", {}", key);
  return static_cast<T>(*read);
}

}  // namespace

Result<SamplingDefaults> sampling_defaults_for(const gguf::File& file, const SamplingFlags& flags) {
  SamplingDefaults d;
  std::string from_model;
  MNEMO_ASSIGN_OR_RETURN(d.temperature, pick(flags.temperature, file, "general.sampling.temp", d.temperature, 0.0, 2.0, from_model));
  MNEMO_ASSIGN_OR_RETURN(d.top_k, pick(flags.top_k, file, "general.sampling.top_k", d.top_k, 0.0, 1 << 20, from_model));
  MNEMO_ASSIGN_OR_RETURN(d.top_p, pick(flags.top_p, file, "general.sampling.top_p", d.top_p, 0.0, 1.0, from_model));
  MNEMO_ASSIGN_OR_RETURN(d.min_p, pick(flags.min_p, file, "general.sampling.min_p", d.min_p, 0.0, 1.0, from_model));
  const bool any_flag = flags.temperature || flags.top_k || flags.top_p || flags.min_p;
  d.source = fmt::format("temperature {} top-k {} top-p {} min-p {} ({}{}{})", d.temperature, d.top_k, d.top_p, d.min_p,
                         any_flag ? "flags, " : "", from_model.empty() ? "" : "the model's " + from_model + ", ",
                         "else llama-server's defaults");
  return d;
}

}  // namespace mnemo::server
