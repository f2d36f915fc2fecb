// An asynchronous HTTP/1.1 client call (Boost.Beast over Asio), for the router's requests to its
// instances: no thread waits while an instance computes. Every event of a call runs on the
// executor it was started on (a strand), in order: on_head at most once, on_data any number of
// times (the body as it arrives, chunked coding removed), on_end exactly once, last.
//
// The reader of a stream that cannot keep up pauses the call: nothing more is read from the
// instance (so TCP holds it back) until it resumes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "http/message.h"

namespace mnemo::http {

struct ClientTimeouts {
  std::chrono::milliseconds connect{2'000};
  std::chrono::milliseconds write{30'000};
  // From the request written to the reply's head, and between any two reads of its body.
  std::chrono::milliseconds read{600'000};
};

struct ClientRequest {
  std::string method = "GET";
  std::string address;  // "http://host:port" or "host:port"
  std::string target;   // path, then '?' and the query
  std::vector<Header> headers;
  std::string body;  // sent with Content-Type application/json when non-empty
};

struct ReplyHead {
  int status = 0;
  std::vector<Header> headers;
  // The first header of that name, compared without case ("" if there is none).
  std::string header(std::string_view name) const;
};

enum class CallEnd {
  kComplete,   // the whole reply arrived
  kUnreached,  // no reply began: the address did not parse or resolve, or the connection, the
               // request or the wait for the head failed (on_head was not called)
  kBroken,     // the reply broke off after its head (or the call was stopped)
};

struct ClientEvents {
  std::function<void(const ReplyHead&)> on_head;
  std::function<void(std::string data)> on_data;
  std::function<void(CallEnd end, const std::string& why)> on_end;
};

class ClientCall {
 public:
  // Starts the call; its events run on `executor`.
  static std::shared_ptr<ClientCall> start(boost::asio::any_io_executor executor, ClientRequest request,
                                           ClientTimeouts timeouts, ClientEvents events);
  virtual ~ClientCall() = default;
  // On the call's executor only (so a pause and the resume after it cannot swap). Pausing takes
  // effect after the read in progress (its data is still delivered).
  virtual void pause() = 0;
  virtual void resume() = 0;
  // Any thread: closes the connection (the instance sees its client go). on_end follows, with
  // kUnreached before the head and kBroken after it, unless the call had already ended.
  virtual void stop() = 0;
};

}  // namespace mnemo::http
