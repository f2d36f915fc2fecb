#include "util/state_id.h"

#include <cstdio>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <unistd.h>

namespace mnemo {
namespace {

constexpr size_t kIdChars = 32;

bool well_formed(const std::string& id) {
  return id.size() == kIdChars && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

Result<std::string> state_id_of(const std::string& dir) {
  const std::string path = dir + "/state-id";
  if (std::ifstream in(path); in) {
    std::string id;
    std::getline(in, id);
    if (!well_formed(id)) return make_error("{}: not a state id (expected {} hex digits)", path, kIdChars);
    return id;
  }
  std::random_device random;
  std::string id;
  while (id.size() < kIdChars) id += fmt::format("{:08x}", random());
  const std::string temporary = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << id << '\n';
    out.flush();
    if (!out) return make_error("cannot write {}", temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return make_error("cannot rename {} to {}", temporary, path);
  }
  return id;
}

}  // namespace mnemo
