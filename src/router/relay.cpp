// Router, relaying replies: a request's reply read from its instance on a thread of its own and
// written to the client as it comes; a streamed reply that breaks off (the instance died, or its
// lease expired while it was silent) resumed on the best other instance and stitched into one
// stream (SPEC D7).
#include "router/relay.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cluster/membership.h"
#include "router/conversation_text.h"
#include "router/router_http.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr size_t kMaxKeptReplyBytes = 4u << 20;  // of a reply, for the prompt tree
// How often a handler waiting for an instance's whole reply looks whether its client is still there.
constexpr auto kClientCheckInterval = std::chrono::milliseconds(250);

}  // namespace

void Router::Upstream::stop_reading() {
  {
    std::lock_guard lock(mutex);
    client_gone = true;
    changed.notify_all();
  }
  client->stop();
}

void Router::Upstream::abandon() {
  stop_reading();
  if (thread.joinable()) thread.join();
}

std::shared_ptr<Router::Upstream> Router::open_upstream(const std::string& method, const std::string& path,
                                                        const std::string& authorization,
                                                        const cluster::InstanceInfo& instance, const std::string& body,
                                                        const std::function<bool()>& client_gone) {
  auto up = std::make_shared<Upstream>();
  try {
    up->client = std::make_unique<httplib::Client>(instance.address);
  } catch (const std::exception&) {  // an address httplib cannot parse (it came from etcd)
    return nullptr;
  }
  if (!up->client->is_valid()) return nullptr;
  up->client->set_connection_timeout(std::chrono::seconds(2));
  up->client->set_read_timeout(std::chrono::duration<double>(config_.upstream_timeout_seconds));
  up->client->set_write_timeout(std::chrono::seconds(30));
  up->thread = std::thread([this, up, method, path, body, auth = authorization] {
    httplib::Request r;
    r.method = method;
    r.path = path;
    for (auto& [name, value] : upstream_headers(auth, method, path, body)) r.set_header(name, value);
    if (!body.empty()) {
      r.set_header("Content-Type", "application/json");
      r.body = body;
    }
    r.response_handler = [up](const httplib::Response& head) {
      std::lock_guard lock(up->mutex);
      up->status = head.status;
      up->content_type = head.get_header_value("Content-Type");
      up->retry_after = head.get_header_value("Retry-After");
      up->headers_ready = true;
      up->changed.notify_all();
      return true;
    };
    r.content_receiver = [this, up](const char* data, size_t n, uint64_t, uint64_t) {
      std::unique_lock lock(up->mutex);
      // A stream whose client reads slower than the instance writes: stop reading the instance
      // (TCP then holds it back) rather than queue without bound. A whole reply is read whole.
      if (up->queued_bytes > config_.relay_buffer_bytes && up->content_type.rfind("text/event-stream", 0) == 0) {
        relay_waits_.fetch_add(1, std::memory_order_relaxed);
        while (up->queued_bytes > config_.relay_buffer_bytes && !up->client_gone.load()) {
          up->changed.wait_for(lock, std::chrono::milliseconds(100));
        }
      }
      up->chunks.emplace_back(data, n);
      up->queued_bytes += n;
      if (up->kept.size() < kMaxKeptReplyBytes) up->kept.append(data, std::min(n, kMaxKeptReplyBytes - up->kept.size()));
      up->changed.notify_all();
      return !up->client_gone.load();
    };
    httplib::Response response;
    httplib::Error error = httplib::Error::Success;
    const bool ok = up->client->send(r, response, error);
    std::lock_guard lock(up->mutex);
    up->broke = !ok;
    up->finished = true;
    up->changed.notify_all();
  });
  std::unique_lock lock(up->mutex);
  // A whole reply's headers come with its end: the client may leave meanwhile.
  while (!up->changed.wait_for(lock, kClientCheckInterval, [&] { return up->headers_ready || up->finished; })) {
    if (client_gone && client_gone()) {
      lock.unlock();
      up->abandon();
      return nullptr;
    }
  }
  if (!up->headers_ready) {  // never answered
    lock.unlock();
    up->thread.join();
    return nullptr;
  }
  return up;
}


std::vector<cluster::InstanceInfo> Router::resume_candidates(const Relay& relay) {
  std::vector<cluster::InstanceInfo> live = live_members();
  std::erase_if(live, [&](const auto& m) { return relay.failed.count(m.id) != 0; });
  std::vector<cluster::InstanceInfo> order;
  const auto take = [&](auto&& wanted) {
    for (auto it = live.begin(); it != live.end();) {
      if (wanted(*it)) {
        order.push_back(std::move(*it));
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  };
  const auto& candidates = relay.failover->candidates;
  const auto among = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end && i < candidates.size(); ++i) take([&](const auto& m) { return m.id == candidates[i].id; });
  };
  among(0, relay.failover->holders);
  if (!relay.state_id.empty()) take([&](const auto& m) { return m.state_id == relay.state_id; });
  among(relay.failover->holders, candidates.size());
  take([](const auto&) { return true; });
  return order;
}

