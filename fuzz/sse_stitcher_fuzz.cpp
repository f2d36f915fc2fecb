// libFuzzer target for the router's SSE stitcher (router/sse_stitcher.h), which reads what
// instances stream: any bytes, fed whole or cut in two (at a point the first byte picks), must give
// the same client stream, tokens and resume state (chat chunks and Responses events alike); a resume between the pieces must never crash or
// throw; whatever goes out is whole events.
//   build/fuzz/fuzz/sse_stitcher_fuzz -max_len=2048 -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "router/sse_stitcher.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "sse_stitcher_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mnemo::router::SseStitcher;
  if (size == 0) return 0;
  const size_t cut = data[0] % size;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t at = std::min(cut, input.size());

  SseStitcher whole;
  const std::string out_whole = whole.feed(input);
  SseStitcher pieces;
  const std::string out_pieces = pieces.feed(input.substr(0, at)) + pieces.feed(input.substr(at));
  if (out_whole != out_pieces) fail("the output depends on how the bytes were cut");
  if (whole.tokens() != pieces.tokens() || whole.finished() != pieces.finished() || whole.done() != pieces.done() ||
      whole.resume_response() != pieces.resume_response()) {
    fail("the state depends on how the bytes were cut");
  }
  if (!out_whole.empty() && out_whole.size() >= 2 && out_whole.substr(out_whole.size() - 2) != "\n\n") {
    fail("an event went out unfinished");
  }

  SseStitcher resumed;
  (void)resumed.feed(input.substr(0, at));
  resumed.begin_resumed();
  (void)resumed.feed(input.substr(at));
  // What the router sends the resuming instance must always serialise.
  (void)resumed.resume_response().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
