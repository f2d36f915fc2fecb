// Jinja's filters and tests, Python's str and dict methods, and the global functions that chat
// templates call (range, namespace, raise_exception, dict, strftime_now). They work on evaluated values; the
// evaluator resolves the arguments and reports errors at the calling node's position.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"
#include "util/result.h"

namespace mnemo::jinja {

// Bounds the work and memory one render may use. Every evaluated node costs a step; so does
// every 16 bytes of a string a template builds, every item of a list it builds, and every value
// that a comparison, search or lookup walks through (Value::weight). The step limit bounds
// time, and with the value-size limit it bounds memory. The deadline is a backstop.
struct Limits {
  uint64_t max_steps = 10'000'000;  // about a second of the worst kind of work
  size_t max_output_bytes = size_t{32} << 20;
  size_t max_value_bytes = size_t{32} << 20;  // one string, or list items x 16 bytes
  uint32_t max_nesting = 64;                   // lists and dicts inside lists and dicts
  int max_call_depth = 400;                    // nested evaluation, macro recursion included
  std::chrono::milliseconds max_duration{10'000};
};

class Budget {
 public:
  explicit Budget(const Limits& limits)
      : limits_(limits), deadline_(std::chrono::steady_clock::now() + limits.max_duration) {}

  Status step(uint64_t count = 1) {
    steps_ = count > UINT64_MAX - steps_ ? UINT64_MAX : steps_ + count;
    if (steps_ > limits_.max_steps) {
      return make_error("template exceeded its work limit ({} steps): runaway loop?", limits_.max_steps);
    }
    if (steps_ >= next_clock_check_) {
      next_clock_check_ = steps_ + kStepsPerClockCheck;
      if (std::chrono::steady_clock::now() > deadline_) {
        return make_error("template exceeded its time limit ({} ms)", limits_.max_duration.count());
      }
    }
    return ok_status();
  }

  // Before building a string of `bytes`, or a list of bytes/16 items.
  Status allocate(size_t bytes) {
    if (bytes > limits_.max_value_bytes) {
      return make_error("template built a value of {} bytes, over the limit of {}", bytes, limits_.max_value_bytes);
    }
    return step(bytes / 16);
  }
  Status allocate_items(size_t count) {
    if (count > limits_.max_value_bytes / 16) {
      return make_error("template built a list of {} items, over the limit of {}", count, limits_.max_value_bytes / 16);
    }
    return step(count);
  }

  const Limits& limits() const { return limits_; }

 private:
  static constexpr uint64_t kStepsPerClockCheck = 4096;
  const Limits& limits_;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t steps_ = 0;
  uint64_t next_clock_check_ = kStepsPerClockCheck;
};

// Evaluated call arguments: f(1, 2, key=3).
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The parameter at `index` or named `name`, or undefined when absent.
  Value get(size_t index, std::string_view name) const;
  // A keyword-only parameter, or undefined.
  Value named(std::string_view name) const;
  // An Error when more positional arguments than `count`, or keywords not in `names`, were given.
  Status check(size_t count, std::initializer_list<std::string_view> names, std::string_view callee) const;
};

bool is_known_filter(std::string_view name);
// Whether a filter may walk all of its subject (print, compare, search it): the evaluator
// charges such a walk by the subject's weight before calling it.
bool filter_walks_subject(std::string_view name);
bool is_known_test(std::string_view name);

Result<Value> apply_filter(std::string_view name, const Value& subject, const Arguments& args, Budget& budget);
Result<bool> apply_test(std::string_view name, const Value& subject, const Arguments& args, Budget& budget);
// obj.name(args) for str and dict methods (strip, split, startswith, get, items, ...).
Result<Value> call_method(const Value& object, std::string_view name, const Arguments& args, Budget& budget);
// range, namespace, dict, raise_exception, strftime_now (as HF defines it); nullopt when
// `name` is no global function.
std::optional<Result<Value>> call_global(std::string_view name, const Arguments& args, Budget& budget);
bool is_global_function(std::string_view name);

// str(value), refused before it is built when it would be over the value size limit (a list
// that holds one long string many times prints far more than it stores).
Result<std::string> str_within_budget(const Value& value, Budget& budget);

// What iterating a value yields in Python: list items, dict keys, string characters
// (undefined iterates as empty, as Jinja's Undefined does). An Error for other types.
Result<List> iterate(const Value& value, Budget& budget);
// Python's len(): characters of a string, items of a list or dict; an Error for other types.
Result<int64_t> length(const Value& value);

}  // namespace mnemo::jinja
