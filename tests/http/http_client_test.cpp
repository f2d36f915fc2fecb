// http::ClientCall against a real http::Server: whole and streamed replies, flow control, stop,
// timeouts and unreachable instances; and the server's late-head responses (answer_later), which
// a proxy gives its client before its instance has answered.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <vector>

#include "http/client.h"
#include "http_test_support.h"

namespace mnemo::http::testing {
namespace {

// An io_context on its own thread, and what one call reported.
class CallRunner {
 public:
  CallRunner() : thread_([this] { io_.run(); }) {}
  ~CallRunner() {
    work_.reset();
    io_.stop();
    thread_.join();
  }

  struct Record {
    std::mutex mutex;
    std::optional<ReplyHead> head;
    std::string body;
    int data_events = 0;
    std::optional<CallEnd> end;
    std::string why;
    std::string snapshot_body() {
      std::lock_guard lock(mutex);
      return body;
    }
    bool ended() {
      std::lock_guard lock(mutex);
      return end.has_value();
    }
  };

  std::shared_ptr<ClientCall> start(ClientRequest request, const std::shared_ptr<Record>& record,
                                    ClientTimeouts timeouts = {}, std::function<void(ClientCall&)> on_data = {}) {
    auto strand = boost::asio::make_strand(io_.get_executor());
    auto call_box = std::make_shared<std::shared_ptr<ClientCall>>();
    ClientEvents events;
    events.on_head = [record](const ReplyHead& head) {
      std::lock_guard lock(record->mutex);
      EXPECT_FALSE(record->head.has_value()) << "on_head twice";
      record->head = head;
    };
    events.on_data = [record, call_box, on_data](std::string data) {
      {
        std::lock_guard lock(record->mutex);
        EXPECT_TRUE(record->head.has_value()) << "data before the head";
        EXPECT_FALSE(record->end.has_value()) << "data after the end";
        record->body += data;
        ++record->data_events;
      }
      if (on_data && *call_box) on_data(**call_box);
    };
    events.on_end = [record](CallEnd end, const std::string& why) {
      std::lock_guard lock(record->mutex);
      EXPECT_FALSE(record->end.has_value()) << "on_end twice";
      record->end = end;
      record->why = why;
    };
    *call_box = ClientCall::start(strand, std::move(request), timeouts, std::move(events));
    return *call_box;
  }

  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{io_.get_executor()};
  std::thread thread_;
};

ClientRequest request_to(int port, std::string method, std::string target, std::string body = "") {
  ClientRequest r;
  r.method = std::move(method);
  r.address = "http://127.0.0.1:" + std::to_string(port);
  r.target = std::move(target);
  r.body = std::move(body);
  return r;
}

TEST(HttpClient, ReadsAWholeReplyWithItsStatusAndHeaders) {
  TestServer ts;
  ts.server.route("POST", "/echo", [](Request& req, Response& res) {
    res.status = 201;
    res.set_header("X-Seen", req.header("X-Token") + "|" + req.header("Content-Type"));
    res.set_content("got " + req.body + " at " + req.target, "text/plain");
  });
  ts.start();
  CallRunner runner;
  auto record = std::make_shared<CallRunner::Record>();
  ClientRequest r = request_to(ts.port(), "POST", "/echo?x=1", R"({"a":1})");
  r.headers.push_back({"X-Token", "t0"});
  runner.start(r, record);
  ASSERT_TRUE(wait_until([&] { return record->ended(); }));
  EXPECT_EQ(*record->end, CallEnd::kComplete) << record->why;
  ASSERT_TRUE(record->head);
  EXPECT_EQ(record->head->status, 201);
  EXPECT_EQ(record->head->header("x-seen"), "t0|application/json");
  EXPECT_EQ(record->head->header("Content-Type"), "text/plain");
  EXPECT_EQ(record->body, R"(got {"a":1} at /echo?x=1)");
}

TEST(HttpClient, DeliversAStreamAsItArrives) {
  TestServer ts;
  SourceBox box;
  route_sources(ts.server, box);
  ts.start();
  CallRunner runner;
  auto record = std::make_shared<CallRunner::Record>();
  runner.start(request_to(ts.port(), "GET", "/stream"), record);
  const auto source = box.wait_attached(0);
  ASSERT_TRUE(source);
  std::string expected;
  for (int i = 0; i < 5; ++i) {  // each piece arrives before the next is written: nothing waits for the end
    const std::string piece = "data: " + std::to_string(i) + "\n\n";
    source->push(piece);
    expected += piece;
    ASSERT_TRUE(wait_until([&] { return record->snapshot_body() == expected; })) << record->snapshot_body();
  }
  EXPECT_FALSE(record->ended());
  source->push("data: [DONE]\n\n", /*finish=*/true);
  ASSERT_TRUE(wait_until([&] { return record->ended(); }));
  EXPECT_EQ(*record->end, CallEnd::kComplete);
  EXPECT_EQ(record->body, expected + "data: [DONE]\n\n");
  EXPECT_EQ(record->head->header("Transfer-Encoding"), "chunked");
}

TEST(HttpClient, APausedCallReadsNothingUntilResumed) {
  TestServer ts;
  SourceBox box;
  route_sources(ts.server, box);
  ts.start();
  CallRunner runner;
  auto record = std::make_shared<CallRunner::Record>();
  std::atomic<bool> paused{false};
  std::shared_ptr<ClientCall> call = runner.start(request_to(ts.port(), "GET", "/stream"), record, {}, [&](ClientCall& c) {
    if (!paused.exchange(true)) c.pause();  // on the call's executor, as required
  });
  const auto source = box.wait_attached(0);
  ASSERT_TRUE(source);
  source->push("first\n");
  ASSERT_TRUE(wait_until([&] { return paused.load(); }));
  source->push("second\n", /*finish=*/true);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(record->snapshot_body(), "first\n");
  EXPECT_FALSE(record->ended());
  auto strand_resume = [&] {
    std::promise<void> done;
    // ClientCall::start posted its work on a strand of runner.io(); resuming from another
    // handler of the same single-threaded io_context is on its executor too.
    boost::asio::post(runner.io(), [&] {
      call->resume();
      done.set_value();
    });
    done.get_future().wait();
  };
  strand_resume();
  ASSERT_TRUE(wait_until([&] { return record->ended(); }));
  EXPECT_EQ(*record->end, CallEnd::kComplete);
  EXPECT_EQ(record->body, "first\nsecond\n");
}

TEST(HttpClient, StopEndsTheCallAndTheServerSeesItsClientGo) {
  TestServer ts;
  SourceBox box;
  route_sources(ts.server, box);
  ts.start();
  CallRunner runner;
  auto record = std::make_shared<CallRunner::Record>();
  auto call = runner.start(request_to(ts.port(), "GET", "/stream"), record);
  const auto source = box.wait_attached(0);
  ASSERT_TRUE(source);
  source->push("data: 0\n\n");
  ASSERT_TRUE(wait_until([&] { return !record->snapshot_body().empty(); }));
  call->stop();
  ASSERT_TRUE(wait_until([&] { return record->ended(); }));
  EXPECT_EQ(*record->end, CallEnd::kBroken);
  EXPECT_TRUE(wait_until([&] { return source->cancels.load() == 1; }));  // the instance cancels its request
}

TEST(HttpClient, AnUnreachableOrSilentInstanceEndsUnreached) {
  int closed_port = 0;
  {
    TestServer gone;
    gone.start();
    closed_port = gone.port();
  }
  TestServer ts;
  SourceBox box;
  route_sources(ts.server, box);  // GET /defer: answered only when its source is fed, which it never is
  ts.start();
  CallRunner runner;
  auto refused = std::make_shared<CallRunner::Record>();
  runner.start(request_to(closed_port, "GET", "/"), refused);
  auto bad_address = std::make_shared<CallRunner::Record>();
  ClientRequest r = request_to(ts.port(), "GET", "/");
  r.address = "https://127.0.0.1:1";  // not http: the router speaks plain HTTP to its instances
  runner.start(r, bad_address);
  auto silent = std::make_shared<CallRunner::Record>();
  ClientTimeouts quick;
  quick.read = milliseconds(200);
  const auto started = Clock::now();
  runner.start(request_to(ts.port(), "GET", "/defer"), silent, quick);
  ASSERT_TRUE(wait_until([&] { return refused->ended() && bad_address->ended() && silent->ended(); }));
  EXPECT_EQ(*refused->end, CallEnd::kUnreached);
  EXPECT_NE(refused->why.find("connect"), std::string::npos) << refused->why;
  EXPECT_EQ(*bad_address->end, CallEnd::kUnreached);
  EXPECT_NE(bad_address->why.find("https://127.0.0.1:1"), std::string::npos) << bad_address->why;
  EXPECT_EQ(*silent->end, CallEnd::kUnreached);
  EXPECT_GE(ms_since(started), 150);
  EXPECT_LT(ms_since(started), 1500);
  EXPECT_FALSE(refused->head || bad_address->head || silent->head);
  const auto source = box.wait_attached(0);
  ASSERT_TRUE(source);
  EXPECT_TRUE(wait_until([&] { return source->cancels.load() == 1; }));  // the silent one's request is dropped
}

// A source whose head is set later (answer_later), from the test thread.
class LateSource : public TestSource {
 public:
  void set_head(ResponseHead head) {
    {
      std::lock_guard lock(head_mutex_);
      head_ = std::move(head);
    }
    push("");  // wakes the connection
  }
  std::optional<ResponseHead> head() override {
    std::lock_guard lock(head_mutex_);
    return head_;
  }

