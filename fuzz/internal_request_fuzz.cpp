// libFuzzer target for the cluster's internal request bodies (server/internal_requests.h): the
// first byte picks kv_push (even) or responses_import (odd), the rest is the body, read through
// the server's bounded JSON gate (parse_request_body) as the endpoints read it; an import's
// request then goes through parse_responses_request, as the server does. Never a crash or a
// throw; an accepted push names a target and a request, an accepted import an id "resp_..." and
// a request without mnemo_* fields.
// Seeds: fuzz/corpus/internal; dictionary: fuzz/openai.dict.
//   build/fuzz/fuzz/internal_request_fuzz NEW_CORPUS fuzz/corpus/internal -dict=fuzz/openai.dict -max_len=4096
// (new inputs go to the first folder: keep the seeds folder second)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "api_error_check.h"

#include "server/internal_requests.h"
#include "server/responses_request.h"

namespace {

using mnemo::server::ApiError;

constexpr const char* kTarget = "internal_request_fuzz";

[[noreturn]] void fail(const char* what) { mnemo::fuzz::fail(kTarget, what); }

void check(const ApiError& e) { mnemo::fuzz::check_api_error(kTarget, e); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool import = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto body = mnemo::server::parse_request_body(text);
  if (const auto* error = std::get_if<ApiError>(&body)) {
    check(*error);
    return 0;
  }
  const nlohmann::json& json = std::get<nlohmann::json>(body);
  if (!import) {
    const auto push = mnemo::server::parse_kv_push_body(json);
    if (const auto* error = std::get_if<ApiError>(&push)) return check(*error), 0;
    if (std::get<mnemo::server::KvPushBody>(push).request.generation.n < 1) fail("a push with n < 1");
    return 0;
  }
  const auto parsed = mnemo::server::parse_import_body(json);
  if (const auto* error = std::get_if<ApiError>(&parsed)) return check(*error), 0;
  const auto& imported = std::get<mnemo::server::ImportBody>(parsed);
  if (imported.id.rfind("resp_", 0) != 0) fail("an import without a resp_ id");
  if (imported.request.is_object()) {
    for (const auto& [key, value] : imported.request.items()) {
      if (key.rfind("mnemo_", 0) == 0) fail("an imported request kept an internal field");
    }
  }
  const auto turn = mnemo::server::parse_responses_request(imported.request, "m");
  if (const auto* error = std::get_if<ApiError>(&turn)) check(*error);
  return 0;
}
