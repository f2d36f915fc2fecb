// Stage frames (stage_frame.h) over the KV transport (transfer/kv_transport.h): a frame is one
// message of one chunk whose bytes are the frame, under a layout fingerprint of its own. So
// stage traffic is cluster traffic: signed under the cluster secret (unsigned only on
// loopback), its sizes bounded from the header before anything is allocated, replays refused;
// and a KV receiver never takes a frame for KV, nor a stage a KV message for a frame.
//
// send() returns once the peer's handler took the frame (its Status is the acknowledgement), not
// once the frame's work is done: the answer to a rows frame is another frame, sent back to the
// coordinator's own link.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "parallel/stage_frame.h"
#include "transfer/kv_transport.h"
#include "util/result.h"

namespace mnemo::parallel {

inline constexpr uint64_t kStageLinkFingerprint = 0x3145474154534e4dULL;  // "MNSTAGE1"

class StageLink {
 public:
  // Runs on the transport's progress thread: keep it short (queue the frame and return).
  using FrameHandler = std::function<Status(StageFrame&& frame)>;
  struct Options {
    std::string cluster_secret;  // empty: unsigned frames, on a loopback host only
    uint64_t max_frame_bytes = uint64_t{1} << 30;
    StageFrameLimits limits{};
  };

  static Result<std::unique_ptr<StageLink>> listen(const std::string& host, int port, FrameHandler handler,
                                                   const Options& options);
  std::string endpoint() const { return transport_->endpoint(); }
  // Encodes and sends `frame`; OK once the peer's handler accepted it.
  Status send(const std::string& endpoint, const StageFrame& frame, double timeout_seconds = 10);
  transfer::KvTransport::Stats stats() const { return transport_->stats(); }

 private:
  explicit StageLink(std::unique_ptr<transfer::KvTransport> transport) : transport_(std::move(transport)) {}
  std::unique_ptr<transfer::KvTransport> transport_;
};

}  // namespace mnemo::parallel
