// http::Server: routing, request parsing, limits, head filter, static files, errors, connection
// limit, TLS and bind (streams, timeouts and shutdown are in http_stream_test.cpp).
#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "http_test_support.h"

namespace mnemo::http::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void text(Response& response, std::string body) { response.set_content(std::move(body), "text/plain"); }

std::string error_message(const std::string& body) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("error")) return "<not an error body: " + body + ">";
  return parsed["error"].value("message", "");
}

// A fresh temporary folder, removed at the end of the test.
struct TempDir {
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "mnemo_http_XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  void write(const std::string& name, const std::string& content) const { std::ofstream(path / name) << content; }
  fs::path path;
};

TEST(HttpServer, RoutesExactAndPrefixPathsAndAnswersOthers404InJson) {
  TestServer ts;
  ts.server.route("GET", "/v1/models", [](Request&, Response& res) { text(res, "list"); });
  ts.server.route_prefix("GET", "/v1/models/", [](Request& req, Response& res) { text(res, "model:" + req.path_tail); });
  ts.server.route("POST", "/v1/models", [](Request& req, Response& res) {
    res.status = 201;
    text(res, "posted:" + req.body);
  });
  ts.start();
  httplib::Client client("127.0.0.1", ts.port());
  auto r = client.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "list");
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain");
  r = client.Get("/v1/models/gemma-3");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "model:gemma-3");
  r = client.Get("/v1/models/gemma?x=1");  // the query is not part of the tail
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "model:gemma");
  r = client.Post("/v1/models", "abc", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, "posted:abc");
  // An empty tail, a tail with '/', a near miss, an unknown path, an unrouted method.
  for (const char* path : {"/v1/models/", "/v1/models/a/b", "/v1/model", "/nope"}) {
    r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << path;
    EXPECT_NE(error_message(r->body).find("no route"), std::string::npos) << r->body;
  }
  r = client.Delete("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST(HttpServer, DecodesQueryParametersAndFindsHeadersWithoutCase) {
  TestServer ts;
  ts.server.route("GET", "/echo", [](Request& req, Response& res) {
    json out;
    for (const char* name : {"name", "plus", "flag", "key", "bad", "missing"}) {
      const auto value = req.query_param(name);
      out[name] = value ? json(*value) : json(nullptr);
    }
    out["path"] = req.path;
    out["query"] = req.query;
    out["target"] = req.target;
    out["custom"] = req.header("x-custom-thing");
    out["has_custom"] = req.has_header("X-CUSTOM-THING");
    out["absent"] = req.header("X-Absent");
    out["has_absent"] = req.has_header("x-absent");
    out["remote"] = req.remote_address;
    res.set_content(out.dump(), "application/json");
  });
  ts.start();
  RawClient c(ts.port());
  const std::string target = "/echo?name=a%20b%2Bc&plus=x+y&flag&k%65y=v%3D1&bad=%zz%4";
  ASSERT_TRUE(c.send(get_request(target, "X-Custom-Thing: Value 1\r\n")));
  const auto r = c.read_response();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json out = json::parse(r->body);
  EXPECT_EQ(out["name"], "a b+c");
  EXPECT_EQ(out["plus"], "x y");
  EXPECT_EQ(out["flag"], "");
  EXPECT_EQ(out["key"], "v=1");
  EXPECT_EQ(out["bad"], "%zz%4");  // malformed escapes are kept
  EXPECT_TRUE(out["missing"].is_null());
  EXPECT_EQ(out["path"], "/echo");
  EXPECT_EQ(out["query"], target.substr(6));
  EXPECT_EQ(out["target"], target);
  EXPECT_EQ(out["custom"], "Value 1");
  EXPECT_EQ(out["has_custom"], true);
  EXPECT_EQ(out["absent"], "");
  EXPECT_EQ(out["has_absent"], false);
  EXPECT_EQ(out["remote"], "127.0.0.1");
}

TEST(HttpServer, ServesManyRequestsOnOneKeepAliveConnection) {
  TestServer ts;
  std::atomic<int> calls{0};
  ts.server.route("GET", "/ping", [&](Request&, Response& res) { text(res, "pong" + std::to_string(++calls)); });
  ts.start();
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(get_request("/ping")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "pong1");
  ASSERT_TRUE(c.send(get_request("/missing")));  // a 404 keeps the connection
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  ASSERT_TRUE(c.send(get_request("/ping") + get_request("/ping")));  // pipelined
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "pong2");
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "pong3");
  ASSERT_TRUE(c.send(get_request("/ping", "Connection: close\r\n")));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "pong4");
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.closed_within(milliseconds(1000)));
  EXPECT_EQ(ts.server.stats().connections_accepted, 1u);
}

