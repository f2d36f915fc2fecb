// KvTransport: start, stop and send() (callers' threads). The progress thread is in
// kv_transport_progress.cpp; the design notes are in kv_transport_impl.h.
#include "transfer/kv_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "auth/cluster_secret.h"
#include "transfer/kv_transport_impl.h"
#include "util/net_address.h"

namespace mnemo::transfer {
using namespace kv_ucx;  // NOLINT: this module's own internals
namespace {

// Resolves a numeric or named host to an IPv4 address; `passive` for the listener. IPv4 only:
// UCX 1.13's TCP connection manager mishandles IPv6 peers (the server side reads past an address
// buffer while accepting, then the connection fails), so we refuse IPv6 with a clear error.
Result<SocketAddress> resolve_address(const std::string& host, int port, bool passive) {
  if (port < 0 || port > 65535) return make_error("port {} out of range", port);
  if (host.find(':') != std::string::npos) {
    return make_error("'{}': IPv6 addresses are not supported (UCX 1.13 mishandles them), use IPv4", host);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) return make_error("cannot resolve '{}': {}", host, ::gai_strerror(rc));
  SocketAddress address;
  std::memcpy(&address.storage, found->ai_addr, found->ai_addrlen);
  address.length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return address;
}

// Whether a UCX_TLS value (nullptr: unset, i.e. "all") lets UCX use the posix/sysv transports.
bool may_use_shared_memory(const char* tls) {
  if (tls == nullptr || tls[0] == '\0' || tls[0] == '^') return true;  // "^x,y": all but x and y
  std::string list = tls;
  for (size_t begin = 0; begin <= list.size();) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(begin, end - begin);
    for (const char* shm : {"all", "sm", "shm", "mm", "posix", "sysv"}) {
      if (name == shm) return true;
    }
    begin = end + 1;
  }
  return false;
}

int port_of(const sockaddr_storage& storage) {
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

}  // namespace

// ---- start and stop --------------------------------------------------------------------------

Status KvTransport::Impl::start(const std::string& listen_host, int port) {
  host = listen_host;
  MNEMO_ASSIGN_OR_RETURN(SocketAddress address, resolve_address(listen_host, port, true));
  MNEMO_RETURN_IF_ERROR(init_context());
  MNEMO_RETURN_IF_ERROR(create_worker());
  MNEMO_RETURN_IF_ERROR(create_listener(address, listen_host, port));
  {
    std::lock_guard lock(answers->mutex);
    answers->worker = worker;
  }
  thread = std::thread([this] { run(); });
  return ok_status();
}

Status KvTransport::Impl::init_context() {
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "mnemo-kv";
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);  // UCX_* from the environment
  if (status != UCS_OK) return make_error("ucp_config_read: {}", status_text(status));
  // A restarted instance must be able to listen on its port again while connections of its
  // previous life linger in TIME_WAIT (SO_REUSEADDR), unless the environment says otherwise.
  // (UCX_CM_REUSEADDR / UCX_TCP_CM_REUSEADDR; "CM_REUSEADDR" is its name inside the CM's table.)
  if (std::getenv("UCX_CM_REUSEADDR") == nullptr && std::getenv("UCX_TCP_CM_REUSEADDR") == nullptr) {
    status = ucp_config_modify(config, "CM_REUSEADDR", "y");
    if (status != UCS_OK) std::fprintf(stderr, "kv transport: cannot set CM_REUSEADDR: %s\n", ucs_status_string(status));
  }
  // Shared-memory transports (posix, sysv) only offer the peer-failure handling we ask for
  // (UCP_ERR_HANDLING_MODE_PEER) when told to; without it UCX leaves them out and goes over TCP
  // even on one host. Set only where they may be in use: UCX warns about settings nothing uses.
  if (std::getenv("UCX_MM_ERROR_HANDLING") == nullptr && may_use_shared_memory(std::getenv("UCX_TLS"))) {
    status = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
    if (status != UCS_OK) std::fprintf(stderr, "kv transport: cannot set MM_ERROR_HANDLING: %s\n", ucs_status_string(status));
  }
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    context = nullptr;
    return make_error("ucp_init: {}", status_text(status));
  }
  return ok_status();
}

