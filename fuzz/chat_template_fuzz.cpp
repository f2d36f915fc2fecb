// libFuzzer target for chat templates: any bytes, taken as a Jinja template, must parse and
// render a short conversation or fail with an Error; never crash, hang or read out of bounds
// (the limits in parse_and_render_for_fuzzing keep each input fast).
// Seeds: tests/chat/templates (real templates); dictionary: fuzz/chat_template.dict.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "chat/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto rendered = mnemo::parse_and_render_for_fuzzing(source);
  if (!rendered.ok() && rendered.error().message().rfind("chat template: ", 0) != 0) {
    std::fprintf(stderr, "chat_template_fuzz: error without context: %s\n", rendered.error().message().c_str());
    std::abort();
  }
  return 0;
}