ServerOptions small_limits() {
  ServerOptions options = test_options();
  options.limits.max_body_bytes = 1024;
  options.limits.max_header_count = 8;
  options.limits.max_header_bytes = 1024;
  return options;
}

void route_echo_and_ping(Server& server) {
  server.route("POST", "/echo", [](Request& req, Response& res) { text(res, req.body); });
  server.route("GET", "/ping", [](Request&, Response& res) { text(res, "pong"); });
}

std::string post_head(const std::string& extra) { return "POST /echo HTTP/1.1\r\nHost: localhost\r\n" + extra + "\r\n"; }

TEST(HttpServer, AnswersABodyOverTheLimitWith413) {
  TestServer ts(small_limits());
  route_echo_and_ping(ts.server);
  ts.start();
  {
    RawClient c(ts.port());  // exactly at the limit
    ASSERT_TRUE(c.send(post_head("Content-Length: 1024\r\n") + std::string(1024, 'x')));
    const auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, std::string(1024, 'x'));
  }
  {
    RawClient c(ts.port());  // a client that waits for 100 Continue before its body
    ASSERT_TRUE(c.send(post_head("Content-Length: 5\r\nExpect: 100-continue\r\n")));
    ASSERT_TRUE(c.read_until([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }));
    EXPECT_EQ(c.buffer().rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << c.buffer();
    c.buffer().clear();
    ASSERT_TRUE(c.send("hello"));
    const auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "hello");
  }
  {
    RawClient c(ts.port());  // a declared length over the limit is refused before the body
    ASSERT_TRUE(c.send(post_head("Content-Length: 100000\r\n")));
    const auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_NE(error_message(r->body).find("1024"), std::string::npos) << r->body;
    EXPECT_TRUE(c.closed_within(milliseconds(1000)));
  }
  httplib::Client client("127.0.0.1", ts.port());  // an ordinary client sending the body
  const auto r = client.Post("/echo", std::string(1025, 'y'), "text/plain");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 413);
}

TEST(HttpServer, AnswersAChunkedBodyOverTheLimitWith413AndKeepsServing) {
  TestServer ts(small_limits());
  route_echo_and_ping(ts.server);
  ts.start();
  {
    RawClient c(ts.port());
    ASSERT_TRUE(c.send(post_head("Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
    const auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello world");
  }
  {
    RawClient c(ts.port());
    ASSERT_TRUE(c.send(post_head("Transfer-Encoding: chunked\r\n")));
    int sent = 0;  // 256-byte chunks until the server answers: the 5th crosses the limit
    for (; sent < 40 && c.buffer().empty(); ++sent) {
      if (!c.send("100\r\n" + std::string(256, 'a') + "\r\n")) break;
      c.read_some(milliseconds(30));
    }
    const auto r = c.read_response();
    ASSERT_TRUE(r) << c.buffer();
    EXPECT_EQ(r->status, 413);
    EXPECT_GE(sent, 5);
    EXPECT_TRUE(c.closed_within(milliseconds(1000)));
  }
  httplib::Client client("127.0.0.1", ts.port());
  const auto r = client.Get("/ping");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServer, AnswersTooManyOrTooLargeHeadersWith431) {
  TestServer ts(small_limits());
  route_echo_and_ping(ts.server);
  ts.start();
  auto headers = [](int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += "X-H" + std::to_string(i) + ": v\r\n";
    return out;
  };
  struct Case {
    std::string request;
    int status;
  };
  const std::vector<Case> cases = {
      {get_request("/ping", headers(7)), 200},  // with Host: 8 fields, the limit
      {get_request("/ping", headers(8)), 431},
      {get_request("/ping", headers(40)), 431},
      {get_request("/ping", "X-Big: " + std::string(800, 'b') + "\r\n"), 200},
      {get_request("/ping", "X-Big: " + std::string(2000, 'b') + "\r\n"), 431},
  };
  for (const Case& test : cases) {
    RawClient c(ts.port());
    ASSERT_TRUE(c.send(test.request));
    const auto r = c.read_response();
    ASSERT_TRUE(r) << test.request.substr(0, 60);
    EXPECT_EQ(r->status, test.status) << test.request.size() << " bytes: " << test.request.substr(0, 60);
    if (test.status == 431) {
      EXPECT_TRUE(c.closed_within(milliseconds(1000)));
    }
  }
}

TEST(HttpServer, AnswersWhatIsNotHttpWith400AndKeepsServing) {
  TestServer ts(small_limits());
  route_echo_and_ping(ts.server);
  ts.start();
  for (const std::string& garbage : {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), std::string("HELLO\r\n\r\n"),
                                    std::string("GET / HTTP/1.1\r\nBad Header\r\n\r\n"), std::string("GET /ping HTTP/9\r\n\r\n"),
                                    post_head("Transfer-Encoding: chunked\r\n") + "zz\r\n"}) {
    RawClient c(ts.port());
    ASSERT_TRUE(c.send(garbage));
    const auto r = c.read_response();
    ASSERT_TRUE(r) << garbage;
    EXPECT_EQ(r->status, 400) << garbage;
    EXPECT_TRUE(c.closed_within(milliseconds(1000))) << garbage;
  }
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(get_request("/ping")));
  const auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServer, HeadFilterAnswersBeforeTheBodyAndExchangeEndReportsEachExchange) {
  TestServer ts;
  std::atomic<int> handled{0};
  struct Ended {
    std::string path;
    int status;
    bool complete;
  };
  std::mutex mutex;
  std::vector<Ended> ended;
  ts.server.on_head([](Request& req, Response& res) {
    if (req.has_header("X-Reject")) {
      res.status = 401;
      text(res, "rejected");
      return false;
    }
    req.context = std::make_shared<std::string>("from the filter");
    return true;
  });
  ts.server.on_exchange_end([&](const Request& req, const Response& res, bool complete) {
    std::lock_guard lock(mutex);
    ended.push_back({req.path, res.status, complete});
  });
  ts.server.route("POST", "/echo", [&](Request& req, Response& res) {
    ++handled;
    const auto* context = static_cast<const std::string*>(req.context.get());
    text(res, req.body + "|" + (context != nullptr ? *context : "no context"));
  });
  ts.start();
  RawClient rejected(ts.port());
  ASSERT_TRUE(rejected.send(post_head("X-Reject: 1\r\nContent-Length: 5\r\n") + "hello"));
  auto r = rejected.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body, "rejected");
  EXPECT_TRUE(rejected.closed_within(milliseconds(1000)));  // the unread body is not taken as a request
  EXPECT_EQ(handled.load(), 0);

  RawClient accepted(ts.port());
  ASSERT_TRUE(accepted.send(post_head("Content-Length: 5\r\n") + "hello"));
  r = accepted.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello|from the filter");
  EXPECT_EQ(handled.load(), 1);
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(mutex);
    return ended.size() == 2;
  }));
  std::lock_guard lock(mutex);
  EXPECT_EQ(ended[0].status, 401);
  EXPECT_TRUE(ended[0].complete);
  EXPECT_EQ(ended[1].path, "/echo");
  EXPECT_EQ(ended[1].status, 200);
  EXPECT_TRUE(ended[1].complete);
}

