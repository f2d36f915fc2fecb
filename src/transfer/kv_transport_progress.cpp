// KvTransport's progress thread: the only thread that touches the UCP worker, its endpoints and
// requests (see kv_transport_impl.h), and the UCX callbacks it runs.
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "transfer/kv_transport_impl.h"
#include "util/thread_name.h"

namespace mnemo::transfer {
using namespace kv_ucx;  // NOLINT: this module's own internals

// ---- progress thread -------------------------------------------------------------------------

void KvTransport::Impl::run() {
  name_this_thread("mnemo-transfer");
  while (!stopping.load(std::memory_order_acquire)) {
    bool busy = false;
    while (ucp_worker_progress(worker) != 0) busy = true;
    busy |= handle_connection_requests();
    busy |= handle_failures();
    busy |= take_submitted();
    busy |= handle_incoming();
    busy |= take_answers();
    busy |= reap();
    const Clock::time_point now = Clock::now();
    expire(now);
    if (busy) continue;
    // Arm the worker, then sleep until a UCX event, a ucp_worker_signal from send() or the
    // destructor, or the next deadline. UCS_ERR_BUSY: events arrived meanwhile, go round again.
    const ucs_status_t armed = ucp_worker_arm(worker);
    if (armed == UCS_ERR_BUSY) continue;
    pollfd fd{event_fd, POLLIN, 0};
    ::poll(&fd, 1, armed == UCS_OK ? poll_timeout_ms(now) : 1);
  }
  shutdown();
}

int KvTransport::Impl::poll_timeout_ms(Clock::time_point now) const {
  auto wait = std::chrono::milliseconds(kMaxPollMs);
  for (const auto& [seq, op] : ops) {
    if (op->resolved) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(op->deadline - now) +
                      std::chrono::milliseconds(1);
    wait = std::clamp(left, std::chrono::milliseconds(0), wait);
  }
  return static_cast<int>(wait.count());
}

bool KvTransport::Impl::take_submitted() {
  std::deque<std::unique_ptr<SendOp>> batch;
  {
    std::lock_guard lock(mutex);
    batch.swap(submitted);
  }
  for (auto& owned : batch) {
    SendOp& op = *owned;
    ops.emplace(op.seq, std::move(owned));
    if (op.drop) continue;  // a dropped op just waits for its deadline (and takes no sequence)
    seal(op);
    if (!op.resolved) start_send(op);
  }
  return !batch.empty();
}

void KvTransport::Impl::seal(SendOp& op) {
  // Here, in the order the sends start, so that each connection carries increasing sequences.
  transfer::seal(op.bytes, KvSeal{sender_id, next_sequence++}, secret, op.digest);
  if (op.tamper) op.tamper(op.bytes);
  if (op.bytes.size() < kKvMessageHeaderBytes) {
    resolve(op, make_error("invalid message: {} bytes, less than a header", op.bytes.size()));
    return;
  }
  put_u32(op.header, kMessageMagic);
  put_u64(op.header + 4, op.seq);
  put_u64(op.header + 12, op.transfer_id);
  std::memcpy(op.header + kEnvelopeBytes, op.bytes.data(), kKvMessageHeaderBytes);
}

Result<KvTransport::Impl::Peer*> KvTransport::Impl::connect(SendOp& op) {
  if (auto it = peers.find(op.endpoint); it != peers.end()) {
    if (!it->second->failed) return it->second.get();
    retire_peer(*it->second);
  }
  auto peer = std::make_unique<Peer>();
  peer->impl = this;
  peer->endpoint = op.endpoint;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = op.address.get();
  params.sockaddr.addrlen = op.address.length;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // report a lost peer instead of hanging
  params.err_handler.cb = &Impl::on_peer_error;
  params.err_handler.arg = peer.get();
  const ucs_status_t status = ucp_ep_create(worker, &params, &peer->ep);
  if (status != UCS_OK) return make_error(ErrorCode::kUnavailable, "connection to {} failed: {}", op.endpoint, status_text(status));
  Peer* raw = peer.get();
  peers.emplace(op.endpoint, std::move(peer));
  return raw;
}

void KvTransport::Impl::start_send(SendOp& op) {
  auto peer = connect(op);
  if (!peer.ok()) {
    resolve(op, peer.error());
    return;
  }
  op.peer = *peer;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  const size_t body_bytes = op.bytes.size() - kKvMessageHeaderBytes;  // the header went into op.header
  param.flags = UCP_AM_SEND_FLAG_REPLY | (body_bytes >= kRendezvousFromBytes ? UCP_AM_SEND_FLAG_RNDV : 0);
  param.cb.send = &Impl::on_send_done;
  param.user_data = &op;
  const ucs_status_ptr_t request = ucp_am_send_nbx(op.peer->ep, kMessageAm, op.header, sizeof(op.header),
                                                   op.bytes.data() + kKvMessageHeaderBytes, body_bytes, &param);
  if (request == nullptr) {
    send_finished(op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    send_finished(op, UCS_PTR_STATUS(request));
  } else {
    op.request = request;
  }
}

void KvTransport::Impl::send_finished(SendOp& op, ucs_status_t status) {
  op.send_status = status;
  if (status == UCS_OK) {
    if (op.peer != nullptr) op.peer->delivered = true;
    messages_sent.fetch_add(1, std::memory_order_relaxed);
    bytes_sent.fetch_add(op.bytes.size(), std::memory_order_relaxed);
  } else if (!op.resolved) {
    resolve(op, connection_error(op, status));
  }
}

Error KvTransport::Impl::connection_error(const SendOp& op, ucs_status_t status) const {
  // Whether this connection ever worked tells "nobody there" from "went away".
  const bool worked = op.send_status == UCS_OK || (op.peer != nullptr && (op.peer->answered || op.peer->delivered));
  if (worked) return make_error(ErrorCode::kUnavailable, "peer {} gone mid-transfer: {}", op.endpoint, status_text(status));
  if (status == UCS_ERR_NOT_CONNECTED || status == UCS_ERR_UNREACHABLE) {
    return make_error(ErrorCode::kUnavailable, "connection to {} failed (is a transport listening there?): {}", op.endpoint,
                      status_text(status));
  }
  return make_error(ErrorCode::kUnavailable, "connection to {} failed: {}", op.endpoint, status_text(status));
}

void KvTransport::Impl::resolve(SendOp& op, Status status) {
  if (op.resolved) return;
  op.resolved = true;
  op.result.set_value(std::move(status));
}

void KvTransport::Impl::retire_peer(Peer& peer) {
  if (peer.retired) return;
  peer.retired = true;
  std::erase(failed_peers, &peer);
  for (auto& [seq, op] : ops) {
    if (op->peer != &peer) continue;
    if (!op->resolved) resolve(*op, connection_error(*op, peer.error));
    op->peer = nullptr;  // the Peer goes away once its endpoint is closed
  }
  auto it = peers.find(peer.endpoint);
  if (it == peers.end() || it->second.get() != &peer) return;  // not ours to close (cannot happen)
  std::unique_ptr<Peer> owned = std::move(it->second);
  peers.erase(it);
  const ucp_ep_h ep = owned->ep;
  close_endpoint(ep, std::move(owned), nullptr);
}

void KvTransport::Impl::close_endpoint(ucp_ep_h ep, std::unique_ptr<Peer> peer, std::unique_ptr<Conn> conn) {
  // Forced: a failed endpoint can only be closed so, and a graceful close could wait on a peer
  // that no longer answers. The peer sees the connection reset and drops its side.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;  // closed (or nothing more to wait for)
  closing.push_back(Closing{request, std::move(peer), std::move(conn)});
}

bool KvTransport::Impl::handle_failures() {
  if (failed_peers.empty() && failed_conns.empty()) return false;
  // Closing an endpoint can run callbacks that append to these lists: work on a copy.
  std::vector<Peer*> peer_batch;
  peer_batch.swap(failed_peers);
  for (Peer* peer : peer_batch) retire_peer(*peer);
  std::vector<Conn*> conn_batch;
  conn_batch.swap(failed_conns);
  for (Conn* conn : conn_batch) {
    auto it = conns.find(conn->ep);
    if (it == conns.end() || it->second.get() != conn) continue;
    std::unique_ptr<Conn> owned = std::move(it->second);
    conns.erase(it);
    const ucp_ep_h ep = owned->ep;
    close_endpoint(ep, nullptr, std::move(owned));
  }
  return true;
}

bool KvTransport::Impl::handle_connection_requests() {
  if (connection_requests.empty()) return false;
  std::vector<ucp_conn_request_h> batch;
  batch.swap(connection_requests);
  for (const ucp_conn_request_h request : batch) {
    auto conn = std::make_unique<Conn>();
    conn->impl = this;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request = request;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &Impl::on_conn_error;
    params.err_handler.arg = conn.get();
    const ucs_status_t status = ucp_ep_create(worker, &params, &conn->ep);
    if (status != UCS_OK) {
      std::fprintf(stderr, "kv transport %s: cannot accept a connection: %s\n", endpoint_text.c_str(),
                   ucs_status_string(status));
      continue;
    }
    conns.emplace(conn->ep, std::move(conn));
  }
  return true;
}

bool KvTransport::Impl::handle_incoming() {
  bool any = false;
  for (auto& owned : incoming) {
    Incoming& in = *owned;
    using State = Incoming::State;
    if (in.state == State::kReceiving || in.state == State::kHandling || in.state == State::kDone) continue;
    any = true;
    const State state = in.state;
    in.state = State::kDone;
    if (state == State::kFailed) {
      rejected.fetch_add(1, std::memory_order_relaxed);
      acknowledge(in, kAckRejected, fmt::format("receive failed: {}", status_text(in.status)));
      continue;
    }
    if (state == State::kRefused) {
      rejected.fetch_add(1, std::memory_order_relaxed);
      acknowledge(in, kAckRejected, std::move(in.refusal));
      continue;
    }
    if (state == State::kTooLarge) {
      rejected.fetch_add(1, std::memory_order_relaxed);
      acknowledge(in, kAckRejected, fmt::format("a message body of {} bytes cannot be received here", in.size));
      continue;
    }
    // Its length, checksum and message MAC, then its records: only then does the handler see it.
    auto decoded = gate.open(in.header, in.header_bytes, std::span<const uint8_t>(in.data.get(), in.size));
    in.data.reset();  // a decoded message holds its own copy of the payload
    if (!decoded.ok()) {
      rejected.fetch_add(1, std::memory_order_relaxed);
      acknowledge(in, kAckRejected, decoded.error().message());
      continue;
    }
    messages_received.fetch_add(1, std::memory_order_relaxed);
    bytes_received.fetch_add(kKvMessageHeaderBytes + in.size, std::memory_order_relaxed);
    // The handler answers through `answers` (take_answers sends it), now or later, from any
    // thread; the Incoming stays (kHandling is never reaped) until then.
    in.state = State::kHandling;
    auto answered = std::make_shared<std::atomic<bool>>(false);
    Acknowledge acknowledge = [box = answers, at = &in, answered](Status status) {
      if (!answered->exchange(true)) box->post(at, std::move(status));
    };
    try {
      if (!on_message) throw std::runtime_error("no handler");
      on_message(std::move(*decoded), acknowledge);
    } catch (const std::exception& e) {
      acknowledge(make_error(ErrorCode::kInternal, "handler threw: {}", e.what()));
    } catch (...) {
      acknowledge(make_error(ErrorCode::kInternal, "handler threw"));
    }
  }
  return any;
}

bool KvTransport::Impl::take_answers() {
  std::vector<std::pair<Incoming*, Status>> posted;
  {
    std::lock_guard lock(answers->mutex);
    posted.swap(answers->posted);
  }
  for (auto& [in, status] : posted) {
    in->state = Incoming::State::kDone;
    // A transport being destroyed does not acknowledge: its senders get "peer gone".
    if (stopping.load(std::memory_order_acquire)) continue;
    if (status.ok()) {
      acknowledge(*in, kAckOk, "");
    } else {
      acknowledge(*in, kAckRefused, status.error().message());
    }
  }
  return !posted.empty();
}

void KvTransport::Impl::acknowledge(const Incoming& in, AckCode code, std::string reason) {
  auto it = conns.find(in.reply_ep);
  if (it == conns.end() || it->second->failed) return;  // the sender is gone: nobody to tell
  auto ack = std::make_unique<AckSend>();
  put_u32(ack->header, kAckMagic);
  put_u64(ack->header + 4, in.seq);
  put_u64(ack->header + 12, in.transfer_id);
  put_u32(ack->header + 20, code);
  ack->reason = std::move(reason);
  if (ack->reason.size() > kMaxAckReasonBytes) ack->reason.resize(kMaxAckReasonBytes);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = &Impl::on_ack_sent;
  param.user_data = ack.get();
  const ucs_status_ptr_t request = ucp_am_send_nbx(in.reply_ep, kAckAm, ack->header, sizeof(ack->header),
                                                   ack->reason.data(), ack->reason.size(), &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;  // sent, or the connection is failing
  ack->request = request;
  acks.push_back(std::move(ack));
}

void KvTransport::Impl::expire(Clock::time_point now) {
  for (auto& [seq, op] : ops) {
    if (op->resolved || now < op->deadline) continue;
    resolve(*op, make_error(ErrorCode::kUnavailable, "timed out after {} s waiting for the acknowledgement", op->timeout_seconds));
  }
}

bool KvTransport::Impl::reap() {
  bool any = false;
  std::erase_if(ops, [&](const auto& entry) {
    if (!entry.second->resolved || entry.second->request != nullptr) return false;
    staging.release(std::move(entry.second->bytes));
    return true;
  });
  incoming.remove_if([&](const std::unique_ptr<Incoming>& in) {
    return in->state == Incoming::State::kDone && in->request == nullptr;
  });
  acks.remove_if([](const std::unique_ptr<AckSend>& ack) { return ack->request == nullptr; });
  for (auto it = closing.begin(); it != closing.end();) {
    if (ucp_request_check_status(it->request) == UCS_INPROGRESS) {
      ++it;
      continue;
    }
    ucp_request_free(it->request);
    it = closing.erase(it);
    any = true;
  }
  return any;
}

void KvTransport::Impl::shutdown() {
  for (auto& [seq, op] : ops) resolve(*op, make_error(ErrorCode::kUnavailable, "the transport is shutting down"));
  {
    std::lock_guard lock(mutex);
    for (auto& op : submitted) op->result.set_value(make_error(ErrorCode::kUnavailable, "the transport is shutting down"));
    submitted.clear();
  }
  // The listener goes last: UCX 1.13 crashes when a connection its listener had accepted, whose
  // request was not yet delivered, completes after the listener is destroyed (its async thread
  // then rejects it through the freed listener). So connection requests are rejected while the
  // rest closes, for at least kListenerGraceSeconds, and only then is the listener destroyed.
  const auto reject_requests = [&] {
    for (const ucp_conn_request_h request : connection_requests) ucp_listener_reject(listener, request);
    connection_requests.clear();
  };
  reject_requests();
  for (auto& [endpoint, peer] : peers) {
    peer->retired = true;
    const ucp_ep_h ep = peer->ep;
    close_endpoint(ep, std::move(peer), nullptr);
  }
  peers.clear();
  for (auto& [ep, conn] : conns) close_endpoint(ep, nullptr, std::move(conn));
  conns.clear();
  // Let the closes and the requests they cancel complete, so no callback is left pointing at
  // our objects; bounded, in case UCX holds on to something.
  const Clock::time_point give_up =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kShutdownSeconds));
  const auto pending = [&] {
    if (!closing.empty() || !acks.empty()) return true;
    for (const auto& [seq, op] : ops) {
      if (op->request != nullptr) return true;
    }
    for (const auto& in : incoming) {
      if (in->request != nullptr) return true;
    }
    return false;
  };
  const Clock::time_point grace_until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kListenerGraceSeconds));
  while ((pending() || Clock::now() < grace_until) && Clock::now() < give_up) {
    ucp_worker_progress(worker);
    reap();
    reject_requests();
  }
  ucp_listener_destroy(listener);
  listener = nullptr;
}

