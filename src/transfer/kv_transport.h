// KV transfer between instances (SPEC M2, M5, D2) over UCX (UCP active messages). One transport
// per instance both listens and sends: a prefill instance send()s a request's chunks, as one
// KvMessage, to the decode instance's endpoint() (published as InstanceInfo.transfer_endpoint)
// and waits for its acknowledgement.
//
//   sender                                         receiver
//   send() ─encode─▶ progress thread ──AM "message" (rendezvous when large)──▶ progress thread
//            seal: sequence, MACs                  verify the header, then receive the body
//                                                  into its own buffer, verify + decode,
//   send() returns ◀── progress thread ◀──AM "ack" (status, reason)── on_message(...)
//
// UCX picks the data path (shared memory or TCP on one host, RDMA where there is some); the
// connection itself is made over a socket address (UCX's TCP connection manager), so UCX_TLS
// must keep "tcp" (shared memory alone fails with "Destination is unreachable"). UCX_TLS and the
// other UCX_* environment variables apply, read when a transport is created. Connections detect
// a lost peer (UCP_ERR_HANDLING_MODE_PEER); with UCX 1.13 on one host that means small messages
// go over posix/sysv shared memory and rendezvous data over TCP (cma lacks the memory
// invalidation UCX requires for it then).
//
// Failure behaviour (the whole contract the caller gets):
//  - send() returns OK only after the peer decoded and verified the message and its handler
//    returned OK. Every error names the transfer id and the endpoint and says which of these it
//    is: the message is invalid here ("invalid message"), the connection failed or the peer went
//    away ("connection to ... failed" / "peer ... gone"), no acknowledgement within the timeout
//    ("timed out"), the peer could not verify the bytes ("rejected: <decode reason>"), or its
//    handler said no ("refused: <the handler's error>"). After any error the peer may or may not
//    hold the chunks; the sender falls back to recomputing them.
//  - A failed connection is dropped; the next send() to that endpoint connects again.
//  - Bad input from the network never crashes the receiver: it is counted in stats().rejected,
//    acknowledged as rejected when the sender can be named, and the handler never sees it.
//
// Authentication (KvTransportOptions::cluster_secret): with a secret, every message a transport
// sends carries its sender id (random per transport), a sequence number (1, 2, ... in send
// order) and two MACs under the secret (kv_message.h); a receiver with a secret refuses, before
// allocating anything the header sizes, a header that is not signed under its secret, declares
// sizes beyond its KvLimits or repeats a sequence (or one older than its replay window), and
// refuses a body whose MAC does not match before its handler sees it (kv_gate.h has the order of
// the checks). Without a secret, messages go unsigned and only unsigned ones are accepted: the
// insecure mode, which listen() allows on a loopback address only.
//  - Destroying a transport fails its senders' waits and closes its connections; messages it has
//    received but not acknowledged are not acknowledged (their senders get an error).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transfer/kv_message.h"
#include "transfer/sender_sequences.h"
#include "util/result.h"