TEST(HttpServer, ServesStaticFilesOnlyFromItsFolder) {
  TempDir tmp;
  fs::create_directory(tmp.path / "web");
  tmp.write("web/index.html", "<h1>chat</h1>");
  tmp.write("web/app.js", "let x = 1;");
  tmp.write("secret.txt", "top secret");
  fs::create_symlink(tmp.path / "secret.txt", tmp.path / "web" / "link.txt");
  ServerOptions options = test_options();
  options.static_dir = (tmp.path / "web").string();
  TestServer ts(options);
  ts.server.route("GET", "/app.js", [](Request&, Response& res) { text(res, "routed"); });  // routes come first
  ts.start();
  auto get = [&](const std::string& target) {
    RawClient c(ts.port());
    EXPECT_TRUE(c.send(get_request(target)));
    return c.read_response().value_or(RawResponse{});
  };
  RawResponse r = get("/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<h1>chat</h1>");
  EXPECT_EQ(r.header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(get("/index.html").body, "<h1>chat</h1>");
  EXPECT_EQ(get("/app.js").body, "routed");
  for (const char* target : {"/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E%2Fsecret.txt", "/..%2fsecret.txt",
                             "/x/../../secret.txt", "/link.txt", "/missing.html", "//etc/passwd", "/%00index.html"}) {
    r = get(target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_EQ(r.body.find("top secret"), std::string::npos) << target;
  }
}

TEST(HttpServer, AHandlerThatThrowsGets500WithoutTheExceptionText) {
  TestServer ts;
  ts.server.route("GET", "/throw", [](Request&, Response&) -> void { throw std::runtime_error("secret-detail-xyz"); });
  ts.server.route("GET", "/throw-int", [](Request&, Response&) -> void { throw 42; });
  ts.server.route("GET", "/ping", [](Request&, Response& res) { text(res, "pong"); });
  ts.start();
  RawClient c(ts.port());
  for (const char* target : {"/throw", "/throw-int"}) {
    ASSERT_TRUE(c.send(get_request(target)));
    const auto r = c.read_response();
    ASSERT_TRUE(r) << target;
    EXPECT_EQ(r->status, 500);
    EXPECT_EQ(r->body.find("secret"), std::string::npos) << r->body;
    EXPECT_FALSE(error_message(r->body).empty()) << r->body;
  }
  ASSERT_TRUE(c.send(get_request("/ping")));  // same connection, still served
  const auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "pong");
}

TEST(HttpServer, ErrorBodiesCanBeMadeByTheApplication) {
  TestServer ts(small_limits());
  ts.server.on_error_body([](Response& res, int status, const std::string& message) {
    res.status = status;
    text(res, "custom " + std::to_string(status) + ": " + message);
  });
  ts.start();
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(get_request("/nope")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "custom 404: no route for GET /nope");
  ASSERT_TRUE(c.send(post_head("Content-Length: 5000\r\n")));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->body.rfind("custom 413: ", 0), 0u) << r->body;
}