// ---- UCX callbacks ---------------------------------------------------------------------------

void KvTransport::Impl::on_connection_request(ucp_conn_request_h request, void* arg) {
  auto* self = static_cast<Impl*>(arg);
  self->connection_requests.push_back(request);  // accepted after progress returns
}

void KvTransport::Impl::on_peer_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  if (peer->failed || peer->retired) return;
  peer->failed = true;
  peer->error = status;
  peer->impl->failed_peers.push_back(peer);
}

void KvTransport::Impl::on_conn_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t /*status*/) {
  auto* conn = static_cast<Conn*>(arg);
  if (conn->failed) return;
  conn->failed = true;
  conn->impl->failed_conns.push_back(conn);
}

void KvTransport::Impl::on_send_done(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  ucp_request_free(request);
  op->request = nullptr;
  op->impl->send_finished(*op, status);
}

void KvTransport::Impl::on_ack_sent(void* request, ucs_status_t /*status*/, void* user_data) {
  ucp_request_free(request);
  static_cast<AckSend*>(user_data)->request = nullptr;
}

void KvTransport::Impl::on_receive_done(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* in = static_cast<Incoming*>(user_data);
  ucp_request_free(request);
  in->request = nullptr;
  if (status == UCS_OK && length != in->size) status = UCS_ERR_MESSAGE_TRUNCATED;
  in->status = status;
  in->state = status == UCS_OK ? Incoming::State::kReady : Incoming::State::kFailed;
}

