// libFuzzer target for the pipeline's stage frames (parallel/stage_frame.h), what a stage and a
// coordinator read from each other: arbitrary bytes through decode_stage_frame(). It must answer
// a frame or an Error, never crash or allocate beyond what the bytes hold; and the encoding is
// canonical, so a frame it accepts encodes back to exactly the bytes it came from.
//   build/fuzz/fuzz/stage_frame_fuzz -max_len=4096 -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "parallel/stage_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto frame = mnemo::parallel::decode_stage_frame(bytes);
  if (!frame.ok()) return 0;
  const std::vector<uint8_t> again = mnemo::parallel::encode_stage_frame(*frame);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) {
    std::fprintf(stderr, "stage_frame_fuzz: an accepted frame of %zu bytes encodes to %zu other bytes\n", size, again.size());
    std::abort();
  }
  return 0;
}
