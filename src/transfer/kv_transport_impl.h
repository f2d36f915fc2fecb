// Internals of KvTransport (UCP active messages), shared by kv_transport.cpp (start, stop and
// send(), on callers' threads) and kv_transport_progress.cpp (the progress thread and the UCX
// callbacks). Not part of the module's interface: see kv_transport.h for the contract.
//
// Threading: the UCP worker is created UCS_THREAD_MODE_SINGLE and only the progress thread
// touches it (and every endpoint, request and the listener). send() runs on callers' threads: it
// encodes, queues a SendOp under `mutex` and wakes the progress thread with ucp_worker_signal (the
// one UCP call documented as callable from any thread), then waits on the op's future. We chose
// this over UCS_THREAD_MODE_MULTI because UCX then takes a lock around every call, and because
// one owner thread makes the endpoint and request bookkeeping plain, lock-free data (STYLE 14).
//
// Ownership: the progress thread owns every SendOp, Peer, Conn, Incoming and AckSend (unique_ptr
// in its containers); UCX callbacks only get raw pointers to them, as user data, and only set
// fields or append to containers that are drained after ucp_worker_progress returns. An object a
// UCX request points to is freed only once that request has completed (or the worker is gone).
//
// Wire protocol (two active message ids):
//   kMessageAm: header {magic, seq, transfer_id, the KvMessage's fixed header (128 bytes)},
//               data = the KvMessage's body (records and payload); sent with
//               UCP_AM_SEND_FLAG_REPLY so the receiver can answer on the same connection.
//   kAckAm:     header {magic, seq, transfer_id, code}, data = reason text (at most 4 KiB).
// `seq` is unique per sending transport and matches the ack to its send (transfer ids are the
// caller's and may repeat); the transfer id is echoed as a cross-check.
//
// Why the KvMessage's header travels in the active message's header: UCX hands it to
// on_message_am before the receiver commits to the body. For a rendezvous (every message from
// kRendezvousFromBytes, and whatever UCX itself sends so) no body byte has moved yet: the header
// is verified (KvGate::admit) before the receiver allocates the body's buffer and asks UCX for
// it, and a refused body is never fetched. An eager body has already arrived in UCX's own
// buffers (UCX sizes those from its fragments, below its rendezvous threshold, outside our
// control); we verify the header before copying it into a buffer of ours.
//
// Signing (KvTransportOptions::cluster_secret): send() encodes and, with a secret, computes the
// body's SHA-256 on the caller's thread; the progress thread seals each message (sender id, the
// next sequence number, MACs: two small HMACs) when it starts the send. So sequence numbers
// follow the order in which messages go out on their connections. UCX does not always deliver
// them in that order (while a connection is wired up, several sends in flight have been seen to
// arrive out of order), so the receiver accepts a late sequence within its replay window, once
// (sender_sequences.h).
#pragma once

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <ucp/api/ucp.h>

#include "auth/crypto.h"
#include "transfer/kv_gate.h"
#include "transfer/kv_transport.h"
#include "transfer/staging_buffers.h"

namespace mnemo::transfer {
namespace kv_ucx {

using Clock = std::chrono::steady_clock;

inline constexpr unsigned kMessageAm = 1;
inline constexpr unsigned kAckAm = 2;
inline constexpr uint32_t kMessageMagic = 0x4d53564bU;  // "KVSM" little-endian
inline constexpr uint32_t kAckMagic = 0x4b41564bU;      // "KVAK" little-endian
inline constexpr size_t kEnvelopeBytes = 4 + 8 + 8;
inline constexpr size_t kMessageHeaderBytes = kEnvelopeBytes + kKvMessageHeaderBytes;
inline constexpr size_t kAckHeaderBytes = 4 + 8 + 8 + 4;
inline constexpr size_t kMaxAckReasonBytes = 4096;
// Messages from this size on are forced onto the rendezvous protocol: the receiver allocates the
// buffer and UCX moves the bytes straight into it (zero-copy where the transport allows), instead
// of UCX reassembling eager fragments in buffers of its own first.
inline constexpr size_t kRendezvousFromBytes = size_t{1} << 20;
// The progress thread wakes at least this often even without UCX events, to expire deadlines.
inline constexpr int kMaxPollMs = 100;
// send() waits this much longer than its timeout for the progress thread's answer: the thread
// expires the op itself, this covers a thread held up by a slow handler.
inline constexpr double kCallerGraceSeconds = 2.0;
// How long shutdown waits for closing endpoints and cancelled requests to complete.
inline constexpr double kShutdownSeconds = 2.0;
// At shutdown the listener stays (refusing connections) at least this long after the endpoints
// start closing, so that connections it had accepted complete while it exists (shutdown()).
inline constexpr double kListenerGraceSeconds = 0.05;

enum AckCode : uint32_t { kAckOk = 0, kAckRejected = 1, kAckRefused = 2 };

inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

inline std::string status_text(ucs_status_t status) { return ucs_status_string(status); }

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

}  // namespace kv_ucx

struct KvTransport::Impl {
  struct Peer;

