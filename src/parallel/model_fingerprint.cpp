#include "parallel/model_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <xxhash.h>

namespace mnemo::parallel {

namespace {
constexpr size_t kHashedBytes = size_t{4} << 20;
}

Result<uint64_t> stage_model_fingerprint(const std::string& model_path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(model_path, ec);
  if (ec) return make_error("{}: {}", model_path, ec.message());
  std::ifstream in(model_path, std::ios::binary);
  std::vector<char> head(static_cast<size_t>(std::min<uintmax_t>(size, kHashedBytes)));
  if (!in.read(head.data(), static_cast<std::streamsize>(head.size()))) return make_error("{}: cannot read its header", model_path);
  return XXH3_64bits_withSeed(head.data(), head.size(), static_cast<uint64_t>(size));
}

}  // namespace mnemo::parallel
