// libFuzzer target for the Responses API request parser (server/responses_request.h), which reads
// what any client sends to POST /v1/responses, and a router's resumed turns: the bytes go through
// the server's bounded JSON gate (parse_request_body: depth 32), then parse_responses_request.
// It must answer a ResponsesRequest or an ApiError; never crash or throw; accept only what it
// promises (a turn with messages of known roles, sampling in range, a resumed response's ids with
// their prefixes).
// Seeds: fuzz/corpus/responses; dictionary: fuzz/openai.dict.
//   build/fuzz/fuzz/responses_request_fuzz NEW_CORPUS fuzz/corpus/responses -dict=fuzz/openai.dict -max_len=4096
// (new inputs go to the first folder: keep the seeds folder second)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "api_error_check.h"

#include "server/responses_request.h"

namespace {

using mnemo::server::ApiError;
using mnemo::server::ResponsesRequest;

constexpr const char* kTarget = "responses_request_fuzz";

[[noreturn]] void fail(const char* what) { mnemo::fuzz::fail(kTarget, what); }

void check(const ResponsesRequest& r) {
  for (const auto& m : r.turn) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") fail("an unknown role was accepted");
    if (m.role == "tool" && m.tool_call_id.empty()) fail("a function_call_output without its call_id was accepted");
    if (!m.tool_calls.empty() && m.role != "assistant") fail("calls outside an assistant turn");
  }
  if (r.request.tool_use.tools.size() > 16) fail("more than 16 tools were accepted");
  const auto& g = r.request.generation;
  if (r.request.max_tokens_given && (g.max_tokens < 1 || g.max_tokens > (1 << 20))) fail("max_output_tokens out of range");
  if (!(g.sampling.temperature >= 0.0f && g.sampling.temperature <= 2.0f)) fail("temperature out of range");
  if (!(g.sampling.top_p >= 0.0f && g.sampling.top_p <= 1.0f)) fail("top_p out of range");
  if (g.stop.size() > 16) fail("more than 16 stop strings");
  if (!r.resumed.id.empty() && r.resumed.id.rfind("resp_", 0) != 0) fail("a resumed id without its prefix");
  if (!r.resumed.message_id.empty() && r.resumed.message_id.rfind("msg_", 0) != 0) fail("a resumed message id without its prefix");
  if (r.resumed.created_at < -1) fail("a negative created_at was accepted");
  for (const auto id : g.resume_tokens) {
    if (id < 0) fail("a negative resume token was accepted");
  }
}

void check(const ApiError& e) { mnemo::fuzz::check_api_error(kTarget, e); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto body = mnemo::server::parse_request_body(text);
  if (const auto* error = std::get_if<ApiError>(&body)) {
    check(*error);
    return 0;
  }
  const auto result = mnemo::server::parse_responses_request(std::get<nlohmann::json>(body), "m");
  if (const auto* error = std::get_if<ApiError>(&result)) {
    check(*error);
  } else {
    check(std::get<ResponsesRequest>(result));
  }
  return 0;
}
