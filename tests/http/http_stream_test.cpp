// http::Server: slow clients and deadlines, streamed and deferred bodies, clients that go away,
// and stop() draining what is in flight.
#include <httplib.h>

#include <vector>

#include "http_test_support.h"

namespace mnemo::http::testing {
namespace {

void route_ping(Server& server) {
  server.route("GET", "/ping", [](Request&, Response& res) { res.set_content("pong", "text/plain"); });
}


TEST(HttpStream, SlowClientsDoNotHoldUpOthers) {
  TestServer ts;
  route_ping(ts.server);
  ts.start();
  constexpr int kSlow = 300;
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RawClient>(ts.port()));
    ASSERT_TRUE(slow.back()->connected());
    ASSERT_TRUE(slow.back()->send("GET /ping HTTP/1.1\r\nX-Slow: "));
  }
  std::atomic<bool> dripping{true};
  std::thread drip([&] {
    while (dripping) {
      for (auto& c : slow) c->send("a");  // one header byte each, every 200 ms
      for (int i = 0; i < 20 && dripping; ++i) std::this_thread::sleep_for(milliseconds(10));
    }
  });
  ASSERT_TRUE(wait_until([&] { return ts.server.stats().connections_open >= kSlow; }));
  httplib::Client client("127.0.0.1", ts.port());
  int64_t slowest = 0;
  for (int i = 0; i < 6; ++i) {
    const auto start = Clock::now();
    const auto r = client.Get("/ping");
    slowest = std::max(slowest, ms_since(start));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "pong");
    std::this_thread::sleep_for(milliseconds(150));
  }
  dripping = false;
  drip.join();
  EXPECT_LT(slowest, 500);
  int unanswered = 0;  // the slow ones are still being read, not answered nor dropped
  for (auto& c : slow) unanswered += c->read_some(milliseconds(0)) == -1 ? 1 : 0;
  EXPECT_EQ(unanswered, kSlow);
  EXPECT_EQ(ts.server.stats().timeouts, 0u);
}

TEST(HttpStream, HeadAndIdleDeadlinesCloseStalledConnections) {
  ServerOptions options = test_options();
  options.limits.header_timeout = milliseconds(500);
  options.limits.idle_timeout = milliseconds(300);
  TestServer ts(options);
  route_ping(ts.server);
  ts.start();
  const auto start = Clock::now();
  RawClient stalled(ts.port());  // sends part of a head, then nothing
  ASSERT_TRUE(stalled.send("GET /ping HTTP/1.1\r\nHo"));
  RawClient dripping(ts.port());  // keeps sending, never finishing its head
  ASSERT_TRUE(dripping.send("GET /ping HTTP/1.1\r\nX-Slow: "));
  bool dripping_closed = false;
  while (!dripping_closed && ms_since(start) < 2000) {
    dripping.send("a");
    dripping_closed = dripping.closed_within(milliseconds(100));
  }
  EXPECT_TRUE(dripping_closed);
  EXPECT_GE(ms_since(start), 400);
  EXPECT_TRUE(stalled.closed_within(milliseconds(500)));
  EXPECT_LT(ms_since(start), 2000);
  EXPECT_TRUE(stalled.buffer().empty()) << stalled.buffer();
  EXPECT_TRUE(wait_until([&] { return ts.server.stats().timeouts >= 2; }));

  RawClient idle(ts.port());  // a request, then an idle keep-alive connection
  ASSERT_TRUE(idle.send(get_request("/ping")));
  ASSERT_TRUE(idle.read_response());
  const auto idle_start = Clock::now();
  EXPECT_TRUE(idle.closed_within(milliseconds(2000)));
  EXPECT_GE(ms_since(idle_start), 200);
  EXPECT_TRUE(wait_until([&] { return ts.server.stats().timeouts >= 3; }));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(ts.server.stats().timeouts, 3u);  // one per connection
  EXPECT_TRUE(wait_until([&] { return ts.server.stats().connections_open == 0; }));
}

TEST(HttpStream, StreamsChunksAsTheSourceProducesThem) {
  TestServer ts;
  SourceBox box;
  route_sources(ts.server, box);
  route_ping(ts.server);
  ts.start();
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(get_request("/stream")));
  const auto source = box.wait_attached(0);
  ASSERT_TRUE(source);
  std::string expected;
  std::thread producer([&] {  // each piece from another thread, only once the previous one arrived
    for (int i = 0; i < 5; ++i) {
      const std::string piece = "data: " + std::to_string(i) + "\n\n";
      source->push(piece);
      expected += piece;
      if (!c.read_until([&](const std::string&) { return c.chunked_body_so_far() == expected; })) return;
    }
    source->push("data: [DONE]\n\n", /*finish=*/true);
  });
  producer.join();
  const auto r = c.read_response();
  ASSERT_TRUE(r) << c.buffer();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  EXPECT_EQ(r->header("content-type"), "text/event-stream");
  EXPECT_EQ(r->header("x-stream"), "yes");
  EXPECT_EQ(r->body, expected + "data: [DONE]\n\n");
  EXPECT_TRUE(wait_until([&] { return source->detached(); }));
  EXPECT_EQ(source->cancels.load(), 0);
  ASSERT_TRUE(c.send(get_request("/ping")));  // the connection is kept for the next request
  const auto next = c.read_response();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->body, "pong");
}

