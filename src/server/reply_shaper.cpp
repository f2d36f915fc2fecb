#include "server/reply_shaper.h"

namespace mnemo::server {
namespace {

constexpr std::chrono::milliseconds kNoWait{0};  // a pump never waits: it is woken for more

}  // namespace

std::shared_ptr<EngineBody> shaped_body(std::shared_ptr<RequestStream> stream, std::shared_ptr<void> in_flight_guard,
                                        std::shared_ptr<ReplyShaper> shaper, bool streamed, EventObserver observe) {
  auto opened = std::make_shared<bool>(false);
  // The pump runs on the connection's strand only: its state needs no lock.
  auto pump = [stream, shaper, streamed, observe = std::move(observe), opened](std::string& out, int& status) {
    if (streamed && !*opened) {
      *opened = true;
      out += shaper->open_stream();
    }
    for (auto event = stream->next(kNoWait); event; event = stream->next(kNoWait)) {
      if (observe) observe(*event);
      if (streamed) {
        if (shaper->stream(*event, out)) return true;
      } else if (shaper->gather(*event)) {
        ReplyShaper::Whole whole = shaper->whole();
        status = whole.status;
        out = std::move(whole.body);
        return true;
      }
    }
    return false;
  };
  return std::make_shared<EngineBody>(std::move(stream), std::move(in_flight_guard), std::move(pump));
}

void answer_with(http::Response& res, std::shared_ptr<RequestStream> stream, std::shared_ptr<void> in_flight_guard,
                 std::shared_ptr<ReplyShaper> shaper, bool streamed, EventObserver observe) {
  auto body = shaped_body(std::move(stream), std::move(in_flight_guard), std::move(shaper), streamed, std::move(observe));
  if (!streamed) return res.defer("application/json", std::move(body));
  res.set_header("Cache-Control", "no-cache");
  res.stream("text/event-stream", std::move(body));
}

ReplyShaper::Whole gather_all(RequestStream& stream, ReplyShaper& shaper, const EventObserver& observe) {
  for (;;) {
    const auto event = stream.next(std::chrono::milliseconds(1000));
    if (!event) continue;
    if (observe) observe(*event);
    if (shaper.gather(*event)) return shaper.whole();
  }
}

}  // namespace mnemo::server
