// Stop strings across token boundaries: text that could still turn out to be the start of a
// stop string is held back until the next token decides; text is never emitted past a stop.
#pragma once

#include <string>
#include <vector>

namespace mnemo {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Output {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; `text` ends just before it
  };
  Output push(const std::string& text);
  std::string flush();  // the held-back text, when generation ends for another reason

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace mnemo
