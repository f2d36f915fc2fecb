// KvTransport: two or more transports in one process on 127.0.0.1 (plus one helper process for
// a peer that dies mid-transfer). Every test runs once per UCX transport selection in kTlsChoices
// (UCX_TLS is set before the first listen of each test; UCX reads it when a context is created).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/ucx_under_tsan.h"
#include "transfer/kv_transport.h"

extern char** environ;

namespace mnemo::transfer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A message whose payload is a cheap function of (seed, offset), so big ones are quick to make.
KvMessage make_message(uint64_t transfer_id, size_t n_chunks, uint32_t block_bytes, uint64_t seed = 7) {
  KvMessage m;
  m.transfer_id = transfer_id;
  m.ns = 3;
  m.layout_fingerprint = 0xabcdef0123456789ULL;
  m.block_bytes = block_bytes;
  for (size_t i = 0; i < n_chunks; ++i) {
    KvChunkMeta c;
    c.key = seed * 1000 + i + 1;
    c.parent_key = i == 0 ? 0 : c.key - 1;
    c.position = static_cast<int32_t>(i * 16);
    for (int t = 0; t < 16; ++t) c.tokens.push_back(static_cast<int32_t>(i * 16 + t));
    m.chunks.push_back(std::move(c));
  }
  m.payload.resize(n_chunks * block_bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < m.payload.size(); ++i) {
    if (i % 8 == 0) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    m.payload[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
  }
  return m;
}

// What a receiving transport's handler got; the handler answers `reply`.
class Inbox {
 public:
  MessageHandler handler() {
    return [this](KvMessage&& message) {
      std::lock_guard lock(mutex_);
      messages_.push_back(std::move(message));
      changed_.notify_all();
      return reply_;
    };
  }
  void set_reply(Status reply) {
    std::lock_guard lock(mutex_);
    reply_ = std::move(reply);
  }
  std::vector<KvMessage> messages() {
    std::lock_guard lock(mutex_);
    return messages_;
  }
  size_t count() {
    std::lock_guard lock(mutex_);
    return messages_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<KvMessage> messages_;
  Status reply_ = ok_status();
};

std::unique_ptr<KvTransport> start(Inbox& inbox, KvTransportOptions options = {}) {
  auto t = KvTransport::listen("127.0.0.1", 0, inbox.handler(), std::move(options));
  EXPECT_TRUE(t.ok()) << t.error().message();
  return t.ok() ? std::move(*t) : nullptr;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A loopback port nothing listens on now (the kernel's pick for port 0, released again).
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}


class KvTransportTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "default") {
      ::unsetenv("UCX_TLS");
    } else {
      ::setenv("UCX_TLS", GetParam(), 1);
    }
  }
};

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

// ---- authentication (cluster secret) ----------------------------------------------------------

const std::string kSecret(32, 's');
const std::string kOtherSecret(32, 'o');

KvTransportOptions secret_options(const std::string& secret, KvLimits limits = {}) {
  KvTransportOptions options;
  options.cluster_secret = secret;
  options.limits = limits;
  return options;
}

// One message that goes eagerly, one whose body is large enough for a rendezvous (the header is
// then checked before any body byte moves).
std::vector<KvMessage> eager_and_rendezvous(uint64_t first_id) {
  return {make_message(first_id, 3, 4096), make_message(first_id + 1, 2, 1u << 20)};
}

size_t body_size(const KvMessage& m) { return encoded_size(m) - kKvMessageHeaderBytes; }

TEST_P(KvTransportTest, SignedRoundTripWithMatchingSecrets) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a, secret_options(kSecret));
  auto b = start(inbox_b, secret_options(kSecret));
  ASSERT_TRUE(a && b);
  const std::vector<KvMessage> messages = eager_and_rendezvous(201);
  for (const KvMessage& m : messages) {
    const Status sent = a->send(b->endpoint(), m, 8.0);
    ASSERT_TRUE(sent.ok()) << sent.error().message();
  }
  ASSERT_TRUE(b->send(a->endpoint(), make_message(203, 1, 64)).ok());
  const auto got = inbox_b.messages();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], messages[0]);
  EXPECT_TRUE(got[1] == messages[1]);  // not EXPECT_EQ: it would print 2 MiB
  EXPECT_EQ(inbox_a.count(), 1u);
  const auto sb = b->stats();
  EXPECT_EQ(sb.messages_received, 2u);
  EXPECT_EQ(sb.rejected + sb.refused_unauthenticated + sb.refused_replayed + sb.refused_oversized, 0u);
  EXPECT_EQ(sb.receive_buffers, 2u);
  EXPECT_EQ(sb.receive_buffer_bytes, body_size(messages[0]) + body_size(messages[1]));
}

