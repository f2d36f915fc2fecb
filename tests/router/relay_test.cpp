// The router's relay state machine (router/relay.h) against real HTTP instances in this process
// (http::Server with test-fed bodies) and a scripted host: the next instance tried when one does
// not answer, the plan's reply when none does, a broken stream resumed on another instance and
// stitched into one, a stream no instance resumes ending broken, and a client that leaves
// stopping its instance's request.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <nlohmann/json.hpp>

#include "../http/http_test_support.h"
#include "router/relay.h"
#include "support/ucx_under_tsan.h"  // mnemo_router links the KV transport (UCX)

namespace mnemo::router {
namespace {

using http::testing::SourceBox;
using http::testing::TestServer;
using http::testing::TestSource;
using http::testing::wait_until;
using nlohmann::json;
using std::chrono::milliseconds;

// A body that can break off: the connection then closes without its last chunk.
class BreakableSource : public TestSource {
 public:
  void break_off() {
    broke_ = true;
    push("", /*finish=*/true);
  }
  bool failed() const override { return broke_; }

 private:
  std::atomic<bool> broke_{false};
};

// An instance: POST /v1/chat/completions streams (SSE) or answers whole; it records what it got.
class Instance {
 public:
  explicit Instance(std::string id, bool stream = true) : id_(std::move(id)) {
    server_.server.route("POST", "/v1/chat/completions", [this, stream](http::Request& req, http::Response& res) {
      auto source = std::make_shared<BreakableSource>();
      {
        std::lock_guard lock(mutex_);
        bodies_.push_back(req.body);
        sources_.push_back(source);
      }
      if (stream) {
        res.stream("text/event-stream", source);
      } else {
        res.defer("application/json", source);
      }
    });
    server_.start();
  }

  cluster::InstanceInfo info() const {
    cluster::InstanceInfo i;
    i.id = id_;
    i.address = "http://127.0.0.1:" + std::to_string(server_.port());
    return i;
  }
  // The n-th request's body source, once its connection has attached to it.
  std::shared_ptr<BreakableSource> source(size_t n) {
    std::shared_ptr<BreakableSource> found;
    wait_until([&] {
      std::lock_guard lock(mutex_);
      if (sources_.size() > n && sources_[n]->attached()) found = sources_[n];
      return found != nullptr;
    });
    return found;
  }
  std::string body(size_t n) {
    std::lock_guard lock(mutex_);
    return n < bodies_.size() ? bodies_[n] : "";
  }

 private:
  std::string id_;
  TestServer server_;
  std::mutex mutex_;
  std::vector<std::string> bodies_;
  std::vector<std::shared_ptr<BreakableSource>> sources_;
};

cluster::InstanceInfo unreachable(const std::string& id) {
  int closed_port = 0;
  {
    TestServer gone;
    gone.start();
    closed_port = gone.port();
  }
  cluster::InstanceInfo i;
  i.id = id;
  i.address = "http://127.0.0.1:" + std::to_string(closed_port);
  return i;
}

class ScriptedHost : public RelayHost {
 public:
  std::vector<cluster::InstanceInfo> resume_candidates(const Failover&, const std::unordered_set<std::string>& failed,
                                                       const std::string&) override {
    std::lock_guard lock(mutex);
    std::vector<cluster::InstanceInfo> out;
    for (const auto& c : resumable) {
      if (failed.count(c.id) == 0) out.push_back(c);
    }
    return out;
  }
  bool is_member(const std::string&) override { return true; }
  void count(RelayEvent event, uint64_t tokens, uint64_t) override {
    std::lock_guard lock(mutex);
    counted.emplace_back(event, tokens);
  }
  void run_blocking(std::function<void()> work) override { boost::asio::post(pool, std::move(work)); }
  std::vector<http::Header> upstream_headers(const std::string&, const std::string&, const std::string&,
                                             const std::string&) override {
    return {{"X-Peer", "scripted"}};
  }
  size_t count_of(RelayEvent event) {
    std::lock_guard lock(mutex);
    return static_cast<size_t>(std::count_if(counted.begin(), counted.end(), [&](const auto& c) { return c.first == event; }));
  }

