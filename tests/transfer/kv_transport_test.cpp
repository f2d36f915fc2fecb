// KvTransport: two or more transports in one process on 127.0.0.1 (plus one helper process for
// a peer that dies mid-transfer). Every test runs once per UCX transport selection in kTlsChoices
// (UCX_TLS is set before the first listen of each test; UCX reads it when a context is created).
#include <gtest/gtest.h>

#include "support/ucx_under_tsan.h"
#include "kv_transport_test_support.h"

extern char** environ;

namespace mnemo::transfer::testing {
namespace {

TEST_P(KvTransportTest, ThreeChunksArriveIdenticalAndAcked) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(contains(b->endpoint(), "127.0.0.1:"));
  const KvMessage message = make_message(11, 3, 4096);
  const Status sent = a->send(b->endpoint(), message);
  ASSERT_TRUE(sent.ok()) << sent.error().message();
  // The ack means the handler has run: no waiting needed.
  const auto got = inbox_b.messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], message);
  EXPECT_EQ(inbox_a.count(), 0u);
  // Again over the same (reused) connection, and the other way round.
  ASSERT_TRUE(a->send(b->endpoint(), make_message(12, 1, 64)).ok());
  const Status back = b->send(a->endpoint(), make_message(13, 2, 64));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(inbox_b.count(), 2u);
  EXPECT_EQ(inbox_a.count(), 1u);

  const auto sa = a->stats();
  const auto sb = b->stats();
  EXPECT_EQ(sa.messages_sent, 2u);
  EXPECT_EQ(sb.messages_received, 2u);
  EXPECT_EQ(sa.bytes_sent, encoded_size(message) + encoded_size(make_message(12, 1, 64)));
  EXPECT_EQ(sb.bytes_received, sa.bytes_sent);
  EXPECT_EQ(sa.failed_sends + sb.failed_sends + sa.rejected + sb.rejected, 0u);
  EXPECT_EQ(sa.staged_sends, 2u);
}

// Each message is encoded into a staging buffer that goes back to the pool when its send is
// over, so a run of sends stops allocating.
TEST_P(KvTransportTest, SendsReuseTheirStagingBuffers) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(a->send(b->endpoint(), make_message(100 + i, 4, 65536, i)).ok());
    // The progress thread gives the buffer back once UCX is done with it, which may be just
    // after the acknowledgement resolved the send.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (a->stats().staging_buffers_idle == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(a->stats().staging_buffers_idle, 1u);
  }
  const auto got = inbox_b.messages();
  ASSERT_EQ(got.size(), 6u);
  for (uint64_t i = 0; i < 6; ++i) EXPECT_EQ(got[i], make_message(100 + i, 4, 65536, i));
  const auto s = a->stats();
  EXPECT_EQ(s.staged_sends, 6u);
  EXPECT_EQ(s.staging_reuses, 5u);  // every send after the first
}

TEST_P(KvTransportTest, SixtyFourMiBPayloadArrivesIntact) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  const KvMessage message = make_message(21, 64, 1u << 20);  // 64 chunks of 1 MiB: rendezvous
  const Status sent = a->send(b->endpoint(), message, 8.0);
  ASSERT_TRUE(sent.ok()) << sent.error().message();
  const auto got = inbox_b.messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].chunks, message.chunks);
  EXPECT_TRUE(got[0].payload == message.payload);  // not EXPECT_EQ: it would print 64 MiB
  EXPECT_EQ(b->stats().bytes_received, encoded_size(message));
}

// Block bytes of sender thread s's k-th message: one of each thread's four is large enough for a
// rendezvous, so eager and rendezvous messages interleave on the shared transport's connection.
uint32_t concurrent_block_bytes(uint64_t transfer_id) {
  const auto k = static_cast<uint32_t>(transfer_id % 100);
  return k == 3 ? 1u << 20 : 32 * 1024 * (k + 1);
}

