// libFuzzer target for what src/cluster reads from the network: any bytes, as an etcd gateway
// range reply, a watch stream object, base64 text and an instance's membership value, must decode
// or fail with an Error; never crash, throw or read out of bounds. The same bytes also go through
// the watch stream splitter in two pieces, which must find the same objects as in one.
// Seeds: fuzz/corpus/etcd (replies as etcd 3.4 writes them); dictionary: fuzz/etcd.dict.
//   build/fuzz/fuzz/etcd_reply_fuzz fuzz/corpus/etcd -dict=fuzz/etcd.dict -max_len=1024 -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/etcd_client.h"
#include "cluster/etcd_wire.h"
#include "cluster/membership.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "etcd_reply_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mnemo::cluster;
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  int64_t revision = 0;
  (void)parse_range_reply(input, &revision);
  (void)parse_watch_chunk(input);
  (void)InstanceInfo::from_json(input);

  // Whatever decodes must encode back to text that decodes to the same bytes.
  if (auto decoded = base64_decode(input); decoded.ok()) {
    auto again = base64_decode(base64_encode(*decoded));
    if (!again.ok() || *again != *decoded) fail("base64 does not round-trip");
  }

  // The splitter must not care where the stream is cut.
  std::vector<std::string> whole, pieces;
  mnemo::cluster::wire::JsonObjectSplitter one, two;
  const bool whole_ok = one.feed(input, whole).ok();
  const size_t cut = size == 0 ? 0 : data[0] % size;
  const bool pieces_ok = two.feed(input.substr(0, cut), pieces).ok() && two.feed(input.substr(cut), pieces).ok();
  if (whole_ok != pieces_ok || (whole_ok && whole != pieces)) fail("the watch stream splitter depends on the cut");
  return 0;
}