Status KvTransport::Impl::create_worker() {
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread uses it
  ucs_status_t status = ucp_worker_create(context, &worker_params, &worker);
  if (status != UCS_OK) {
    worker = nullptr;
    return make_error("ucp_worker_create: {}", status_text(status));
  }
  // The KvMessage's header rides in the active message's header (kv_transport_impl.h).
  ucp_worker_attr_t worker_attr{};
  worker_attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  status = ucp_worker_query(worker, &worker_attr);
  if (status != UCS_OK) return make_error("ucp_worker_query: {}", status_text(status));
  if (worker_attr.max_am_header < kMessageHeaderBytes) {
    return make_error("UCX carries active-message headers of up to {} bytes; a KV transfer's takes {}",
                      worker_attr.max_am_header, kMessageHeaderBytes);
  }
  status = ucp_worker_get_efd(worker, &event_fd);
  if (status != UCS_OK) return make_error("ucp_worker_get_efd: {}", status_text(status));
  for (const auto& [id, callback] : {std::pair{kMessageAm, &Impl::on_message_am}, std::pair{kAckAm, &Impl::on_ack_am}}) {
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = id;
    handler.cb = callback;
    handler.arg = this;
    status = ucp_worker_set_am_recv_handler(worker, &handler);
    if (status != UCS_OK) return make_error("ucp_worker_set_am_recv_handler: {}", status_text(status));
  }
  return ok_status();
}

Status KvTransport::Impl::create_listener(const SocketAddress& address, const std::string& listen_host, int port) {
  ucp_listener_params_t listener_params{};
  listener_params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  listener_params.sockaddr.addr = address.get();
  listener_params.sockaddr.addrlen = address.length;
  listener_params.conn_handler.cb = &Impl::on_connection_request;
  listener_params.conn_handler.arg = this;
  ucs_status_t status = ucp_listener_create(worker, &listener_params, &listener);
  if (status != UCS_OK) {
    listener = nullptr;
    return make_error("cannot listen on {}:{}: {}", listen_host, port, status_text(status));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  status = ucp_listener_query(listener, &attr);
  if (status != UCS_OK) return make_error("ucp_listener_query: {}", status_text(status));
  endpoint_text = fmt::format("{}:{}", listen_host, port_of(attr.sockaddr));
  gate.set_name(endpoint_text);
  return ok_status();
}

void KvTransport::Impl::stop_and_join() {
  if (!thread.joinable()) return;
  stopping.store(true, std::memory_order_release);
  ucp_worker_signal(worker);
  thread.join();
}

void KvTransport::Impl::Answers::post(Incoming* in, Status status) {
  std::lock_guard lock(mutex);
  if (closed) return;
  posted.emplace_back(in, std::move(status));
  ucp_worker_signal(worker);
}

void KvTransport::Impl::destroy_ucp() {
  {
    std::lock_guard lock(answers->mutex);
    answers->closed = true;
    answers->worker = nullptr;
  }
  if (listener != nullptr) ucp_listener_destroy(listener);  // only when start() failed half-way
  listener = nullptr;
  if (worker != nullptr) ucp_worker_destroy(worker);
  worker = nullptr;
  if (context != nullptr) ucp_cleanup(context);
  context = nullptr;
}

// ---- send (callers' threads) -----------------------------------------------------------------

Status KvTransport::Impl::send(const std::string& endpoint, const KvMessage& message, double timeout_seconds) {
  const auto where = [&] { return fmt::format("kv transfer {} to {}", message.transfer_id, endpoint); };
  if (!(timeout_seconds > 0 && timeout_seconds < 1e6)) {
    return make_error("timeout of {} s out of range", timeout_seconds).with_context(where());
  }
  if (Status valid = check_encodable(message); !valid.ok()) {
    return valid.error().with_context("invalid message").with_context(where());
  }
  auto parts = parse_authority(endpoint);
  if (!parts.ok()) return parts.error().with_context(where());
  auto address = resolve_address(parts->host, parts->port, false);
  if (!address.ok()) return address.error().with_context(where());

  auto op = std::make_unique<SendOp>();
  op->impl = this;
  op->seq = next_seq.fetch_add(1, std::memory_order_relaxed);
  op->transfer_id = message.transfer_id;
  op->endpoint = endpoint;
  op->address = *address;
  op->timeout_seconds = timeout_seconds;
  std::function<void(std::vector<uint8_t>&)> tamper;
  bool truncate = false;
  bool corrupt = false;
  int delay_ms = 0;
  {
    std::lock_guard lock(mutex);
    op->drop = faults.drop_next > 0;
    truncate = faults.truncate_next > 0;
    corrupt = faults.corrupt_next > 0;
    faults.drop_next -= op->drop ? 1 : 0;
    faults.truncate_next -= truncate ? 1 : 0;
    faults.corrupt_next -= corrupt ? 1 : 0;
    delay_ms = faults.delay_ms;
    tamper = faults.tamper;
  }
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));

  op->bytes = staging.acquire(encoded_size(message));
  encode_into(message, op->bytes);
  // The expensive part of signing, here on the caller's thread; the progress thread seals.
  if (!secret.empty()) op->digest = body_digest(op->bytes);
  op->tamper = std::move(tamper);
  // Damage in transit: after signing, and to the body only (the header travels apart from it).
  const size_t body_bytes = op->bytes.size() - kKvMessageHeaderBytes;
  if (corrupt && body_bytes > 0) {
    // The middle payload byte; the middle byte of the body when there is no payload.
    const size_t payload_at = op->bytes.size() - message.payload.size();
    const size_t at = message.payload.empty() ? kKvMessageHeaderBytes + body_bytes / 2
                                              : payload_at + message.payload.size() / 2;
    op->bytes[at] ^= 0x5a;
  }
  if (truncate) op->bytes.resize(kKvMessageHeaderBytes + body_bytes / 2);
  op->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));

  std::future<Status> result = op->result.get_future();
  {
    std::lock_guard lock(mutex);
    submitted.push_back(std::move(op));
  }
  ucp_worker_signal(worker);
  Status status = result.wait_for(std::chrono::duration<double>(timeout_seconds + kCallerGraceSeconds)) ==
                          std::future_status::ready
                      ? result.get()
                      : Status(make_error(ErrorCode::kUnavailable, "timed out after {} s waiting for the acknowledgement", timeout_seconds));
  if (!status.ok()) {
    failed_sends.fetch_add(1, std::memory_order_relaxed);
    return status.error().with_context(where());
  }
  return status;
}