std::shared_ptr<Router::Upstream> Router::resume(Relay& relay) {
  relay.failed.insert(relay.instance);
  json body = relay.failover->request;
  body["mnemo_resume_tokens"] = relay.stitcher.tokens();
  body["mnemo_report_tokens"] = true;
  body.erase("mnemo_replica");  // the resumed part is not replicated
  // A Responses turn goes on as the response its client was getting (ids, text so far).
  if (const json response = relay.stitcher.resume_response(); !response.is_null()) body["mnemo_resume_response"] = response;
  const std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config_.resume_wait_seconds);
  for (;;) {
    for (const auto& candidate : resume_candidates(relay)) {
      std::shared_ptr<Upstream> up = open_upstream(relay.method, relay.path, relay.authorization, candidate, text);
      if (!up) {
        relay.failed.insert(candidate.id);
        continue;
      }
      std::unique_lock lock(up->mutex);
      if (up->status != 200 || up->content_type.rfind("text/event-stream", 0) != 0) {  // refused: try the next
        up->changed.wait(lock, [&] { return up->finished; });
        lock.unlock();
        up->thread.join();
        relay.failed.insert(candidate.id);
        continue;
      }
      lock.unlock();
      const auto replicated = static_cast<uint64_t>(relay.stitcher.replicated_tokens());
      relay.stitcher.begin_resumed();
      relay.instance = candidate.id;
      relay.state_id = candidate.state_id;
      std::lock_guard counters(mutex_);
      ++resumed_streams_;
      resumed_tokens_ += relay.stitcher.tokens().size();
      resumed_replicated_tokens_ += replicated;
      return up;
    }
    // None now: one may be starting (a restart of the failed instance, on its state).
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::lock_guard counters(mutex_);
  ++failed_resumes_;
  return nullptr;
}

bool RelayChannel::write(std::string chunk) {
  std::unique_lock lock(mutex);
  room.wait(lock, [&] { return queued <= limit || gone; });
  if (gone) return false;
  queued += chunk.size();
  chunks.push_back(std::move(chunk));
  if (wake) wake();
  return true;
}

void RelayChannel::finish(bool broke_off) {
  std::lock_guard lock(mutex);
  complete = true;
  broke = broke_off;
  if (wake) wake();
}

bool RelayChannel::client_gone() {
  std::lock_guard lock(mutex);
  return gone;
}

bool RelayBody::pull(std::string& out) {
  std::lock_guard lock(channel_->mutex);
  for (std::string& chunk : channel_->chunks) out += chunk;
  channel_->chunks.clear();
  channel_->queued = 0;
  channel_->room.notify_all();
  return channel_->complete;
}

void RelayBody::on_ready(std::function<void()> wake) {
  std::lock_guard lock(channel_->mutex);
  channel_->wake = std::move(wake);
  if (channel_->wake && (!channel_->chunks.empty() || channel_->complete)) channel_->wake();
}

void RelayBody::cancel() {
  std::lock_guard lock(channel_->mutex);
  channel_->gone = true;
  channel_->wake = nullptr;
  channel_->room.notify_all();
}

bool RelayBody::failed() const {
  std::lock_guard lock(channel_->mutex);
  return channel_->broke;
}

