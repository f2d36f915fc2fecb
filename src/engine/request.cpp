#include "engine/request.h"

namespace mnemo {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

std::optional<StreamEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
    if (waker_) waker_();
  }
  ready_.notify_one();
}

void RequestStream::set_waker(std::function<void()> waker) {
  std::lock_guard lock(mutex_);
  waker_ = std::move(waker);
  if (waker_ && !events_.empty()) waker_();
}

}  // namespace mnemo
