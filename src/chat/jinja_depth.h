// Recursion depth of the parser and the evaluator, bounded so that a hostile template fails
// with an error instead of overflowing the stack.
#pragma once

namespace mnemo::jinja {

// Counts one level of nesting for the duration of one recursive call.
class DepthScope {
 public:
  explicit DepthScope(int* depth) : depth_(depth) { ++*depth_; }
  ~DepthScope() { --*depth_; }
  DepthScope(const DepthScope&) = delete;
  DepthScope& operator=(const DepthScope&) = delete;

 private:
  int* depth_;
};

}  // namespace mnemo::jinja