TEST(HttpStream, SendsADeferredBodyWholeWithItsLengthAndStatus) {
  TestServer ts;
  SourceBox box;
  route_sources(ts.server, box);
  ts.start();
  std::thread producer([&] {
    const auto source = box.wait_attached(0);
    if (!source) return;
    source->push("{\"a\":");
    std::this_thread::sleep_for(milliseconds(50));
    source->push("1}", /*finish=*/true);
  });
  httplib::Client client("127.0.0.1", ts.port());
  const auto r = client.Get("/defer?status=202");
  producer.join();
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(r->body, "{\"a\":1}");
  EXPECT_EQ(r->get_header_value("Content-Length"), "7");
  EXPECT_FALSE(r->has_header("Transfer-Encoding"));
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
}

TEST(HttpStream, AClientThatGoesAwayCancelsItsPendingBody) {
  TestServer ts;
  SourceBox box;
  std::mutex mutex;
  std::vector<bool> ended;  // ExchangeEnd's `complete`, in order
  ts.server.on_exchange_end([&](const Request&, const Response&, bool complete) {
    std::lock_guard lock(mutex);
    ended.push_back(complete);
  });
  route_sources(ts.server, box);
  ts.start();
  {  // a deferred body that never completes
    RawClient c(ts.port());
    ASSERT_TRUE(c.send(get_request("/defer")));
    const auto source = box.wait_attached(0);
    ASSERT_TRUE(source);
    source->push("partial");
    c.close();
    const auto gone = Clock::now();
    ASSERT_TRUE(wait_until([&] { return source->cancels.load() > 0; }, milliseconds(1000)));
    EXPECT_LT(ms_since(gone), 1000);
    EXPECT_TRUE(wait_until([&] { return source->detached(); }));
    EXPECT_EQ(ts.server.stats().clients_gone, 1u);
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(source->cancels.load(), 1);  // once
  }
  {  // a chunked stream whose client leaves mid-stream
    RawClient c(ts.port());
    ASSERT_TRUE(c.send(get_request("/stream")));
    const auto source = box.wait_attached(1);
    ASSERT_TRUE(source);
    source->push("first");
    ASSERT_TRUE(c.read_until([&](const std::string&) { return c.chunked_body_so_far() == "first"; }));
    c.close();
    ASSERT_TRUE(wait_until([&] { return source->cancels.load() > 0; }, milliseconds(1000)));
    EXPECT_EQ(ts.server.stats().clients_gone, 2u);
    source->push("more, after the client left");  // must not be a problem
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(source->cancels.load(), 1);
  }
  EXPECT_TRUE(wait_until([&] { return ts.server.stats().connections_open == 0; }));
  std::lock_guard lock(mutex);
  EXPECT_EQ(ended, (std::vector<bool>{false, false}));
}

TEST(HttpStream, AClientThatStopsReadingTimesOutAndCancelsTheStream) {
  ServerOptions options = test_options();
  options.limits.write_timeout = milliseconds(300);
  TestServer ts(options);
  SourceBox box;
  route_sources(ts.server, box);
  ts.start();
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(get_request("/stream")));  // and never reads
  const auto source = box.wait_attached(0);
  ASSERT_TRUE(source);
  const std::string megabyte(1 << 20, 'z');
  const auto start = Clock::now();
  for (int pushed = 0; pushed < 256 && source->cancels.load() == 0; ++pushed) {
    source->push(megabyte);  // until the socket buffers are full and a write stalls
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(wait_until([&] { return source->cancels.load() > 0; }, milliseconds(2000)));
  EXPECT_LT(ms_since(start), 4000);
  EXPECT_EQ(ts.server.stats().timeouts, 1u);
  EXPECT_EQ(ts.server.stats().clients_gone, 1u);
  EXPECT_TRUE(wait_until([&] { return ts.server.stats().connections_open == 0; }));
}

TEST(HttpStream, StopClosesIdleConnectionsAndLetsStreamsFinish) {
  TestServer ts;
  SourceBox box;
  route_sources(ts.server, box);
  route_ping(ts.server);
  ts.start();
  RawClient idle(ts.port());
  ASSERT_TRUE(idle.send(get_request("/ping")));
  ASSERT_TRUE(idle.read_response());
  RawClient streaming(ts.port());
  ASSERT_TRUE(streaming.send(get_request("/stream")));
  const auto source = box.wait_attached(0);
  ASSERT_TRUE(source);
  source->push("before stop;");
  ASSERT_TRUE(streaming.read_until([&](const std::string&) { return streaming.chunked_body_so_far() == "before stop;"; }));

  ts.server.stop();
  EXPECT_TRUE(idle.closed_within(milliseconds(1000)));
  EXPECT_TRUE(idle.buffer().empty()) << idle.buffer();
  EXPECT_FALSE(ts.served_within(milliseconds(100)));  // the stream is still in flight
  RawClient late(ts.port());                          // no new connections are served
  EXPECT_TRUE(!late.connected() || late.closed_within(milliseconds(1000)));

  source->push("after stop", /*finish=*/true);
  const auto r = streaming.read_response();
  ASSERT_TRUE(r) << streaming.buffer();
  EXPECT_EQ(r->body, "before stop;after stop");
  EXPECT_TRUE(streaming.closed_within(milliseconds(1000)));
  EXPECT_TRUE(ts.served_within(milliseconds(2000)));
  EXPECT_EQ(source->cancels.load(), 0);
  EXPECT_EQ(ts.server.stats().connections_open, 0);
}

}  // namespace
}  // namespace mnemo::http::testing
