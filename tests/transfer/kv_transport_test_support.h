// What the KvTransport tests share: messages whose payload is a cheap function of a seed, an
// inbox a receiving transport's handler fills, and the fixture that runs each test once per UCX
// transport selection.
#pragma once

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

#include "transfer/kv_transport.h"


namespace mnemo::transfer::testing {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A message whose payload is a cheap function of (seed, offset), so big ones are quick to make.
inline KvMessage make_message(uint64_t transfer_id, size_t n_chunks, uint32_t block_bytes, uint64_t seed = 7) {
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

inline std::unique_ptr<KvTransport> start(Inbox& inbox, KvTransportOptions options = {}) {
  auto t = KvTransport::listen("127.0.0.1", 0, inbox.handler(), std::move(options));
  EXPECT_TRUE(t.ok()) << t.error().message();
  return t.ok() ? std::move(*t) : nullptr;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A loopback port nothing listens on now (the kernel's pick for port 0, released again).
inline int unused_port() {
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

}  // namespace mnemo::transfer::testing
