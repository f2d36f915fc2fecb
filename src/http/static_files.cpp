// GET of a file under ServerOptions::static_dir (the web chat page): "/" is index.html; nothing
// outside the folder is reachable (no "..", no link out of it).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "http/connection.h"

namespace mnemo::http {

namespace {

constexpr std::uintmax_t kMaxStaticFileBytes = 16u << 20;

std::string content_type_of(const std::filesystem::path& file) {
  const std::string ext = file.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  return "application/octet-stream";
}

}  // namespace

void serve_static(const std::string& dir, const Request& request, Response& response, const Server::Core& core) {
  namespace fs = std::filesystem;
  std::string relative = percent_decode(request.path);
  if (relative.empty() || relative.back() == '/') relative += "index.html";
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec || relative.find("..") != std::string::npos || relative.find('\0') != std::string::npos) {
    return core.error_response(response, 404, "no route for GET " + request.path);
  }
  const fs::path file = fs::weakly_canonical(root / relative.substr(1), ec);
  const auto [root_end, file_at] = std::mismatch(root.begin(), root.end(), file.begin(), file.end());
  if (ec || root_end != root.end() || !fs::is_regular_file(file, ec) || fs::file_size(file, ec) > kMaxStaticFileBytes) {
    return core.error_response(response, 404, "no route for GET " + request.path);
  }
  std::ifstream in(file, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  response.set_content(content.str(), content_type_of(file));
}

}  // namespace mnemo::http