// ---- KvTransport -----------------------------------------------------------------------------

KvTransport::KvTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<KvTransport>> KvTransport::listen(const std::string& host, int port,
                                                         MessageHandler on_message, KvTransportOptions options) {
  return listen(
      host, port,
      [handler = std::move(on_message)](KvMessage&& message, Acknowledge acknowledge) {
        acknowledge(handler(std::move(message)));
      },
      std::move(options));
}

Result<std::unique_ptr<KvTransport>> KvTransport::listen(const std::string& host, int port,
                                                         DeferredMessageHandler on_message,
                                                         KvTransportOptions options) {
  // Unsigned messages are accepted from anyone who reaches the port: only the host itself may.
  if (options.cluster_secret.empty() && !auth::is_loopback_host(host)) {
    return make_error("listening on {} without a cluster secret: only a loopback address may go unauthenticated",
                      host)
        .with_context("kv transport");
  }
  auto impl = std::make_unique<Impl>(std::move(on_message), std::move(options));
  if (Status started = impl->start(host, port); !started.ok()) {
    impl->destroy_ucp();
    return started.error().with_context("kv transport");
  }
  return std::unique_ptr<KvTransport>(new KvTransport(std::move(impl)));
}

KvTransport::~KvTransport() {
  impl_->stop_and_join();
  impl_->destroy_ucp();
}

std::string KvTransport::endpoint() const { return impl_->endpoint_text; }

Status KvTransport::send(const std::string& endpoint, const KvMessage& message, double timeout_seconds) {
  return impl_->send(endpoint, message, timeout_seconds);
}

void KvTransport::inject_faults(const FaultPlan& plan) {
  std::lock_guard lock(impl_->mutex);
  impl_->faults = plan;
}

KvTransport::Stats KvTransport::stats() const {
  Stats s;
  s.messages_sent = impl_->messages_sent.load(std::memory_order_relaxed);
  s.messages_received = impl_->messages_received.load(std::memory_order_relaxed);
  s.bytes_sent = impl_->bytes_sent.load(std::memory_order_relaxed);
  s.bytes_received = impl_->bytes_received.load(std::memory_order_relaxed);
  s.rejected = impl_->rejected.load(std::memory_order_relaxed);
  s.refused_unauthenticated = impl_->gate.refused(KvGate::Refusal::kUnauthenticated);
  s.refused_replayed = impl_->gate.refused(KvGate::Refusal::kReplayed);
  s.refused_oversized = impl_->gate.refused(KvGate::Refusal::kOversized);
  s.receive_buffers = impl_->receive_buffers.load(std::memory_order_relaxed);
  s.receive_buffer_bytes = impl_->receive_buffer_bytes.load(std::memory_order_relaxed);
  s.failed_sends = impl_->failed_sends.load(std::memory_order_relaxed);
  const StagingBuffers::Stats staging = impl_->staging.stats();
  s.staged_sends = staging.acquired;
  s.staging_reuses = staging.reused;
  s.staging_buffers_idle = staging.kept_buffers;
  return s;
}

}  // namespace mnemo::transfer