  std::mutex mutex;
  std::vector<cluster::InstanceInfo> resumable;
  std::vector<std::pair<RelayEvent, uint64_t>> counted;
  boost::asio::thread_pool pool{1};
};

// What a relay's client received, pulled as its connection would.
struct Received {
  std::optional<http::ResponseHead> head;
  std::string body;
  bool complete = false;
  bool failed = false;
  std::string header(const std::string& name) const {
    for (const auto& h : head->headers) {
      if (h.name == name) return h.value;
    }
    return "";
  }
};

// Pulls into `r` (what was received before, if any) until `until` holds.
Received receive(http::BodySource& body, const std::function<bool(const Received&)>& until, Received r = {},
                 milliseconds timeout = milliseconds(5000)) {
  wait_until(
      [&] {
        if (!r.head) r.head = body.head();
        if (r.head && !r.complete) {
          r.complete = body.pull(r.body);
          if (r.complete) r.failed = body.failed();
        }
        return r.head && until(r);
      },
      timeout);
  return r;
}

struct Done {
  std::mutex mutex;
  std::vector<std::tuple<int, std::string, std::string>> calls;  // status, body, instance
  ReplyDone callback() {
    return [this](int status, const std::string& body, bool, const std::string& instance, double) {
      std::lock_guard lock(mutex);
      calls.emplace_back(status, body, instance);
    };
  }
  size_t size() {
    std::lock_guard lock(mutex);
    return calls.size();
  }
};

class RelayTest : public ::testing::Test {
 protected:
  ~RelayTest() override {
    work.reset();
    io.stop();
    for (auto& t : threads) t.join();
    host.pool.join();
  }
  void SetUp() override {
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { io.run(); });
  }

  // A plan over `attempts` in order; `unreached` collects the ids that did not answer.
  RelayPlan plan(std::vector<RelayAttempt> attempts) {
    RelayPlan p;
    p.method = "POST";
    p.path = "/v1/chat/completions";
    auto queue = std::make_shared<std::vector<RelayAttempt>>(std::move(attempts));
    p.next_attempt = [queue]() -> std::optional<RelayAttempt> {
      if (queue->empty()) return std::nullopt;
      RelayAttempt a = queue->front();
      queue->erase(queue->begin());
      return a;
    };
    p.unreached = [this](const RelayAttempt& a) {
      std::lock_guard lock(unreached_mutex);
      unreached.push_back(a.instance.id);
    };
    p.exhausted = [] {
      http::Response r;
      r.status = 503;
      r.set_content(R"({"error":"none"})", "application/json");
      return r;
    };
    return p;
  }

  RelayAttempt attempt(const cluster::InstanceInfo& instance, const json& body, std::shared_ptr<Failover> failover = nullptr) {
    RelayAttempt a;
    a.instance = instance;
    a.body = body.dump();
    a.on_done = done.callback();
    a.failover = std::move(failover);
    return a;
  }