void eight_concurrent_senders_all_delivered(const KvTransportOptions& options) {
  Inbox inbox;
  auto receiver = start(inbox, options);
  ASSERT_TRUE(receiver);
  constexpr int kSenders = 8;
  constexpr int kPerSender = 4;
  // Four threads share one transport (concurrent send() calls), four have one each.
  Inbox unused;
  auto shared = start(unused, options);
  std::vector<std::unique_ptr<KvTransport>> own;
  for (int i = 0; i < kSenders / 2; ++i) own.push_back(start(unused, options));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kSenders);
  for (int s = 0; s < kSenders; ++s) {
    threads.emplace_back([&, s] {
      KvTransport& via = s < kSenders / 2 ? *shared : *own[static_cast<size_t>(s - kSenders / 2)];
      for (int k = 0; k < kPerSender; ++k) {
        const uint64_t id = static_cast<uint64_t>(s * 100 + k);
        const Status st = via.send(receiver->endpoint(), make_message(id, 2, concurrent_block_bytes(id), id), 8.0);
        if (!st.ok()) errors[static_cast<size_t>(s)] += st.error().message() + "; ";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < kSenders; ++s) EXPECT_EQ(errors[static_cast<size_t>(s)], "") << "sender " << s;
  const auto got = inbox.messages();
  ASSERT_EQ(got.size(), static_cast<size_t>(kSenders * kPerSender));
  std::set<uint64_t> ids;
  for (const KvMessage& m : got) {
    ids.insert(m.transfer_id);
    EXPECT_TRUE(m == make_message(m.transfer_id, 2, concurrent_block_bytes(m.transfer_id), m.transfer_id))
        << "transfer " << m.transfer_id;
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kSenders * kPerSender));
  EXPECT_EQ(receiver->stats().rejected, 0u);
}

TEST_P(KvTransportTest, EightConcurrentSendersAllDelivered) { eight_concurrent_senders_all_delivered({}); }

// Signed: the shared transport's concurrent sends get their sequence numbers in the order they go
// out, so the receiver never sees one go backwards (which it would refuse as a replay).
TEST_P(KvTransportTest, EightConcurrentSignedSendersAllDelivered) {
  KvTransportOptions options;
  options.cluster_secret = std::string(32, 'c');
  eight_concurrent_senders_all_delivered(options);
}

TEST_P(KvTransportTest, HandlerErrorComesBackAsTheSendError) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  inbox_b.set_reply(make_error("no room for 3 chunks"));
  const Status sent = a->send(b->endpoint(), make_message(31, 3, 256));
  ASSERT_FALSE(sent.ok());
  const std::string& error = sent.error().message();
  EXPECT_TRUE(contains(error, "refused: no room for 3 chunks")) << error;
  EXPECT_TRUE(contains(error, "kv transfer 31 to " + b->endpoint())) << error;
  EXPECT_EQ(inbox_b.count(), 1u);  // the handler saw it (and said no)
  EXPECT_EQ(a->stats().failed_sends, 1u);
  EXPECT_EQ(b->stats().rejected, 0u);  // a refusal is not damage
}