namespace mnemo::transfer {

// What the receiver does with a verified message; its Status is the acknowledgement the sender
// waits for (e.g. "no room": the sender falls back to recompute). It runs on the transport's
// progress thread, so every other transfer of this transport waits while it runs: keep it short
// (copy the payload into the KV pool or queue it, then return).
using MessageHandler = std::function<Status(KvMessage&& message)>;
// Sends a received message's acknowledgement: OK, or the error the sender gets as "refused".
// Call it once, from any thread; calls after the transport is gone do nothing.
using Acknowledge = std::function<void(Status)>;
// A handler that answers later: it takes the message on the progress thread and returns at once,
// and the work (an insert waiting for the engine) acknowledges when done, so the progress thread
// goes on moving other transfers meanwhile. A handler that throws before acknowledging refuses.
using DeferredMessageHandler = std::function<void(KvMessage&& message, Acknowledge acknowledge)>;

// For tests: applied by the SENDER to its next sends (tests of "the receiver rejects partial
// transfers"). Counters count down once per send(); delay_ms and tamper apply to every send until
// another plan replaces it.
struct FaultPlan {
  int drop_next = 0;      // send nothing for the next N messages (the send times out)
  int delay_ms = 0;       // wait before sending (in the calling thread)
  int truncate_next = 0;  // send the next N messages with their body cut to half its bytes
  int corrupt_next = 0;   // flip one payload byte in the next N messages
  // Called with each message's bytes (header and body) once sealed, just before they go out, on
  // the progress thread: it may change or replace them (a forged or replayed message).
  std::function<void(std::vector<uint8_t>& message)> tamper = nullptr;
};

struct KvTransportOptions {
  // The cluster secret (auth/cluster_secret.h), the key of the messages' MACs. Empty: unsigned
  // messages only, and only on a loopback address (see the authentication notes above).
  std::string cluster_secret{};
  // What this transport accepts as a receiver; set limits.block_bytes to the local KV layout's
  // chunk bytes so that other chunk sizes are refused from the header alone.
  KvLimits limits{};
  // Senders whose sequence numbers are remembered (the least recent forgotten beyond), and how
  // far below a sender's highest sequence a late message is still accepted once (UCX may deliver
  // a connection's messages out of order; sender_sequences.h). 0: strictly increasing.
  size_t max_senders = 4096;
  uint32_t replay_window = kMaxReplayWindow;
};

class KvTransport {
 public:
  // Starts a UCP context + worker + listener on host:port (port 0: any free port) and one
  // progress thread. `host` must be an IPv4 address or name peers can reach (it is what
  // endpoint() returns). Defaults it sets unless the environment does: UCX_CM_REUSEADDR=y (a
  // restarted instance can listen on its port again at once) and UCX_MM_ERROR_HANDLING=y (shared
  // memory usable with peer-failure detection).
  // Without options.cluster_secret, `host` must be a loopback address (auth::is_loopback_host).
  static Result<std::unique_ptr<KvTransport>> listen(const std::string& host, int port, MessageHandler on_message,
                                                     KvTransportOptions options = {});
  static Result<std::unique_ptr<KvTransport>> listen(const std::string& host, int port,
                                                     DeferredMessageHandler on_message,
                                                     KvTransportOptions options = {});
  ~KvTransport();  // stops the thread, closes endpoints, destroys the listener/worker/context
  KvTransport(const KvTransport&) = delete;
  KvTransport& operator=(const KvTransport&) = delete;

  // "host:port" to publish (InstanceInfo.transfer_endpoint). IPv4 only (see kv_transport.cpp).
  std::string endpoint() const;

  // Encodes, sends to the peer's endpoint (connecting once per peer and reusing the endpoint),
  // and waits for the peer's ack; see the failure behaviour above. Thread-safe: concurrent sends
  // (to one peer or many) proceed together. Blocks the calling thread for at most about
  // timeout_seconds (plus delay_ms of an injected fault).
  Status send(const std::string& endpoint, const KvMessage& message, double timeout_seconds = 10);

  void inject_faults(const FaultPlan& plan);  // thread-safe; replaces the previous plan

  struct Stats {
    uint64_t messages_sent = 0;      // messages put on the wire completely (acknowledged or not)
    uint64_t messages_received = 0;  // messages that decoded and were given to the handler
    uint64_t bytes_sent = 0;         // their encoded bytes
    uint64_t bytes_received = 0;
    uint64_t rejected = 0;           // received messages that failed verification, for any reason
    // Of them: not signed under this transport's secret (or signed when it has none), or a MAC
    // that does not match their bytes.
    uint64_t refused_unauthenticated = 0;
    uint64_t refused_replayed = 0;   // a sequence its sender used before, or older than the window
    uint64_t refused_oversized = 0;  // declared sizes beyond this receiver's limits or KV layout
    uint64_t receive_buffers = 0;    // bodies of incoming messages allocated (after their header passed)
    uint64_t receive_buffer_bytes = 0;
    uint64_t failed_sends = 0;       // send() calls that returned an error
    uint64_t staged_sends = 0;       // messages encoded into a staging buffer
    uint64_t staging_reuses = 0;     // of them, into a reused buffer (no allocation)
    size_t staging_buffers_idle = 0; // buffers back in the pool, waiting for the next send
  };
  Stats stats() const;  // thread-safe

 private:
  struct Impl;  // all UCX state; keeps <ucp/api/ucp.h> out of this header
  explicit KvTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo::transfer