bool Router::forward(const http::Request& req, http::Response& res, const cluster::InstanceInfo& instance,
                     const std::string& body, OnDone on_done, std::shared_ptr<Failover> failover) {
  std::shared_ptr<Upstream> up = open_upstream(req.method, req.path, req.header("Authorization"), instance, body, req.client_gone);
  if (!up && req.client_gone && req.client_gone()) {
    // Nobody to answer: the request ends here, on no instance.
    on_done(499, "", false, instance.id, -1.0);
    return true;
  }
  if (!up) return false;  // the caller tries another instance
  res.set_header("X-Mnemo-Instance", instance.id);
  if (!up->retry_after.empty()) res.set_header("Retry-After", up->retry_after);
  std::unique_lock lock(up->mutex);
  const bool sse = up->content_type.rfind("text/event-stream", 0) == 0;
  if (!sse) {
    while (!up->changed.wait_for(lock, kClientCheckInterval, [&] { return up->finished; })) {
      if (req.client_gone && req.client_gone()) {
        lock.unlock();
        up->abandon();
        on_done(499, "", false, instance.id, -1.0);
        return true;
      }
    }
    lock.unlock();
    up->thread.join();
    if (up->broke) {
      send_error(res, 502, fmt::format("instance {} broke off its reply", instance.id), "server_error", "upstream_failed");
    } else {
      res.status = up->status;
      std::string whole;
      for (const auto& c : up->chunks) whole += c;
      res.set_content(whole, up->content_type.empty() ? "application/json" : up->content_type);
    }
    on_done(up->broke ? 502 : up->status, up->kept, false, instance.id, -1.0);
    return true;
  }
  lock.unlock();
  res.set_header("Cache-Control", "no-cache");
  auto relay = std::make_shared<Relay>();
  relay->method = req.method;
  relay->path = req.path;
  relay->authorization = req.header("Authorization");
  relay->up = up;
  relay->instance = instance.id;
  relay->state_id = instance.state_id;
  if (up->status == 200) relay->failover = std::move(failover);
  auto channel = std::make_shared<RelayChannel>(config_.relay_buffer_bytes);
  // http::Server streams chunked bodies with status 200; an instance's refusal as SSE is not a
  // case its API has, so its status is passed on in the events only.
  res.stream(up->content_type, std::make_shared<RelayBody>(channel));
  {
    std::lock_guard running(relays_mutex_);
    ++relays_running_;
  }
  std::thread([this, relay, channel, on_done] {
    relay_stream(relay, channel, on_done);
    // Last: the router may be destroyed once no relay runs.
    std::lock_guard running(relays_mutex_);
    --relays_running_;
    relays_done_.notify_all();
  }).detach();
  return true;
}

void Router::relay_stream(const std::shared_ptr<Relay>& relay, const std::shared_ptr<RelayChannel>& channel,
                          const OnDone& on_done) {
  const auto client_left = [&](Upstream& u) {
    u.abandon();  // the instance's side ends now, not at its next chunk
    // A client that left before the end: the request no longer counts as in flight.
    if (!relay->reported.exchange(true)) on_done(499, "", true, relay->instance, -1.0);
  };
  for (;;) {
    const std::shared_ptr<Upstream> current = relay->up;  // only this thread replaces it
    Upstream& u = *current;
    std::unique_lock l(u.mutex);
    const bool silent = !u.changed.wait_for(l, std::chrono::milliseconds(500), [&] { return !u.chunks.empty() || u.finished; });
    while (!u.chunks.empty()) {
      std::string chunk = std::move(u.chunks.front());
      u.chunks.pop_front();
      u.queued_bytes -= chunk.size();
      u.changed.notify_all();  // a reader waiting for room
      l.unlock();
      if (relay->failover) {
        chunk = relay->stitcher.feed(chunk);
        if (relay->kept.size() < kMaxKeptReplyBytes) relay->kept += chunk.substr(0, kMaxKeptReplyBytes - relay->kept.size());
      }
      if (relay->first_text_at < 0 && carries_text(chunk)) relay->first_text_at = seconds_now();
      if (!chunk.empty() && !channel->write(std::move(chunk))) return client_left(u);
      l.lock();
    }
    if (!u.finished) {
      l.unlock();
      if (channel->client_gone()) return client_left(u);
      // An instance whose lease expired mid-reply is hung or cut off, not slow: its connection
      // may never break, so stop reading it; the reply resumes elsewhere.
      if (silent && relay->failover && !relay->stitcher.done() && !is_member(relay->instance)) {
        u.stop_reading();
        std::lock_guard counters(mutex_);
        ++expired_upstreams_;
      }
      continue;  // a stopped upstream ends broken: the next turn of the loop resumes it
    }
    bool broke = u.broke;
    const int status = u.status;
    l.unlock();
    if (u.thread.joinable()) u.thread.join();
    if (broke && relay->failover && !relay->stitcher.done()) {
      if (relay->stitcher.finished()) {
        // Only the end marker was lost: the reply itself is whole.
        if (!channel->write("data: [DONE]\n\n")) return client_left(u);
        broke = false;
      } else if (std::shared_ptr<Upstream> next = resume(*relay)) {
        relay->up = std::move(next);
        continue;
      }
    }
    const std::string kept = relay->failover ? relay->kept : u.kept;
    // Before the end reaches the client: a next turn sent at once must find what this one left
    // (its Responses owner, its prompt-tree entries).
    if (!relay->reported.exchange(true)) on_done(broke ? 502 : status, kept, true, relay->instance, relay->first_text_at);
    // An instance gone mid-reply: the client's connection breaks rather than ending as if the
    // reply were whole.
    channel->finish(broke);
    return;
  }
}

}  // namespace mnemo::router