// A deferred handler keeps the first message's acknowledgement until the test releases it, and
// answers every other message at once: the progress thread must go on meanwhile.
TEST_P(KvTransportTest, DeferredAcknowledgementsDoNotHoldUpOtherTransfers) {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Acknowledge> held;
  auto b = KvTransport::listen("127.0.0.1", 0, [&](KvMessage&& message, Acknowledge acknowledge) {
    std::lock_guard lock(mutex);
    if (message.transfer_id == 41) {
      held.push_back(std::move(acknowledge));
      changed.notify_all();
      return;
    }
    acknowledge(message.transfer_id == 43 ? make_error("no room") : ok_status());
  });
  ASSERT_TRUE(b.ok()) << b.error().message();
  Inbox inbox_a;
  auto a = start(inbox_a);
  ASSERT_TRUE(a);
  auto first = std::async(std::launch::async, [&] { return a->send((*b)->endpoint(), make_message(41, 2, 256), 20); });
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return !held.empty(); }));
  }
  // The first waits for its answer; the next ones are answered meanwhile.
  const Status second = a->send((*b)->endpoint(), make_message(42, 2, 256), 5);
  EXPECT_TRUE(second.ok()) << second.error().message();
  const Status third = a->send((*b)->endpoint(), make_message(43, 1, 256), 5);
  ASSERT_FALSE(third.ok());
  EXPECT_TRUE(contains(third.error().message(), "refused: no room")) << third.error().message();
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  // Answered from another thread, and once only: a second call changes nothing.
  std::thread([&] {
    std::lock_guard lock(mutex);
    held.front()(make_error("too late"));
    held.front()(ok_status());
  }).join();
  const Status answered = first.get();
  ASSERT_FALSE(answered.ok());
  EXPECT_TRUE(contains(answered.error().message(), "refused: too late")) << answered.error().message();
  EXPECT_EQ((*b)->stats().messages_received, 3u);
}

TEST_P(KvTransportTest, AcknowledgingAfterTheTransportIsGoneDoesNothing) {
  Acknowledge kept;
  std::promise<void> got;
  auto b = KvTransport::listen("127.0.0.1", 0, [&](KvMessage&&, Acknowledge acknowledge) {
    kept = std::move(acknowledge);
    got.set_value();
  });
  ASSERT_TRUE(b.ok()) << b.error().message();
  Inbox inbox_a;
  auto a = start(inbox_a);
  ASSERT_TRUE(a);
  auto sent = std::async(std::launch::async, [&] { return a->send((*b)->endpoint(), make_message(51, 1, 256), 10); });
  ASSERT_EQ(got.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  b->reset();  // the receiver goes away with the answer outstanding: its sender gets an error
  kept(ok_status());
  const Status result = sent.get();
  EXPECT_FALSE(result.ok());
}

TEST_P(KvTransportTest, NobodyListeningFailsFast) {
  Inbox inbox;
  auto a = start(inbox);
  ASSERT_TRUE(a);
  const std::string endpoint = "127.0.0.1:" + std::to_string(unused_port());
  const auto started = Clock::now();
  const Status sent = a->send(endpoint, make_message(41, 1, 64), 8.0);
  ASSERT_FALSE(sent.ok());
  EXPECT_LT(seconds_since(started), 3.0);
  const std::string& error = sent.error().message();
  EXPECT_TRUE(contains(error, "kv transfer 41 to " + endpoint)) << error;
  EXPECT_TRUE(contains(error, "failed")) << error;
  // Malformed endpoints fail before anything is sent.
  for (const char* bad : {"nonsense", "127.0.0.1:", "127.0.0.1:99999", ":80", "[::1"}) {
    const Status st = a->send(bad, make_message(42, 1, 64), 1.0);
    EXPECT_FALSE(st.ok()) << bad;
  }
}

TEST_P(KvTransportTest, ListenErrorsAreClear) {
  Inbox inbox;
  auto a = start(inbox);
  ASSERT_TRUE(a);
  const int taken = std::stoi(a->endpoint().substr(a->endpoint().rfind(':') + 1));
  auto twice = KvTransport::listen("127.0.0.1", taken, inbox.handler());
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(contains(twice.error().message(), "cannot listen on 127.0.0.1:" + std::to_string(taken)))
      << twice.error().message();
  auto v6 = KvTransport::listen("::1", 0, inbox.handler());
  ASSERT_FALSE(v6.ok());
  EXPECT_TRUE(contains(v6.error().message(), "IPv6")) << v6.error().message();
  auto unknown = KvTransport::listen("no-such-host.invalid", 0, inbox.handler());
  EXPECT_FALSE(unknown.ok());
  EXPECT_FALSE(a->send("[::1]:" + std::to_string(taken), make_message(44, 1, 64), 1.0).ok());
}

TEST_P(KvTransportTest, InvalidMessageIsNotSent) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  KvMessage m = make_message(45, 2, 64);
  m.payload.pop_back();
  const Status sent = a->send(b->endpoint(), m);
  ASSERT_FALSE(sent.ok());
  EXPECT_TRUE(contains(sent.error().message(), "invalid message")) << sent.error().message();
  EXPECT_EQ(a->stats().messages_sent, 0u);
}