TEST_P(KvTransportTest, MessageSignedWithAnotherSecretIsRefusedBeforeAllocation) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a, secret_options(kOtherSecret));
  auto b = start(inbox_b, secret_options(kSecret));
  ASSERT_TRUE(a && b);
  for (const KvMessage& m : eager_and_rendezvous(211)) {
    const Status sent = a->send(b->endpoint(), m, 8.0);
    ASSERT_FALSE(sent.ok());
    EXPECT_TRUE(contains(sent.error().message(), "rejected: kv message: header MAC does not match"))
        << sent.error().message();
  }
  const auto sb = b->stats();
  EXPECT_EQ(sb.refused_unauthenticated, 2u);
  EXPECT_EQ(sb.rejected, 2u);
  EXPECT_EQ(sb.receive_buffers, 0u);  // nothing sized by those headers was allocated
  EXPECT_EQ(inbox_b.count(), 0u);
}

TEST_P(KvTransportTest, UnsignedSenderIsRefusedByASecretedReceiverAndTheOtherWayRound) {
  Inbox inbox_a, inbox_b;
  auto unsigned_transport = start(inbox_a);
  auto secreted = start(inbox_b, secret_options(kSecret));
  ASSERT_TRUE(unsigned_transport && secreted);
  Status sent = unsigned_transport->send(secreted->endpoint(), make_message(221, 2, 256));
  ASSERT_FALSE(sent.ok());
  EXPECT_TRUE(contains(sent.error().message(), "header MAC does not match")) << sent.error().message();
  EXPECT_EQ(secreted->stats().refused_unauthenticated, 1u);
  EXPECT_EQ(secreted->stats().receive_buffers, 0u);
  // A receiver without a secret cannot check a signed message: it refuses it too.
  sent = secreted->send(unsigned_transport->endpoint(), make_message(222, 2, 256));
  ASSERT_FALSE(sent.ok());
  EXPECT_TRUE(contains(sent.error().message(), "no cluster secret")) << sent.error().message();
  EXPECT_EQ(unsigned_transport->stats().refused_unauthenticated, 1u);
  EXPECT_EQ(inbox_a.count() + inbox_b.count(), 0u);
}

// An attacker on the path rewrites a header field (here the declared payload size, to 64 GiB
// more) and repairs the checksums: the header MAC refuses it before anything is allocated.
TEST_P(KvTransportTest, ChangedHeaderIsRefusedBeforeAllocation) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a, secret_options(kSecret));
  auto b = start(inbox_b, secret_options(kSecret));
  ASSERT_TRUE(a && b);
  FaultPlan plan;
  plan.tamper = [](std::vector<uint8_t>& bytes) {
    bytes[56 + 4] ^= 0x10;  // payload bytes += 2^36
    update_checksums(bytes);
  };
  a->inject_faults(plan);
  for (const KvMessage& m : eager_and_rendezvous(231)) {
    const Status sent = a->send(b->endpoint(), m, 8.0);
    ASSERT_FALSE(sent.ok());
    EXPECT_TRUE(contains(sent.error().message(), "header MAC does not match")) << sent.error().message();
  }
  const auto sb = b->stats();
  EXPECT_EQ(sb.refused_unauthenticated, 2u);
  EXPECT_EQ(sb.receive_buffers, 0u);
  EXPECT_EQ(sb.receive_buffer_bytes, 0u);
  EXPECT_EQ(inbox_b.count(), 0u);
}

TEST_P(KvTransportTest, ChangedPayloadIsRefusedBeforeTheHandlerSeesIt) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a, secret_options(kSecret));
  auto b = start(inbox_b, secret_options(kSecret));
  ASSERT_TRUE(a && b);
  FaultPlan plan;
  plan.tamper = [](std::vector<uint8_t>& bytes) {
    bytes.back() ^= 0x01;  // the last payload byte
    update_checksums(bytes);
  };
  a->inject_faults(plan);
  const std::vector<KvMessage> messages = eager_and_rendezvous(241);
  for (const KvMessage& m : messages) {
    const Status sent = a->send(b->endpoint(), m, 8.0);
    ASSERT_FALSE(sent.ok());
    EXPECT_TRUE(contains(sent.error().message(), "rejected: kv message: message MAC does not match"))
        << sent.error().message();
  }
  const auto sb = b->stats();
  EXPECT_EQ(inbox_b.count(), 0u);
  EXPECT_EQ(sb.messages_received, 0u);
  EXPECT_EQ(sb.refused_unauthenticated, 2u);
  EXPECT_EQ(sb.receive_buffers, 2u);  // their headers were genuine: the bodies were received, then refused
  // The connection and the sender's sequence go on.
  a->inject_faults(FaultPlan{});
  ASSERT_TRUE(a->send(b->endpoint(), make_message(243, 1, 256)).ok());
  EXPECT_EQ(inbox_b.count(), 1u);
}