TEST(HttpServer, RefusesConnectionsOverTheLimitWith503) {
  ServerOptions options = test_options();
  options.limits.max_connections = 2;
  TestServer ts(options);
  ts.server.route("GET", "/ping", [](Request&, Response& res) { text(res, "pong"); });
  ts.start();
  auto c1 = std::make_unique<RawClient>(ts.port());
  RawClient c2(ts.port());
  for (RawClient* c : {c1.get(), &c2}) {
    ASSERT_TRUE(c->send(get_request("/ping")));
    ASSERT_TRUE(c->read_response());
  }
  RawClient c3(ts.port());
  EXPECT_TRUE(c3.closed_within(milliseconds(2000)));
  const auto r = c3.read_response(milliseconds(0));
  ASSERT_TRUE(r) << c3.buffer();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(error_message(r->body), "too many open connections");  // the whole body, as long as it says
  EXPECT_TRUE(c3.buffer().empty()) << "bytes past Content-Length: " << c3.buffer();
  EXPECT_EQ(ts.server.stats().connections_refused, 1u);
  EXPECT_EQ(ts.server.stats().connections_open, 2);
  c1.reset();  // a slot frees up
  ASSERT_TRUE(wait_until([&] { return ts.server.stats().connections_open == 1; }));
  RawClient c4(ts.port());
  ASSERT_TRUE(c4.send(get_request("/ping")));
  const auto again = c4.read_response();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(HttpServer, ServesOverTlsAndNotPlainHttpOnTheTlsPort) {
  TempDir tmp;
  const std::string key = (tmp.path / "k.pem").string(), cert = (tmp.path / "c.pem").string();
  const std::string command = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                              " -days 1 -subj /CN=localhost >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  ServerOptions options = test_options();
  options.tls = {cert, key};
  options.limits.header_timeout = milliseconds(1000);
  TestServer ts(options);
  ts.server.route("POST", "/echo", [](Request& req, Response& res) { text(res, "tls:" + req.body); });
  ts.start();
  httplib::SSLClient tls_client("127.0.0.1", ts.port());
  tls_client.enable_server_certificate_verification(false);
  auto r = tls_client.Post("/echo", "hi", "text/plain");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "tls:hi");
  r = tls_client.Post("/echo", "again", "text/plain");  // kept alive
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->body, "tls:again");

  RawClient plain(ts.port());
  ASSERT_TRUE(plain.send(post_head("Content-Length: 2\r\n") + "hi"));
  EXPECT_TRUE(plain.closed_within(milliseconds(2000)));
  EXPECT_EQ(plain.buffer().find("HTTP/1.1 200"), std::string::npos);
  EXPECT_EQ(plain.buffer().find("tls:"), std::string::npos);
  httplib::Client plain_client("127.0.0.1", ts.port());
  plain_client.set_read_timeout(2, 0);
  const auto plain_result = plain_client.Post("/echo", "hi", "text/plain");
  EXPECT_TRUE(!plain_result || plain_result->status != 200);

  httplib::SSLClient after("127.0.0.1", ts.port());  // the server still serves TLS
  after.enable_server_certificate_verification(false);
  r = after.Post("/echo", "still", "text/plain");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->body, "tls:still");
}

TEST(HttpServer, BindFailsOnAPortAlreadyInUse) {
  Server first(test_options());
  const Status bound = first.bind();
  ASSERT_TRUE(bound.ok()) << bound.error().message();
  ASSERT_GT(first.port(), 0);
  ServerOptions options = test_options();
  options.port = first.port();
  Server second(options);
  const Status busy = second.bind();
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.error().message().find("address in use"), std::string::npos) << busy.error().message();
  EXPECT_NE(busy.error().message().find(std::to_string(first.port())), std::string::npos) << busy.error().message();

  ServerOptions missing_cert = test_options();
  missing_cert.tls = {"/nonexistent/c.pem", "/nonexistent/k.pem"};
  Server third(missing_cert);
  const Status no_cert = third.bind();
  ASSERT_FALSE(no_cert.ok());
  EXPECT_NE(no_cert.error().message().find("/nonexistent/c.pem"), std::string::npos) << no_cert.error().message();
}

}  // namespace
}  // namespace mnemo::http::testing
