// A response body made from a request's engine stream as its events come (http::BodySource):
// the connection pulls what is ready on an I/O thread and the engine wakes it with each event, so
// a request waiting for its tokens holds no thread. Holds the request's slot among those in
// flight until the connection lets the body go.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "engine/request.h"
#include "http/message.h"

namespace mnemo::server {

class EngineBody final : public http::BodySource {
 public:
  // Appends what the events ready now make of the body to `out` (never waiting), sets `status`
  // when it decides one, and returns true once the body is complete.
  using Pump = std::function<bool(std::string& out, int& status)>;

  EngineBody(std::shared_ptr<RequestStream> stream, std::shared_ptr<void> in_flight_guard, Pump pump)
      : stream_(std::move(stream)), guard_(std::move(in_flight_guard)), pump_(std::move(pump)) {}
  ~EngineBody() override { stream_->set_waker({}); }

  bool pull(std::string& out) override { return pump_(out, status_); }
  void on_ready(std::function<void()> wake) override { stream_->set_waker(std::move(wake)); }
  // The engine stops the request and frees its KV at its next step.
  void cancel() override { stream_->cancel(); }
  int status() const override { return status_; }

 private:
  std::shared_ptr<RequestStream> stream_;
  std::shared_ptr<void> guard_;
  Pump pump_;
  int status_ = 200;
};

}  // namespace mnemo::server