 private:
  std::mutex head_mutex_;
  std::optional<ResponseHead> head_;
};

TEST(HttpServerLateHead, TheSourceSaysTheStatusHeadersAndWhetherItStreams) {
  TestServer ts;
  std::mutex mutex;
  std::vector<std::shared_ptr<LateSource>> sources;
  ts.server.route("GET", "/later", [&](Request&, Response& res) {
    auto source = std::make_shared<LateSource>();
    res.set_header("X-Early", "1");
    res.answer_later(source);
    std::lock_guard lock(mutex);
    sources.push_back(source);
  });
  ts.start();
  const auto nth = [&](size_t n) {
    std::shared_ptr<LateSource> found;
    wait_until([&] {
      std::lock_guard lock(mutex);
      if (sources.size() > n && sources[n]->attached()) found = sources[n];
      return found != nullptr;
    });
    return found;
  };
  RawClient whole(ts.port());
  ASSERT_TRUE(whole.send(get_request("/later")));
  auto first = nth(0);
  ASSERT_TRUE(first);
  first->push("{\"late\":");  // body before the head: kept until the head says how to send it
  EXPECT_EQ(whole.read_some(milliseconds(150)), -1);  // nothing is written before the head
  first->set_head({503, "application/json", {{"Retry-After", "1"}}, false});
  first->push("true}", /*finish=*/true);
  const auto w = whole.read_response();
  ASSERT_TRUE(w) << whole.buffer();
  EXPECT_EQ(w->status, 503);
  EXPECT_EQ(w->body, "{\"late\":true}");
  EXPECT_EQ(w->header("content-length"), "13");
  EXPECT_EQ(w->header("retry-after"), "1");
  EXPECT_EQ(w->header("x-early"), "1");
  EXPECT_EQ(w->header("content-type"), "application/json");

  RawClient streamed(ts.port());
  ASSERT_TRUE(streamed.send(get_request("/later")));
  auto second = nth(1);
  ASSERT_TRUE(second);
  second->set_head({202, "text/event-stream", {}, true});
  second->push("data: a\n\n");
  ASSERT_TRUE(streamed.read_until([&](const std::string&) { return streamed.chunked_body_so_far() == "data: a\n\n"; }))
      << streamed.buffer();
  second->push("data: b\n\n", /*finish=*/true);
  const auto s = streamed.read_response();
  ASSERT_TRUE(s) << streamed.buffer();
  EXPECT_EQ(s->status, 202);
  EXPECT_EQ(s->header("transfer-encoding"), "chunked");
  EXPECT_EQ(s->header("content-type"), "text/event-stream");
  EXPECT_EQ(s->body, "data: a\n\ndata: b\n\n");
}

}  // namespace
}  // namespace mnemo::http::testing
