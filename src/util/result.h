// The one error idiom of the project: functions that can fail return Result<T> (Status for
// void). An Error carries a code (what kind of failure: callers decide on it, never on the
// text) and a human-readable message that names what failed and why; callers add context as the
// error travels up ("model.gguf: tensor 'blk.0.attn_q.weight': offset out of range"). Cheap when
// OK: no allocation unless there is an error. The HTTP status of each code is decided in one
// place (server/api_error.h).
#pragma once

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace mnemo {

// What kind of failure an Error is (LevelDB's Status codes, with the kinds a server needs).
enum class ErrorCode : uint8_t {
  kInvalidArgument,    // what was given (a request, a file, a flag) is not acceptable: the default
  kNotFound,           // what was asked for does not exist (or is not the caller's to see)
  kUnavailable,        // not now: shutting down, not ready, a peer unreachable or late; retry later
  kResourceExhausted,  // no room: a pool, a disk, a queue is full
  kCorruption,         // stored or received data failed its checks
  kIoError,            // the system refused a read, a write or a call
  kPermissionDenied,   // not authenticated, or not allowed
  kInternal,           // a broken invariant: a bug
};

// The code's name ("not_found"), for logs and error bodies.
constexpr std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kCorruption: return "corruption";
    case ErrorCode::kIoError: return "io_error";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

class Error {
 public:
  explicit Error(std::string message, ErrorCode code = ErrorCode::kInvalidArgument)
      : message_(std::move(message)), code_(code) {}

  const std::string& message() const { return message_; }
  ErrorCode code() const { return code_; }

  // Prefixes the message with where it happened: "ctx: message". The code stays.
  [[nodiscard]] Error with_context(std::string_view context) const {
    return Error(fmt::format("{}: {}", context, message_), code_);
  }

 private:
  std::string message_;
  ErrorCode code_;
};

// An Error of the default code (kInvalidArgument).
template <class... Args>
[[nodiscard]] Error make_error(fmt::format_string<Args...> format, Args&&... args) {
  return Error(fmt::format(format, std::forward<Args>(args)...));
}

// An Error of `code`.
template <class... Args>
[[nodiscard]] Error make_error(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Error(fmt::format(format, std::forward<Args>(args)...), code);
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(state_); }
  const T& value() const& { assert(ok()); return std::get<0>(state_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_{std::string()};
  bool ok_ = true;
};

using Status = Result<void>;

inline Status ok_status() { return {}; }

}  // namespace mnemo

// Returns the error of a failing Result/Status from the enclosing function.
#define MNEMO_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    auto&& mnemo_status_ = (expr);                  \
    if (!mnemo_status_.ok()) return mnemo_status_.error(); \
  } while (0)

#define MNEMO_CONCAT_INNER_(a, b) a##b
#define MNEMO_CONCAT_(a, b) MNEMO_CONCAT_INNER_(a, b)

// MNEMO_ASSIGN_OR_RETURN(auto x, f()); declares x from f()'s value or returns f()'s error.
#define MNEMO_ASSIGN_OR_RETURN(lhs, expr) \
  MNEMO_ASSIGN_OR_RETURN_IMPL_(MNEMO_CONCAT_(mnemo_result_, __LINE__), lhs, expr)
#define MNEMO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.error();                 \
  lhs = std::move(tmp).value()