TEST_P(KvTransportTest, DroppedMessageTimesOutAndIsNeverDelivered) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  a->inject_faults(FaultPlan{.drop_next = 1});
  const auto started = Clock::now();
  const Status sent = a->send(b->endpoint(), make_message(51, 2, 64), 0.3);
  ASSERT_FALSE(sent.ok());
  EXPECT_TRUE(contains(sent.error().message(), "timed out")) << sent.error().message();
  EXPECT_GE(seconds_since(started), 0.29);
  EXPECT_LT(seconds_since(started), 2.0);
  // The next one goes through; messages on one connection arrive in order, so had the dropped
  // one been sent at all, it would have arrived first.
  const Status next = a->send(b->endpoint(), make_message(52, 2, 64));
  ASSERT_TRUE(next.ok()) << next.error().message();
  const auto got = inbox_b.messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].transfer_id, 52u);
  EXPECT_EQ(a->stats().failed_sends, 1u);
  EXPECT_EQ(a->stats().messages_sent, 1u);
}

TEST_P(KvTransportTest, TruncatedAndCorruptedMessagesAreRejected) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  // Small (eager) and large (rendezvous) messages both.
  for (const uint32_t block : {256u, 1u << 20}) {
    a->inject_faults(FaultPlan{.truncate_next = 1});
    Status sent = a->send(b->endpoint(), make_message(61, 2, block), 8.0);
    ASSERT_FALSE(sent.ok());
    EXPECT_TRUE(contains(sent.error().message(), "rejected: kv message: truncated")) << sent.error().message();

    a->inject_faults(FaultPlan{.corrupt_next = 1});
    sent = a->send(b->endpoint(), make_message(62, 2, block), 8.0);
    ASSERT_FALSE(sent.ok());
    EXPECT_TRUE(contains(sent.error().message(), "rejected: kv message: checksum mismatch")) << sent.error().message();
  }
  EXPECT_EQ(inbox_b.count(), 0u);  // the handler never saw them
  EXPECT_EQ(b->stats().rejected, 4u);
  EXPECT_EQ(b->stats().messages_received, 0u);
  EXPECT_EQ(a->stats().failed_sends, 4u);
  // The connection is still good.
  const Status clean = a->send(b->endpoint(), make_message(63, 2, 256));
  ASSERT_TRUE(clean.ok()) << clean.error().message();
  EXPECT_EQ(inbox_b.count(), 1u);
}

TEST_P(KvTransportTest, DelayedMessageIsStillDelivered) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  a->inject_faults(FaultPlan{.delay_ms = 50});
  const auto started = Clock::now();
  const Status sent = a->send(b->endpoint(), make_message(71, 2, 64));
  ASSERT_TRUE(sent.ok()) << sent.error().message();
  EXPECT_GE(seconds_since(started), 0.05);
  EXPECT_EQ(inbox_b.count(), 1u);
}

TEST_P(KvTransportTest, DestroyedPeerGivesAnErrorThenReconnects) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a);
  auto b = start(inbox_b);
  ASSERT_TRUE(a && b);
  const std::string endpoint = b->endpoint();
  ASSERT_TRUE(a->send(endpoint, make_message(81, 1, 64)).ok());
  b.reset();
  // The cached connection is dead: whether the sender notices before or during this send, it
  // gets an error promptly, not a hang until the timeout.
  const auto started = Clock::now();
  const Status sent = a->send(endpoint, make_message(82, 1, 64), 8.0);
  ASSERT_FALSE(sent.ok());
  EXPECT_LT(seconds_since(started), 3.0);
  EXPECT_TRUE(contains(sent.error().message(), "kv transfer 82 to " + endpoint)) << sent.error().message();
  // A new instance on the same port: the next send connects afresh.
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  auto again = KvTransport::listen("127.0.0.1", port, inbox_b.handler());
  ASSERT_TRUE(again.ok()) << again.error().message();  // the transport sets SO_REUSEADDR
  const Status reconnected = a->send(endpoint, make_message(83, 1, 64), 8.0);
  EXPECT_TRUE(reconnected.ok()) << reconnected.error().message();
}