ucs_status_t KvTransport::Impl::on_message_am(void* arg, const void* header, size_t header_length, void* data,
                                              size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  const auto* h = static_cast<const uint8_t*>(header);
  const bool has_reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 && param->reply_ep != nullptr;
  // While shutting down, drop whatever still arrives (a rendezvous is then completed towards
  // its sender without its data).
  if (self->stopping.load(std::memory_order_acquire)) return UCS_OK;
  if (header_length != kMessageHeaderBytes || get_u32(h) != kMessageMagic || !has_reply) {
    // Not our protocol, or nobody to answer: count it and drop it.
    self->rejected.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;
  }
  auto in = std::make_unique<Incoming>();
  in->impl = self;
  in->reply_ep = param->reply_ep;
  in->seq = get_u64(h + 4);
  in->transfer_id = get_u64(h + 12);
  in->size = length;
  std::memcpy(in->header_bytes.data(), h + kEnvelopeBytes, kKvMessageHeaderBytes);
  // Everything the header declares is checked before anything it sizes is allocated (KvGate):
  // a refused rendezvous's body is never fetched, a refused eager one never copied.
  auto admitted = self->gate.admit(in->header_bytes, length, in->transfer_id);
  if (!admitted.ok()) {
    in->refusal = admitted.error().message();
    in->state = Incoming::State::kRefused;
    self->incoming.push_back(std::move(in));
    return UCS_OK;  // a rendezvous's data is dropped
  }
  in->header = *admitted;
  // Bounded now: length == the declared body, within KvLimits.
  in->data.reset(new (std::nothrow) uint8_t[std::max<size_t>(length, 1)]);
  if (!in->data) {
    in->state = Incoming::State::kTooLarge;
    self->incoming.push_back(std::move(in));
    return UCS_OK;
  }
  self->receive_buffers.fetch_add(1, std::memory_order_relaxed);
  self->receive_buffer_bytes.fetch_add(length, std::memory_order_relaxed);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    if (length > 0) std::memcpy(in->data.get(), data, length);  // eager: valid during this call only
    in->state = Incoming::State::kReady;
    self->incoming.push_back(std::move(in));
    return UCS_OK;
  }
  ucp_request_param_t recv_param{};
  recv_param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  recv_param.cb.recv_am = &Impl::on_receive_done;
  recv_param.user_data = in.get();
  const ucs_status_ptr_t request = ucp_am_recv_data_nbx(self->worker, data, in->data.get(), length, &recv_param);
  if (request == nullptr) {
    in->state = Incoming::State::kReady;
  } else if (UCS_PTR_IS_ERR(request)) {
    in->status = UCS_PTR_STATUS(request);
    in->state = Incoming::State::kFailed;
  } else {
    in->request = request;
  }
  self->incoming.push_back(std::move(in));
  return UCS_INPROGRESS;  // the receive has been started on the descriptor
}

