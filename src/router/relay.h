// The relay of one client request's reply from the instances that answer it (router internals):
// a state machine driven by its upstream call's events (http/client.h) and by its client's
// connection, on a strand of the router's upstream I/O threads. No thread waits on an instance
// or a client: thousands of streams cost sockets and buffers only.
//
//   trying (attempt k) --no answer--> trying (attempt k+1) ... --none left--> the plan's "exhausted" reply
//        |--head: SSE--> streaming --end--> done
//        |                   |--breaks off (or its instance's lease expires while silent), with a
//        |                   |   failover--> resuming (candidate 1, 2, ... for up to resume_wait)
//        |                   |                 |--an SSE 200--> streaming (stitched: SPEC D7)
//        |                   |                 '--none--> done, broken
//        '--head: anything else--> whole --end--> done (a whole reply, or 502 if it broke off)
//   any state --client gone--> done: the upstream call stops (the instance cancels the request)
//
// A reply's bookkeeping (ReplyDone: prompt trees, stored-turn copies, etcd) runs on a thread that
// may block, and before the reply's end reaches the client: a next turn sent at once finds it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <nlohmann/json.hpp>

#include "cluster/membership.h"
#include "http/client.h"
#include "http/message.h"

namespace mnemo::router {

// The clock of ReplyDone's first_text_at.
inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Called once a request's reply is over: its status (499: the client left first), the reply
// (bounded; SSE events when streamed), the instance that finished it (another one after a
// failover) and when its first generated text reached the client (seconds_now(); negative:
// unstreamed, or none).
using ReplyDone = std::function<void(int status, const std::string& body, bool sse, const std::string& instance,
                                     double first_text_at)>;

// Where a streamed reply goes on if its instance fails: the request as sent, and the instances to
// try in order.
struct Failover {
  nlohmann::json request;
  std::vector<cluster::InstanceInfo> candidates;  // at routing time, its KV replica holders first
  size_t holders = 0;                             // how many of them hold a replica
};

// One instance to send the request to, and what to send.
struct RelayAttempt {
  cluster::InstanceInfo instance;
  std::string body;  // "" : none (a GET)
  ReplyDone on_done;
  std::shared_ptr<Failover> failover;  // a resumable stream's (null: not resumable)
  std::vector<http::Header> headers;   // for the client, with the reply's head
};

// What the handler decided: the request and the instances to try, in order.
struct RelayPlan {
  std::string method, path, authorization;  // of the client's request
  // The next attempt (nullopt: none left). Called on the relay's strand; must not block.
  std::function<std::optional<RelayAttempt>()> next_attempt;
  // An attempt whose instance did not answer at all (before the next one is asked for).
  std::function<void(const RelayAttempt&)> unreached;
  // The reply when no attempt reached an instance.
  std::function<http::Response()> exhausted;
};

enum class RelayEvent {
  kClientBehind,     // a stream stopped reading its instance: its client was behind
  kResumed,          // a broken stream continued on another instance
  kResumeFailed,     // ... or on none
  kUpstreamExpired,  // a stream cut off: its instance lost its lease while silent
};

// What a relay asks of the router.
class RelayHost {
 public:
  virtual ~RelayHost() = default;
  // Where a failed stream may resume, best first, none of `failed`.
  virtual std::vector<cluster::InstanceInfo> resume_candidates(const Failover& failover,
                                                               const std::unordered_set<std::string>& failed,
                                                               const std::string& failed_state_id) = 0;
  // Whether the instance still holds its lease.
  virtual bool is_member(const std::string& id) = 0;
  // kResumed: `tokens` the client had, `replicated` of them held by the KV replica.
  virtual void count(RelayEvent event, uint64_t tokens = 0, uint64_t replicated = 0) = 0;
  // Runs `work` on a thread that may block.
  virtual void run_blocking(std::function<void()> work) = 0;
  // The headers of a request to an instance on behalf of the client (its tenant, signed).
  virtual std::vector<http::Header> upstream_headers(const std::string& authorization, const std::string& method,
                                                     const std::string& path, const std::string& body) = 0;
};

struct RelaySettings {
  http::ClientTimeouts timeouts;
  // Bytes of a stream read from its instance and not yet taken by its client, at most (then the
  // instance is not read until the client catches up).
  size_t buffer_bytes = size_t{1} << 20;
  std::chrono::milliseconds resume_wait{10'000};  // for an instance to resume on, when none answers
  std::chrono::milliseconds resume_retry{200};    // between rounds of the candidates meanwhile
  std::chrono::milliseconds silence_check{500};   // how often a silent stream's instance is looked up
};

// A plan that tries `instances` in order with the same request (the client's, without a body),
// answering `exhausted()` if none answers.
RelayPlan plan_over(std::vector<cluster::InstanceInfo> instances, ReplyDone on_done,
                    std::function<http::Response()> exhausted);

// Starts relaying `plan` on `executor` (a strand of it is the relay's); returns the body to answer
// the client with (http::Response::answer_later). The relay holds `host` until it is done.
std::shared_ptr<http::BodySource> start_relay(boost::asio::any_io_executor executor, RelayHost& host,
                                              RelaySettings settings, RelayPlan plan);

}  // namespace mnemo::router
