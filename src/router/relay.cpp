// The relay state machine of router/relay.h.
#include "router/relay.h"

#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <fmt/format.h>

#include "router/conversation_text.h"
#include "router/router_http.h"
#include "router/sse_stitcher.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr size_t kMaxKeptReplyBytes = 4u << 20;  // of a reply, for the prompt tree

bool is_event_stream(const http::ReplyHead& head) { return head.header("Content-Type").rfind("text/event-stream", 0) == 0; }

void keep_bounded(std::string& kept, std::string_view more) {
  if (kept.size() < kMaxKeptReplyBytes) kept.append(more.substr(0, kMaxKeptReplyBytes - kept.size()));
}

class Relay final : public std::enable_shared_from_this<Relay> {
 public:
  Relay(boost::asio::any_io_executor strand, RelayHost& host, RelaySettings settings, RelayPlan plan)
      : strand_(std::move(strand)),
        host_(host),
        settings_(settings),
        plan_(std::move(plan)),
        silence_timer_(strand_),
        resume_timer_(strand_) {}

  void start() {
    boost::asio::post(strand_, [self = shared_from_this()] { self->try_next_attempt(); });
  }

  // The client's side, from its connection's I/O thread.
  bool pull(std::string& out) {
    std::lock_guard lock(outbox_mutex_);
    out += outbox_;
    outbox_.clear();
    if (reader_paused_) {
      reader_paused_ = false;
      boost::asio::post(strand_, [self = shared_from_this()] { self->resume_reading(); });
    }
    return complete_;
  }

  std::optional<http::ResponseHead> head() {
    std::lock_guard lock(outbox_mutex_);
    return head_;
  }

  void on_ready(std::function<void()> wake) {
    std::lock_guard lock(outbox_mutex_);
    wake_ = std::move(wake);
    if (wake_ && (head_ || !outbox_.empty() || complete_)) wake_();
  }

  void cancel() {
    {
      std::lock_guard lock(outbox_mutex_);
      if (client_gone_) return;
      client_gone_ = true;
      wake_ = nullptr;
    }
    boost::asio::post(strand_, [self = shared_from_this()] { self->client_left(); });
  }

  bool failed() {
    std::lock_guard lock(outbox_mutex_);
    return broke_;
  }

 private:
  enum class State { kTrying, kWhole, kStreaming, kResuming, kDone };

  // --- attempts: the instances to try, in the plan's order ---

  void try_next_attempt() {
    if (state_ == State::kDone) return;
    attempt_ = plan_.next_attempt();
    if (!attempt_) {
      state_ = State::kDone;
      const http::Response reply = plan_.exhausted();
      return publish_whole({reply.status, reply.content_type, reply.headers, false}, reply.body);
    }
    state_ = State::kTrying;
    instance_ = attempt_->instance.id;
    state_id_ = attempt_->instance.state_id;
    call(attempt_->instance, attempt_->body);
  }

  // A new call starts only once the previous one has ended (its on_end is its last event), so
  // every event that arrives is the current call's.
  void call(const cluster::InstanceInfo& instance, const std::string& body) {
    http::ClientRequest request;
    request.method = plan_.method;
    request.address = instance.address;
    request.target = plan_.path;
    request.headers = host_.upstream_headers(plan_.authorization, plan_.method, plan_.path, body);
    request.body = body;
    auto self = shared_from_this();
    http::ClientEvents events;
    events.on_head = [self](const http::ReplyHead& head) { self->on_head(head); };
    events.on_data = [self](std::string data) { self->on_data(std::move(data)); };
    events.on_end = [self](http::CallEnd end, const std::string& why) { self->on_end(end, why); };
    call_ = http::ClientCall::start(strand_, std::move(request), settings_.timeouts, std::move(events));
  }

  // --- the current call's events ---

  void on_head(const http::ReplyHead& head) {
    if (state_ == State::kResuming) return on_resume_head(head);
    if (state_ != State::kTrying) return;
    status_ = head.status;
    reply_headers_ = attempt_->headers;
    reply_headers_.push_back({"X-Mnemo-Instance", instance_});
    if (const std::string retry = head.header("Retry-After"); !retry.empty()) reply_headers_.push_back({"Retry-After", retry});
    content_type_ = head.header("Content-Type");
    if (!is_event_stream(head)) {
      state_ = State::kWhole;
      return;
    }
    state_ = State::kStreaming;
    if (head.status == 200) failover_ = attempt_->failover;
    reply_headers_.push_back({"Cache-Control", "no-cache"});
    {
      std::lock_guard lock(outbox_mutex_);
      head_ = http::ResponseHead{head.status, content_type_, reply_headers_, true};
      if (wake_) wake_();
    }
    if (failover_) watch_silence();
  }

  void on_data(std::string data) {
    if (state_ == State::kWhole) {
      keep_bounded(kept_, data);
      whole_body_ += data;
      return;
    }
    if (state_ != State::kStreaming) return;  // a refused resume's body
    heard_ = true;
    if (failover_) data = stitcher_.feed(data);
    keep_bounded(kept_, data);
    if (first_text_at_ < 0 && carries_text(data)) first_text_at_ = seconds_now();
    if (!data.empty()) send(std::move(data));
  }