  // One send() call, from its queueing to its result (and, after that, until UCX is done with
  // its bytes).
  struct SendOp {
    Impl* impl = nullptr;
    uint64_t seq = 0;
    uint64_t transfer_id = 0;
    std::string endpoint;
    kv_ucx::SocketAddress address;
    std::vector<uint8_t> bytes;  // the encoded message (with any injected damage)
    KvBodyDigest digest{};       // SHA-256 of its body (with a secret only)
    std::function<void(std::vector<uint8_t>&)> tamper;  // FaultPlan::tamper
    uint8_t header[kv_ucx::kMessageHeaderBytes] = {};  // envelope + the sealed KV header
    bool drop = false;           // fault injection: never sent
    double timeout_seconds = 0;
    kv_ucx::Clock::time_point deadline;
    std::promise<Status> result;
    // Progress thread only.
    Peer* peer = nullptr;
    void* request = nullptr;     // the pending ucp_am_send_nbx
    ucs_status_t send_status = UCS_INPROGRESS;
    bool resolved = false;       // `result` is set
  };

  // A connection this transport made to a peer's listener; reused by every send to it.
  struct Peer {
    Impl* impl = nullptr;
    std::string endpoint;
    ucp_ep_h ep = nullptr;
    bool failed = false;          // set by the error handler
    bool retired = false;         // closed and off `peers`
    bool answered = false;        // an ack has come back on it
    bool delivered = false;       // a message has been sent completely on it
    ucs_status_t error = UCS_OK;
  };

  // A connection a peer made to our listener; acks go back on it.
  struct Conn {
    Impl* impl = nullptr;
    ucp_ep_h ep = nullptr;
    bool failed = false;
  };

  // A message arriving (or arrived) on a Conn.
  struct Incoming {
    // kRefused: its header did not pass (`refusal` says why), no body buffer was allocated.
    // kHandling: with the handler, whose acknowledgement comes back through `answers`.
    enum class State { kReceiving, kReady, kFailed, kRefused, kTooLarge, kHandling, kDone };
    Impl* impl = nullptr;
    ucp_ep_h reply_ep = nullptr;
    uint64_t seq = 0;
    uint64_t transfer_id = 0;
    std::array<uint8_t, kKvMessageHeaderBytes> header_bytes{};  // as received
    KvHeader header;                                             // as admitted
    std::string refusal;
    std::unique_ptr<uint8_t[]> data;  // the body
    size_t size = 0;
    State state = State::kReceiving;
    ucs_status_t status = UCS_OK;
    void* request = nullptr;  // the pending ucp_am_recv_data_nbx
  };

  struct AckSend {
    uint8_t header[kv_ucx::kAckHeaderBytes] = {};
    std::string reason;
    void* request = nullptr;
  };

  // An endpoint being closed; keeps its Peer/Conn (the error handler's argument) alive until done.
  struct Closing {
    void* request = nullptr;
    std::unique_ptr<Peer> peer;
    std::unique_ptr<Conn> conn;
  };

  // Handlers' acknowledgements, posted from any thread and sent by the progress thread. Shared
  // with the Acknowledge callbacks, which may outlive the transport: once `closed`, posts are
  // dropped (and the worker they would signal may be gone).
  struct Answers {
    std::mutex mutex;
    bool closed = false;                                // guarded by mutex
    ucp_worker_h worker = nullptr;                      // guarded by mutex
    std::vector<std::pair<Incoming*, Status>> posted;   // guarded by mutex
    void post(Incoming* in, Status status);
  };

