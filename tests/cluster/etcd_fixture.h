// A real etcd for a test: /usr/bin/etcd on free loopback ports with its own data directory,
// started in SetUp and killed (SIGKILL) in TearDown. kill() and start() in between simulate an
// etcd crash and restart; start() after wipe_data() an etcd that lost its store.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

namespace mnemo::cluster::testing {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

// A port nothing listens on now: the kernel's pick for port 0. Another process could take it
// before etcd binds it; EtcdProcess::start retries with new ports if etcd does not come up.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

class EtcdProcess {
 public:
  explicit EtcdProcess(std::filesystem::path dir) : dir_(std::move(dir)) {}
  ~EtcdProcess() { kill(); }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  int client_port() const { return client_port_; }
  bool running() const { return pid_ > 0; }

  // Starts etcd and waits until /health answers. The first start picks the ports; later ones
  // reuse the client port, so clients keep their URL across a restart. Returns a message on
  // failure.
  //
  // While etcd is down, any socket on the machine (another test's connection, whose local
  // ephemeral port comes from the same range) may hold one of its ports for a moment: a restart
  // that cannot bind is tried again after a pause, and an etcd whose data was wiped (which
  // records no peer address yet) gets a new peer port.
  std::string start(double timeout_seconds = 8.0) {
    const bool pick_ports = client_port_ == 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (pick_ports) {
        client_port_ = free_loopback_port();
        peer_port_ = free_loopback_port();
      } else if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (fresh_data_) {
          std::filesystem::remove_all(data_dir());  // whatever the failed attempt wrote
          peer_port_ = free_loopback_port();
        }
      }
      spawn();
      if (wait_healthy(timeout_seconds)) {
        fresh_data_ = false;
        return "";
      }
      kill();
    }
    return "etcd did not become healthy on " + url() + "; its log:\n" + log_tail();
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }

  // Removes the data directory: the next start() is an etcd with an empty store (no leases).
  void wipe_data() {
    std::filesystem::remove_all(data_dir());
    fresh_data_ = true;
  }

 private:
  std::filesystem::path data_dir() const { return dir_ / "data"; }
  std::filesystem::path log_path() const { return dir_ / "etcd.log"; }

  void spawn() {
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    const std::vector<std::string> args = {
        kEtcdBinary,
        "--name", "default",
        "--data-dir", data_dir().string(),
        "--listen-client-urls", url(),
        "--advertise-client-urls", url(),
        "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer,
        "--initial-cluster", "default=" + peer,
    };
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    const std::string log = log_path().string();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec. etcd dies with the test process
      // (PDEATHSIG), so a crashed test leaves no etcd behind.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }

  bool wait_healthy(double timeout_seconds) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return false;  // etcd exited (port taken?)
      httplib::Client client("127.0.0.1", client_port_);
      client.set_connection_timeout(std::chrono::milliseconds(200));
      client.set_read_timeout(std::chrono::milliseconds(500));
      auto reply = client.Get("/health");
      if (reply && reply->status == 200 && reply->body.find("\"true\"") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string log_tail() const {
    std::ifstream in(log_path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    return all.size() > 3000 ? all.substr(all.size() - 3000) : all;
  }

  std::filesystem::path dir_;
  pid_t pid_ = 0;
  int client_port_ = 0;
  int peer_port_ = 0;
  bool fresh_data_ = true;  // no etcd has run on the data directory yet
};

// Gives each test its own etcd. Fails (does not skip) when etcd is not installed.
class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kEtcdBinary))
        << kEtcdBinary << " is missing: run scripts/setup.sh (it installs etcd-server)";
    std::string dir_template = (std::filesystem::temp_directory_path() / "mnemo-etcd-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir_template.data()), nullptr) << "cannot make a temporary directory";
    dir_ = dir_template;
    etcd_ = std::make_unique<EtcdProcess>(dir_);
    const std::string failure = etcd_->start();
    ASSERT_TRUE(failure.empty()) << failure;
  }

  void TearDown() override {
    etcd_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  EtcdProcess& etcd() { return *etcd_; }
  std::string url() const { return etcd_->url(); }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<EtcdProcess> etcd_;
};

}  // namespace mnemo::cluster::testing