  std::shared_ptr<http::BodySource> start(RelayPlan p, RelaySettings settings = {}) {
    return start_relay(io.get_executor(), host, settings, std::move(p));
  }

  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::vector<std::thread> threads;
  ScriptedHost host;
  Done done;
  std::mutex unreached_mutex;
  std::vector<std::string> unreached;
};

std::string event(const json& payload) { return "data: " + payload.dump() + "\n\n"; }

json chunk(const std::string& text, int token, json finish = nullptr) {
  json choice = {{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", std::move(finish)}, {"mnemo_token", token}};
  return {{"id", "c1"}, {"object", "chat.completion.chunk"}, {"created", 1}, {"model", "m"}, {"choices", {choice}}};
}

TEST_F(RelayTest, TriesTheNextInstanceWhenOneDoesNotAnswer) {
  Instance live("live", /*stream=*/false);
  auto body = start(plan({attempt(unreachable("dead"), {{"a", 1}}), attempt(live.info(), {{"a", 2}})}));
  auto source = live.source(0);
  ASSERT_TRUE(source);
  EXPECT_EQ(live.body(0), R"({"a":2})");
  source->push(R"({"answer":42})", /*finish=*/true);
  const Received r = receive(*body, [](const Received& x) { return x.complete; });
  ASSERT_TRUE(r.head);
  EXPECT_EQ(r.head->status, 200);
  EXPECT_FALSE(r.head->chunked);
  EXPECT_EQ(r.header("X-Mnemo-Instance"), "live");
  EXPECT_EQ(r.body, R"({"answer":42})");
  EXPECT_FALSE(r.failed);
  {
    std::lock_guard lock(unreached_mutex);
    EXPECT_EQ(unreached, std::vector<std::string>{"dead"});
  }
  ASSERT_TRUE(wait_until([&] { return done.size() == 1; }));
  EXPECT_EQ(done.calls[0], std::make_tuple(200, std::string(R"({"answer":42})"), std::string("live")));
}

TEST_F(RelayTest, AnswersThePlansReplyWhenNoInstanceAnswers) {
  auto body = start(plan({attempt(unreachable("a"), {}), attempt(unreachable("b"), {})}));
  const Received r = receive(*body, [](const Received& x) { return x.complete; });
  ASSERT_TRUE(r.head);
  EXPECT_EQ(r.head->status, 503);
  EXPECT_EQ(r.body, R"({"error":"none"})");
  std::lock_guard lock(unreached_mutex);
  EXPECT_EQ(unreached, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(done.size(), 0u);  // no attempt began: nothing to account for
}

TEST_F(RelayTest, ResumesABrokenStreamOnAnotherInstanceAsOneStream) {
  Instance first("first"), second("second");
  host.resumable = {second.info()};
  auto failover = std::make_shared<Failover>();
  failover->request = {{"messages", json::array()}, {"stream", true}, {"mnemo_report_tokens", true}};
  auto body = start(plan({attempt(first.info(), failover->request, failover)}));
  auto a = first.source(0);
  ASSERT_TRUE(a);
  a->push(event(chunk("Hel", 11)) + event(chunk("lo", 12)));
  Received r = receive(*body, [](const Received& x) { return x.body.find("lo") != std::string::npos; });
  ASSERT_TRUE(r.head);
  EXPECT_TRUE(r.head->chunked);
  EXPECT_EQ(r.header("X-Mnemo-Instance"), "first");
  a->break_off();  // the instance dies mid-reply
  auto b = second.source(0);
  ASSERT_TRUE(b);
  const json resumed = json::parse(second.body(0));
  EXPECT_EQ(resumed["mnemo_resume_tokens"], json::array({11, 12}));  // what the client already has
  b->push(event(chunk(" world", 13, "stop")) + "data: [DONE]\n\n", /*finish=*/true);
  r = receive(*body, [](const Received& x) { return x.complete; }, r);
  EXPECT_FALSE(r.failed);
  std::string text;
  for (size_t at = 0; (at = r.body.find("\"content\":\"", at)) != std::string::npos; at += 11) {
    text += r.body.substr(at + 11, r.body.find('"', at + 11) - at - 11);
  }
  EXPECT_EQ(text, "Hello world");
  EXPECT_EQ(r.body.find("mnemo_token"), std::string::npos);  // the router's own fields never reach the client
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
  EXPECT_EQ(host.count_of(RelayEvent::kResumed), 1u);
  ASSERT_TRUE(wait_until([&] { return done.size() == 1; }));
  EXPECT_EQ(std::get<0>(done.calls[0]), 200);
  EXPECT_EQ(std::get<2>(done.calls[0]), "second");  // finished there
}

TEST_F(RelayTest, AStreamNoInstanceResumesEndsBroken) {
  Instance first("first");
  auto failover = std::make_shared<Failover>();
  failover->request = {{"stream", true}};
  RelaySettings settings;
  settings.resume_wait = milliseconds(300);
  settings.resume_retry = milliseconds(50);
  auto body = start(plan({attempt(first.info(), failover->request, failover)}), settings);
  auto a = first.source(0);
  ASSERT_TRUE(a);
  a->push(event(chunk("Hel", 11)));
  const auto broke_at = http::testing::Clock::now();
  a->break_off();
  const Received r = receive(*body, [](const Received& x) { return x.complete; });
  EXPECT_TRUE(r.complete);
  EXPECT_TRUE(r.failed);  // the client's connection breaks, not ends as if whole
  EXPECT_GE(http::testing::ms_since(broke_at), 250);  // it waited for an instance to come back
  EXPECT_EQ(host.count_of(RelayEvent::kResumeFailed), 1u);
  ASSERT_TRUE(wait_until([&] { return done.size() == 1; }));
  EXPECT_EQ(std::get<0>(done.calls[0]), 502);
}

TEST_F(RelayTest, AClientThatLeavesStopsItsInstancesRequest) {
  Instance first("first");
  auto body = start(plan({attempt(first.info(), {{"stream", true}})}));
  auto a = first.source(0);
  ASSERT_TRUE(a);
  a->push(event(chunk("Hel", 11)));
  receive(*body, [](const Received& x) { return !x.body.empty(); });
  body->cancel();
  EXPECT_TRUE(wait_until([&] { return a->cancels.load() == 1; }));
  ASSERT_TRUE(wait_until([&] { return done.size() == 1; }));
  EXPECT_EQ(std::get<0>(done.calls[0]), 499);
}

TEST_F(RelayTest, AClientBehindStopsTheReadingOfItsInstanceUntilItCatchesUp) {
  Instance first("first");
  RelaySettings settings;
  settings.buffer_bytes = 64 << 10;
  auto body = start(plan({attempt(first.info(), {{"stream", true}})}), settings);
  auto a = first.source(0);
  ASSERT_TRUE(a);
  const std::string piece(16 << 10, 'x');
  for (int i = 0; i < 64; ++i) a->push(piece);  // 1 MiB: far past the relay's buffer
  ASSERT_TRUE(wait_until([&] { return host.count_of(RelayEvent::kClientBehind) == 1; }));
  a->push("", /*finish=*/true);
  const Received r = receive(*body, [](const Received& x) { return x.complete; });
  EXPECT_EQ(r.body.size(), 64 * piece.size());  // nothing lost while the instance waited
  EXPECT_FALSE(r.failed);
}

}  // namespace
}  // namespace mnemo::router