  void on_end(http::CallEnd end, const std::string& why) {
    switch (state_) {
      case State::kTrying:  // no reply began: the next instance
        plan_.unreached(*attempt_);
        return try_next_attempt();
      case State::kWhole:
        state_ = State::kDone;
        if (end != http::CallEnd::kComplete) {
          return report(502, kept_, false, [self = shared_from_this(), why] {
            http::Response reply;
            send_error(reply, 502, fmt::format("instance {} broke off its reply ({})", self->instance_, why), "server_error",
                       "upstream_failed");
            self->publish_whole({reply.status, reply.content_type, self->reply_headers_, false}, std::move(reply.body));
          });
        }
        return report(status_, kept_, false, [self = shared_from_this()] {
          self->publish_whole({self->status_, self->content_type_.empty() ? "application/json" : self->content_type_,
                               self->reply_headers_, false},
                              std::move(self->whole_body_));
        });
      case State::kStreaming:
        return on_stream_end(end != http::CallEnd::kComplete);
      case State::kResuming:  // the candidate did not take it
        failed_.insert(candidate_);
        return try_next_resume();
      case State::kDone:
        return;
    }
  }

  void on_stream_end(bool broke) {
    if (broke && failover_ && !stitcher_.done()) {
      if (!stitcher_.finished()) return begin_resume();
      send("data: [DONE]\n\n");  // only the end marker was lost: the reply itself is whole
      broke = false;
    }
    end_stream(broke);
  }

  void end_stream(bool broke) {
    state_ = State::kDone;
    stop_timers();
    // An instance gone mid-reply: the client's connection breaks rather than ending as if the
    // reply were whole.
    report(broke ? 502 : status_, kept_, true, [self = shared_from_this(), broke] {
      std::lock_guard lock(self->outbox_mutex_);
      self->complete_ = true;
      self->broke_ = broke;
      if (self->wake_) self->wake_();
    });
  }

  // --- failover (SPEC D7) ---

  void begin_resume() {
    state_ = State::kResuming;
    failed_.insert(instance_);
    json body = failover_->request;
    body["mnemo_resume_tokens"] = stitcher_.tokens();
    body["mnemo_report_tokens"] = true;
    body.erase("mnemo_replica");  // the resumed part is not replicated
    // A Responses turn goes on as the response its client was getting (ids, text so far).
    if (const json response = stitcher_.resume_response(); !response.is_null()) body["mnemo_resume_response"] = response;
    resume_body_ = body.dump(-1, ' ', false, json::error_handler_t::replace);
    resume_deadline_ = std::chrono::steady_clock::now() + settings_.resume_wait;
    resume_queue_ = host_.resume_candidates(*failover_, failed_, state_id_);
    try_next_resume();
  }

