#include "parallel/stage_link.h"

#include <limits>

namespace mnemo::parallel {

Result<std::unique_ptr<StageLink>> StageLink::listen(const std::string& host, int port, FrameHandler handler,
                                                     const Options& options) {
  transfer::KvTransportOptions transport_options;
  transport_options.cluster_secret = options.cluster_secret;
  transport_options.limits.max_chunks = 1;
  transport_options.limits.max_record_bytes = transfer::kKvChunkRecordBytes;
  transport_options.limits.max_payload_bytes =
      std::min<uint64_t>(options.max_frame_bytes, std::numeric_limits<uint32_t>::max());
  const StageFrameLimits limits = options.limits;
  auto on_message = [handler = std::move(handler), limits](transfer::KvMessage&& message) -> Status {
    if (message.layout_fingerprint != kStageLinkFingerprint || message.chunks.size() != 1) {
      return make_error("not a stage frame (fingerprint {:#x}, {} chunks)", message.layout_fingerprint, message.chunks.size());
    }
    MNEMO_ASSIGN_OR_RETURN(StageFrame frame, decode_stage_frame(message.payload, limits));
    return handler(std::move(frame));
  };
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<transfer::KvTransport> transport,
                         transfer::KvTransport::listen(host, port, transfer::MessageHandler(std::move(on_message)),
                                                       transport_options));
  return std::unique_ptr<StageLink>(new StageLink(std::move(transport)));
}

Status StageLink::send(const std::string& endpoint, const StageFrame& frame, double timeout_seconds) {
  transfer::KvMessage message;
  message.transfer_id = frame.step;
  message.layout_fingerprint = kStageLinkFingerprint;
  message.payload = encode_stage_frame(frame);
  if (message.payload.size() > std::numeric_limits<uint32_t>::max()) {
    return make_error("a stage frame of {} bytes is beyond the link's 4 GiB", message.payload.size());
  }
  message.block_bytes = static_cast<uint32_t>(message.payload.size());
  message.chunks.push_back({static_cast<uint64_t>(frame.kind), 0, 0, {}});
  return transport_->send(endpoint, message, timeout_seconds);
}

}  // namespace mnemo::parallel
