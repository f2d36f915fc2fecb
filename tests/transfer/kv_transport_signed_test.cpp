// KvTransport with a cluster secret: signed messages go through; a foreign, unsigned, changed,
// replayed or oversized one is refused before anything is allocated or handed to the handler;
// without a secret only a loopback address may listen. Runs under every UCX transport selection
// of kv_transport_test.cpp (the suite is instantiated there).
#include <gtest/gtest.h>

#include "support/ucx_under_tsan.h"
#include "kv_transport_test_support.h"

namespace mnemo::transfer::testing {
namespace {

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

}  // namespace
}  // namespace mnemo::transfer::testing