  void try_next_resume() {
    if (state_ != State::kResuming) return;
    if (resume_queue_.empty()) {
      if (std::chrono::steady_clock::now() >= resume_deadline_) {
        host_.count(RelayEvent::kResumeFailed);
        return end_stream(true);
      }
      // None now: one may be starting (a restart of the failed instance, on its state).
      resume_timer_.expires_after(settings_.resume_retry);
      resume_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (ec || self->state_ != State::kResuming) return;
        self->resume_queue_ = self->host_.resume_candidates(*self->failover_, self->failed_, self->state_id_);
        self->try_next_resume();
      });
      return;
    }
    const cluster::InstanceInfo candidate = std::move(resume_queue_.front());
    resume_queue_.erase(resume_queue_.begin());
    candidate_ = candidate.id;
    candidate_state_id_ = candidate.state_id;
    call(candidate, resume_body_);
  }

  void on_resume_head(const http::ReplyHead& head) {
    if (head.status != 200 || !is_event_stream(head)) return;  // refused: its end tries the next
    const auto replicated = static_cast<uint64_t>(stitcher_.replicated_tokens());
    stitcher_.begin_resumed();
    instance_ = candidate_;
    state_id_ = candidate_state_id_;
    state_ = State::kStreaming;
    host_.count(RelayEvent::kResumed, stitcher_.tokens().size(), replicated);
  }

  // An instance whose lease expired mid-reply is hung or cut off, not slow: its connection may
  // never break, so the relay stops reading it and the reply resumes elsewhere.
  void watch_silence() {
    silence_timer_.expires_after(settings_.silence_check);
    silence_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->state_ == State::kDone) return;
      if (self->state_ == State::kStreaming && !self->heard_ && !self->stitcher_.done() &&
          !self->host_.is_member(self->instance_)) {
        self->host_.count(RelayEvent::kUpstreamExpired);
        self->call_->stop();  // it ends broken: the stream resumes
      }
      self->heard_ = false;
      self->watch_silence();
    });
  }

  // --- the client's side ---

  void send(std::string data) {
    std::lock_guard lock(outbox_mutex_);
    if (client_gone_) return;
    outbox_ += data;
    if (outbox_.size() > settings_.buffer_bytes && !reader_paused_) {
      // A client slower than its instance: stop reading the instance (TCP then holds it back)
      // rather than queue without bound. Paused under the lock: the resume that pull() posts
      // comes after it.
      reader_paused_ = true;
      call_->pause();
      host_.count(RelayEvent::kClientBehind);
    }
    if (wake_) wake_();
  }

  void resume_reading() {
    if (state_ == State::kStreaming && call_) call_->resume();
  }

  void publish_whole(http::ResponseHead head, std::string body) {
    std::lock_guard lock(outbox_mutex_);
    head_ = std::move(head);
    outbox_ = std::move(body);
    complete_ = true;
    if (wake_) wake_();
  }

  void client_left() {
    if (state_ == State::kDone) return;
    state_ = State::kDone;
    stop_timers();
    if (call_) call_->stop();  // the instance's side ends now, not at its next chunk
    // A client that left before the end: the request no longer counts as in flight.
    if (attempt_) report(499, "", failover_ != nullptr, [] {});
  }

  void stop_timers() {
    silence_timer_.cancel();
    resume_timer_.cancel();
  }

  // The reply's bookkeeping (once), then `then` back on the strand.
  void report(int status, std::string body, bool sse, std::function<void()> then) {
    if (reported_ || !attempt_) return then();
    reported_ = true;
    host_.run_blocking([on_done = attempt_->on_done, strand = strand_, status, body = std::move(body), sse,
                        instance = instance_, first_text_at = first_text_at_, then = std::move(then)] {
      on_done(status, body, sse, instance, first_text_at);
      boost::asio::post(strand, then);
    });
  }

  boost::asio::any_io_executor strand_;
  RelayHost& host_;
  const RelaySettings settings_;
  const RelayPlan plan_;

  // On the strand:
  State state_ = State::kTrying;
  std::optional<RelayAttempt> attempt_;
  std::shared_ptr<http::ClientCall> call_;
  std::string instance_, state_id_;  // of the instance the reply comes from now
  int status_ = 0;
  std::string content_type_;
  std::vector<http::Header> reply_headers_;
  std::string whole_body_;
  std::string kept_;  // what the client got (bounded), for the prompt tree
  std::shared_ptr<Failover> failover_;
  SseStitcher stitcher_;
  std::unordered_set<std::string> failed_;  // instances that broke off this reply, or refused it
  double first_text_at_ = -1;
  bool heard_ = false;  // the stream had data since the last silence check
  bool reported_ = false;
  std::string resume_body_;
  std::vector<cluster::InstanceInfo> resume_queue_;
  std::chrono::steady_clock::time_point resume_deadline_;
  std::string candidate_, candidate_state_id_;  // the instance asked to resume
  boost::asio::steady_timer silence_timer_;
  boost::asio::steady_timer resume_timer_;

  // Shared with the client's connection:
  std::mutex outbox_mutex_;
  std::optional<http::ResponseHead> head_;
  std::string outbox_;  // body ready for the client
  bool complete_ = false;
  bool broke_ = false;
  bool client_gone_ = false;
  bool reader_paused_ = false;  // the instance is not read until the client takes the outbox
  std::function<void()> wake_;
};

class RelayBody final : public http::BodySource {
 public:
  explicit RelayBody(std::shared_ptr<Relay> relay) : relay_(std::move(relay)) {}
  ~RelayBody() override { relay_->cancel(); }
  bool pull(std::string& out) override { return relay_->pull(out); }
  void on_ready(std::function<void()> wake) override { relay_->on_ready(std::move(wake)); }
  void cancel() override { relay_->cancel(); }
  std::optional<http::ResponseHead> head() override { return relay_->head(); }
  bool failed() const override { return relay_->failed(); }

 private:
  std::shared_ptr<Relay> relay_;
};

}  // namespace

RelayPlan plan_over(std::vector<cluster::InstanceInfo> instances, ReplyDone on_done,
                    std::function<http::Response()> exhausted) {
  RelayPlan plan;
  auto next = std::make_shared<size_t>(0);
  plan.next_attempt = [instances = std::move(instances), on_done = std::move(on_done), next]() -> std::optional<RelayAttempt> {
    if (*next >= instances.size()) return std::nullopt;
    RelayAttempt attempt;
    attempt.instance = instances[(*next)++];
    attempt.on_done = on_done;
    return attempt;
  };
  plan.unreached = [](const RelayAttempt&) {};
  plan.exhausted = std::move(exhausted);
  return plan;
}

std::shared_ptr<http::BodySource> start_relay(boost::asio::any_io_executor executor, RelayHost& host,
                                              RelaySettings settings, RelayPlan plan) {
  auto relay = std::make_shared<Relay>(boost::asio::make_strand(executor), host, settings, std::move(plan));
  relay->start();
  return std::make_shared<RelayBody>(relay);
}

}  // namespace mnemo::router