constexpr const char* kChildFdVariable = "MNEMO_KV_TRANSPORT_TEST_CHILD_FD";

void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
}

// Reads one line from `fd` within the timeout ("" on timeout or end of file).
std::string read_line(int fd, double timeout_seconds) {
  std::string line;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char c = 0;
    if (::read(fd, &c, 1) != 1) return "";
    if (c == '\n') return line;
    line += c;
  }
  return "";
}

// The helper process of PeerKilledMidTransferGivesAnError: this binary run again with
// kChildFdVariable set. A receiver whose handler reports that it has the message, then never
// returns. It starts before main (a static initialiser), so it is no test of its own.
[[noreturn]] void run_receiver_that_never_answers(int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto t = KvTransport::listen("127.0.0.1", 0, [fd](KvMessage&&) -> Status {
    write_line(fd, "in handler");
    for (;;) ::pause();
  });
  if (!t.ok()) {
    write_line(fd, "");
    ::_exit(1);
  }
  write_line(fd, (*t)->endpoint());
  for (;;) ::pause();
}

const bool kRunAsHelperProcess = [] {
  if (const char* fd_text = std::getenv(kChildFdVariable)) run_receiver_that_never_answers(std::atoi(fd_text));
  return false;
}();

TEST_P(KvTransportTest, PeerKilledMidTransferGivesAnError) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const std::string variable = std::string(kChildFdVariable) + "=" + std::to_string(pipe_fds[1]);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(variable.c_str()));
  env.push_back(nullptr);
  char* argv[] = {const_cast<char*>("transfer_test"), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  const int spawned = ::posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv, env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  ASSERT_EQ(spawned, 0);
  struct Reaper {  // kills the helper however the test ends
    pid_t pid;
    int fd;
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      ::close(fd);
    }
  } reaper{child, pipe_fds[0]};

  const std::string endpoint = read_line(pipe_fds[0], 8.0);
  ASSERT_FALSE(endpoint.empty()) << "the helper process did not start listening";
  Inbox inbox;
  auto a = start(inbox);
  ASSERT_TRUE(a);
  auto sending = std::async(std::launch::async, [&] { return a->send(endpoint, make_message(91, 4, 4096), 8.0); });
  ASSERT_EQ(read_line(pipe_fds[0], 8.0), "in handler");
  ::kill(child, SIGKILL);
  const auto killed = Clock::now();
  ASSERT_EQ(sending.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "send hangs on a dead peer";
  const Status sent = sending.get();
  ASSERT_FALSE(sent.ok());
  EXPECT_LT(seconds_since(killed), 3.0);
  const std::string& error = sent.error().message();
  EXPECT_TRUE(contains(error, "kv transfer 91 to " + endpoint)) << error;
  EXPECT_TRUE(contains(error, "gone")) << error;
}

// UCX transport selections to run every test with. TCP always works; shared memory (posix and
// sysv segments, cross-memory attach) with tcp for the connection manager's wire-up.
const char* const kTlsChoices[] = {"tcp", "posix,sysv,cma,tcp", "default"};
std::string tls_name(const ::testing::TestParamInfo<const char*>& param) {
  std::string name = param.param;
  for (char& c : name) {
    if (c == ',') c = '_';
  }
  return name;
}
INSTANTIATE_TEST_SUITE_P(Ucx, KvTransportTest, ::testing::ValuesIn(kTlsChoices), tls_name);

}  // namespace
}  // namespace mnemo::transfer::testing