ucs_status_t KvTransport::Impl::on_ack_am(void* arg, const void* header, size_t header_length, void* data,
                                          size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  const auto* h = static_cast<const uint8_t*>(header);
  if (header_length != kAckHeaderBytes || get_u32(h) != kAckMagic) return UCS_OK;
  const uint64_t seq = get_u64(h + 4);
  const uint64_t transfer_id = get_u64(h + 12);
  const uint32_t code = get_u32(h + 20);
  auto it = self->ops.find(seq);
  if (it == self->ops.end() || it->second->resolved || it->second->transfer_id != transfer_id) return UCS_OK;
  SendOp& op = *it->second;
  if (op.peer != nullptr) op.peer->answered = true;
  std::string reason;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    reason.assign(static_cast<const char*>(data), std::min(length, kMaxAckReasonBytes));
  }
  switch (code) {
    case kAckOk:
      self->resolve(op, ok_status());
      break;
    case kAckRejected:
      self->resolve(op, make_error("rejected: {}", reason));
      break;
    case kAckRefused:
      self->resolve(op, make_error("refused: {}", reason));
      break;
    default:
      self->resolve(op, make_error("unknown acknowledgement code {}: {}", code, reason));
      break;
  }
  return UCS_OK;
}

}  // namespace mnemo::transfer