TEST_P(KvTransportTest, ReplayedMessageIsRefused) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a, secret_options(kSecret));
  auto b = start(inbox_b, secret_options(kSecret));
  ASSERT_TRUE(a && b);
  // Both tampers run on a's progress thread, one send after the other.
  auto captured = std::make_shared<std::vector<uint8_t>>();
  FaultPlan capture;
  capture.tamper = [captured](std::vector<uint8_t>& bytes) { *captured = bytes; };
  a->inject_faults(capture);
  const KvMessage m = make_message(251, 2, 4096);
  ASSERT_TRUE(a->send(b->endpoint(), m).ok());
  FaultPlan replay;
  replay.tamper = [captured](std::vector<uint8_t>& bytes) { bytes = *captured; };
  a->inject_faults(replay);
  const Status again = a->send(b->endpoint(), m);
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(contains(again.error().message(), "(a replay)")) << again.error().message();
  const auto sb = b->stats();
  EXPECT_EQ(sb.refused_replayed, 1u);
  EXPECT_EQ(sb.receive_buffers, 1u);  // the original only
  EXPECT_EQ(inbox_b.count(), 1u);
}

// A message sent (signed) to one receiver, replayed to another that has already had later ones
// from the same sender: its sequence goes backwards there, further than that receiver's replay
// window.
TEST_P(KvTransportTest, SequenceGoingBackwardsIsRefused) {
  Inbox inbox_a, inbox_b, inbox_c;
  auto a = start(inbox_a, secret_options(kSecret));
  KvTransportOptions narrow = secret_options(kSecret);
  narrow.replay_window = 2;
  auto b = start(inbox_b, narrow);
  auto c = start(inbox_c, secret_options(kSecret));
  ASSERT_TRUE(a && b && c);
  auto captured = std::make_shared<std::vector<uint8_t>>();
  FaultPlan capture;
  capture.tamper = [captured](std::vector<uint8_t>& bytes) { *captured = bytes; };
  a->inject_faults(capture);
  const KvMessage first = make_message(261, 1, 256);
  ASSERT_TRUE(a->send(c->endpoint(), first).ok());  // sequence 1, to c
  a->inject_faults(FaultPlan{});
  for (uint64_t id = 262; id < 265; ++id) ASSERT_TRUE(a->send(b->endpoint(), make_message(id, 1, 256)).ok());  // 2..4
  FaultPlan replay;
  replay.tamper = [captured](std::vector<uint8_t>& bytes) { bytes = *captured; };
  a->inject_faults(replay);
  const Status backwards = a->send(b->endpoint(), first);
  ASSERT_FALSE(backwards.ok());
  EXPECT_TRUE(contains(backwards.error().message(), "sequence 1 from sender")) << backwards.error().message();
  EXPECT_TRUE(contains(backwards.error().message(), "beyond the replay window of 2")) << backwards.error().message();
  EXPECT_EQ(b->stats().refused_replayed, 1u);
  EXPECT_EQ(inbox_b.count(), 3u);
  EXPECT_EQ(inbox_c.count(), 1u);
}

// Declared sizes beyond the receiver's limits or its KV layout, genuinely signed: refused from
// the header, the body never fetched nor allocated.
TEST_P(KvTransportTest, OversizedDeclaredLengthIsRefusedWithoutAllocating) {
  Inbox inbox_a, inbox_b;
  auto a = start(inbox_a, secret_options(kSecret));
  auto b = start(inbox_b, secret_options(kSecret, KvLimits{.max_payload_bytes = 1u << 20, .block_bytes = 65536}));
  ASSERT_TRUE(a && b);
  Status sent = a->send(b->endpoint(), make_message(271, 32, 65536), 8.0);  // 2 MiB of payload
  ASSERT_FALSE(sent.ok());
  EXPECT_TRUE(contains(sent.error().message(), "payload of 2097152 bytes, more than the limit of 1048576"))
      << sent.error().message();
  sent = a->send(b->endpoint(), make_message(272, 4, 8192));  // another layout's chunks
  ASSERT_FALSE(sent.ok());
  EXPECT_TRUE(contains(sent.error().message(), "KV layout has chunks of 65536")) << sent.error().message();
  EXPECT_EQ(b->stats().refused_oversized, 2u);
  EXPECT_EQ(b->stats().receive_buffers, 0u);
  const KvMessage fits = make_message(273, 4, 65536);
  ASSERT_TRUE(a->send(b->endpoint(), fits).ok());
  EXPECT_EQ(b->stats().receive_buffers, 1u);
  EXPECT_EQ(b->stats().receive_buffer_bytes, body_size(fits));
}

TEST_P(KvTransportTest, WithoutASecretOnlyLoopbackMayListen) {
  Inbox inbox;
  auto open = KvTransport::listen("0.0.0.0", 0, inbox.handler());
  ASSERT_FALSE(open.ok());
  EXPECT_TRUE(contains(open.error().message(), "without a cluster secret")) << open.error().message();
  auto secured = KvTransport::listen("0.0.0.0", 0, inbox.handler(), secret_options(kSecret));
  EXPECT_TRUE(secured.ok()) << secured.error().message();
}

// ---- a peer process killed while it holds a message ------------------------------------------

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
}  // namespace mnemo::transfer
