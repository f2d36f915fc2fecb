#include "sim/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace mnemo::sim {

Result<int64_t> parse_byte_size(std::string_view text) {
  double number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end == text.data()) return make_error("'{}' is not a size (e.g. 64M, 1.5GiB, 18432)", text);
  const std::string_view suffix(end, static_cast<size_t>(text.data() + text.size() - end));
  double multiplier = 1;
  std::string_view rest = suffix;
  if (!rest.empty()) {
    switch (std::toupper(static_cast<unsigned char>(rest.front()))) {
      case 'K': multiplier = 0x1p10; rest.remove_prefix(1); break;
      case 'M': multiplier = 0x1p20; rest.remove_prefix(1); break;
      case 'G': multiplier = 0x1p30; rest.remove_prefix(1); break;
      case 'T': multiplier = 0x1p40; rest.remove_prefix(1); break;
      default: break;
    }
    const bool scaled = multiplier != 1;
    const bool unit_ok = rest.empty() || rest == "B" || (scaled && rest == "iB");
    if (!unit_ok) {
      return make_error("'{}': unknown size suffix '{}' (K, M, G or T, optionally followed by B or iB)", text, suffix);
    }
  }
  const double bytes = number * multiplier;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 0x1p62) return make_error("'{}': size out of range", text);
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_byte_size(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.4g} {}", value, kUnits[unit]);
}

}  // namespace mnemo::sim