  Impl(DeferredMessageHandler handler, KvTransportOptions options)
      : on_message(std::move(handler)),
        secret(std::move(options.cluster_secret)),
        gate(secret, options.limits, options.max_senders, options.replay_window) {}

  Status start(const std::string& host, int port);
  // start()'s steps: the UCP context (UCX_* from the environment), the worker and its
  // active-message handlers, the listener.
  Status init_context();
  Status create_worker();
  Status create_listener(const kv_ucx::SocketAddress& address, const std::string& listen_host, int port);
  void stop_and_join();
  void destroy_ucp();
  Status send(const std::string& endpoint, const KvMessage& message, double timeout_seconds);

  // Progress thread.
  void run();
  bool take_submitted();
  void seal(SendOp& op);
  void start_send(SendOp& op);
  Result<Peer*> connect(SendOp& op);
  void retire_peer(Peer& peer);
  void resolve(SendOp& op, Status status);
  void send_finished(SendOp& op, ucs_status_t status);
  Error connection_error(const SendOp& op, ucs_status_t status) const;
  bool handle_failures();
  bool handle_connection_requests();
  bool handle_incoming();
  bool take_answers();  // sends the acknowledgements handlers posted
  void acknowledge(const Incoming& in, kv_ucx::AckCode code, std::string reason);
  void expire(kv_ucx::Clock::time_point now);
  bool reap();
  void close_endpoint(ucp_ep_h ep, std::unique_ptr<Peer> peer, std::unique_ptr<Conn> conn);
  int poll_timeout_ms(kv_ucx::Clock::time_point now) const;
  void shutdown();

  // UCX callbacks (progress context).
  static void on_connection_request(ucp_conn_request_h request, void* arg);
  static void on_peer_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void on_conn_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void on_send_done(void* request, ucs_status_t status, void* user_data);
  static void on_ack_sent(void* request, ucs_status_t status, void* user_data);
  static void on_receive_done(void* request, ucs_status_t status, size_t length, void* user_data);
  static ucs_status_t on_message_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                    const ucp_am_recv_param_t* param);
  static ucs_status_t on_ack_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);

  const DeferredMessageHandler on_message;
  const std::string secret;                       // the cluster secret; empty: unsigned
  const uint64_t sender_id = auth::random_u64();  // this transport's, in every message it sends
  KvGate gate;                                    // progress thread (its counters: any thread)
  const std::shared_ptr<Answers> answers = std::make_shared<Answers>();
  std::string host;
  std::string endpoint_text;

  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_listener_h listener = nullptr;
  int event_fd = -1;
  std::thread thread;

  // Shared with callers.
  std::mutex mutex;
  std::deque<std::unique_ptr<SendOp>> submitted;  // guarded by mutex
  FaultPlan faults;                               // guarded by mutex
  // Set once by the destructor; the progress thread reads it each round (acquire pairs with the
  // release store so everything the destructor did before is visible).
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_seq{1};
  // Encoded messages: taken by send(), given back by the progress thread once the send is over.
  StagingBuffers staging;
  // Counters only: nothing is ordered by them, so relaxed increments suffice.
  std::atomic<uint64_t> messages_sent{0}, messages_received{0}, bytes_sent{0}, bytes_received{0}, rejected{0},
      failed_sends{0}, receive_buffers{0}, receive_buffer_bytes{0};

  // Progress thread only.
  uint64_t next_sequence = 1;  // of the next message sealed (KvSeal::sequence)
  std::map<uint64_t, std::unique_ptr<SendOp>> ops;  // by seq
  std::map<std::string, std::unique_ptr<Peer>> peers;  // by endpoint text
  std::unordered_map<ucp_ep_h, std::unique_ptr<Conn>> conns;
  std::list<std::unique_ptr<Incoming>> incoming;
  std::list<std::unique_ptr<AckSend>> acks;
  std::list<Closing> closing;
  std::vector<Peer*> failed_peers;
  std::vector<Conn*> failed_conns;
  std::vector<ucp_conn_request_h> connection_requests;
};

}  // namespace mnemo::transfer
