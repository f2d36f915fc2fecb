#include "transfer/refusal_log.h"

#include <fmt/format.h>

namespace mnemo::transfer {

RefusalLog::RefusalLog(size_t kinds, Clock::duration interval) : interval_(interval), kinds_(kinds) {}

std::optional<std::string> RefusalLog::line(size_t kind, std::string_view text, Clock::time_point now) {
  if (kind >= kinds_.size()) return std::nullopt;
  Kind& k = kinds_[kind];
  if (k.last && now - *k.last < interval_) {
    ++k.left_out;
    return std::nullopt;
  }
  std::string out(text);
  if (k.left_out > 0) out += fmt::format(" ({} more of this kind not logged since the last line)", k.left_out);
  k.last = now;
  k.left_out = 0;
  return out;
}

}  // namespace mnemo::transfer
