#include "server/openai_request.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "grammar/compile_cache.h"
#include "grammar/json_schema.h"
#include "server/cache_control.h"
#include "server/supported_fields.h"
#include "server/tool_request.h"
#include "util/bounded_json.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

// Reads optional fields with type and range checks; the first problem wins.
class FieldReader {
 public:
  explicit FieldReader(const json& body) : body_(body) {}

  bool failed() const { return error_.has_value(); }
  ApiError error() const { return *error_; }

  const json* find(const char* name) const {
    const auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }

  bool number(const char* name, float& out, double lo, double hi) {
    const json* v = find(name);
    if (v == nullptr || failed()) return false;
    if (!v->is_number()) {
      fail(fmt::format("'{}' must be a number", name), name);
      return false;
    }
    const double d = v->get<double>();
    if (d < lo || d > hi) {
      fail(fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
      return false;
    }
    out = static_cast<float>(d);
    return true;
  }

  bool integer(const char* name, int32_t& out, int64_t lo, int64_t hi) {
    const json* v = find(name);
    if (v == nullptr || failed()) return false;
    if (!v->is_number_integer()) {
      fail(fmt::format("'{}' must be an integer", name), name);
      return false;
    }
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) {
      fail(fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
      return false;
    }
    out = static_cast<int32_t>(i);
    return true;
  }

  void boolean(const char* name, bool& out) {
    const json* v = find(name);
    if (v == nullptr || failed()) return;
    if (!v->is_boolean()) return fail(fmt::format("'{}' must be a boolean", name), name);
    out = v->get<bool>();
  }

  void fail(std::string message, std::string param) {
    if (!error_) error_ = bad_request(std::move(message), std::move(param));
  }

 private:
  const json& body_;
  std::optional<ApiError> error_;
};

void read_stop(FieldReader& r, std::vector<std::string>& out) {
  const json* v = r.find("stop");
  if (v == nullptr) return;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings) return r.fail(fmt::format("'stop' may hold at most {} strings", kMaxStopStrings), "stop");
    for (const json& s : *v) {
      if (!s.is_string()) return r.fail("'stop' must be a string or an array of strings", "stop");
      out.push_back(s.get<std::string>());
    }
  } else {
    r.fail("'stop' must be a string or an array of strings", "stop");
  }
  for (const std::string& s : out) {
    if (s.size() > kMaxStopBytes) return r.fail(fmt::format("a stop string may hold at most {} bytes", kMaxStopBytes), "stop");
  }
}

// The text of a {"type": "text", "text": "..."} content part, or null when the part is anything else.
const json* text_of_part(const json& part) {
  if (!part.is_object()) return nullptr;
  const auto type = part.find("type");
  if (type == part.end() || !type->is_string() || type->get_ref<const std::string&>() != "text") return nullptr;
  const auto text = part.find("text");
  if (text == part.end() || !text->is_string()) return nullptr;
  return &*text;
}

// An assistant's tool_calls, a tool result's tool_call_id and name: false when one is malformed.
bool read_tool_fields(FieldReader& r, const json& m, const std::string& where, ChatMessage& message) {
  const auto calls = m.find("tool_calls");
  if (calls != m.end() && !calls->is_null()) {
    if (message.role != "assistant") {
      r.fail(where + ".tool_calls is only allowed on assistant messages", where + ".tool_calls");
      return false;
    }
    auto read = read_tool_calls(*calls, where);
    if (auto* error = std::get_if<ApiError>(&read)) {
      r.fail(error->message, error->param);
      return false;
    }
    message.tool_calls = std::move(std::get<std::vector<ToolCall>>(read));
  }
  for (const auto& [key, target] : {std::pair{"tool_call_id", &message.tool_call_id}, std::pair{"name", &message.name}}) {
    const auto v = m.find(key);
    if (v == m.end() || v->is_null()) continue;
    if (!v->is_string()) {
      r.fail(fmt::format("{}.{} must be a string", where, key), where + "." + key);
      return false;
    }
    *target = v->get<std::string>();
  }
  if (message.role == "tool" && message.tool_call_id.empty()) {
    r.fail(where + ".tool_call_id is required on tool messages", where + ".tool_call_id");
    return false;
  }
  // An earlier reply's reasoning, as vLLM and llama-server return it: templates that show past
  // reasoning (or drop it) read it from here.
  const auto reasoning = m.find("reasoning_content");
  if (reasoning != m.end() && !reasoning->is_null()) {
    if (!reasoning->is_string() || message.role != "assistant") {
      r.fail(where + ".reasoning_content must be a string, on an assistant message", where + ".reasoning_content");
      return false;
    }
    message.reasoning_content = reasoning->get<std::string>();
  }
  return true;
}

// chat_template_kwargs (vLLM's and llama-server's): more variables for the chat template, such as
// Qwen 3's enable_thinking. Bounded like the rest of the body; the renderer's own variables
// cannot be replaced.
void read_template_variables(FieldReader& r, nlohmann::ordered_json& out) {
  constexpr size_t kMaxVariables = 32;
  const json* v = r.find("chat_template_kwargs");
  if (v == nullptr) return;
  if (!v->is_object()) return r.fail("'chat_template_kwargs' must be an object", "chat_template_kwargs");
  if (v->size() > kMaxVariables) {
    return r.fail(fmt::format("'chat_template_kwargs' may hold at most {} variables", kMaxVariables), "chat_template_kwargs");
  }
  out = nlohmann::ordered_json::object();
  for (const auto& [name, value] : v->items()) {
    if (chat_template_reserved_variable(name)) {
      return r.fail(fmt::format("'chat_template_kwargs' cannot set '{}': the server sets it", name), "chat_template_kwargs");
    }
    out[name] = value;
  }
}

void read_messages(FieldReader& r, std::vector<ChatMessage>& out) {
  const json* v = r.find("messages");
  if (v == nullptr) return r.fail("'messages' is required", "messages");
  if (!v->is_array() || v->empty()) return r.fail("'messages' must be a non-empty array", "messages");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return r.fail(where + " must be an object", where);
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return r.fail(where + ".role must be a string", where + ".role");
    ChatMessage message{role->get<std::string>(), ""};
    if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
        message.role != "developer" && message.role != "tool") {
      return r.fail(fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool", where, message.role),
                    where + ".role");
    }
    if (message.role == "developer") message.role = "system";
    if (!read_tool_fields(r, m, where, message)) return;
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // An assistant message of tool calls (or a refusal) may carry no content.
      message.content_null = !message.tool_calls.empty();
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        const json* text = text_of_part(part);
        if (text == nullptr) {
          return r.fail(where + ".content parts must be {\"type\": \"text\", \"text\": ...}", where + ".content");
        }
        message.content += text->get_ref<const std::string&>();
      }
    } else {
      return r.fail(where + ".content must be a string or an array of text parts", where + ".content");
    }
    out.push_back(std::move(message));
  }
}

void read_prompt(FieldReader& r, ParsedRequest& out) {
  const json* v = r.find("prompt");
  if (v == nullptr) return r.fail("'prompt' is required", "prompt");
  if (v->is_string()) {
    out.prompt_text = v->get<std::string>();
  } else if (v->is_array() && v->size() == 1 && (*v)[0].is_string()) {
    out.prompt_text = (*v)[0].get<std::string>();
  } else if (v->is_array() && !v->empty() && std::all_of(v->begin(), v->end(), [](const json& t) { return t.is_number_integer(); })) {
    for (const json& t : *v) {
      // Checked as 64-bit first: a larger id must not wrap into a valid one.
      const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > uint64_t{INT64_MAX} ? -1 : t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<TokenId>::max()) return r.fail("'prompt' holds a token id out of range", "prompt");
      out.prompt_tokens.push_back(static_cast<TokenId>(id));
    }
  } else {
    r.fail("'prompt' must be a string, a one-element array of strings, or an array of token ids", "prompt");
  }
}

}  // namespace

std::variant<json, ApiError> parse_request_body(std::string_view body) {
  auto parsed = parse_bounded_json(body, JsonLimits{.max_bytes = size_t{64} << 20, .max_depth = 32});
  if (!parsed.ok()) return bad_request("the request body is not acceptable JSON: " + parsed.error().message());
  if (!parsed->is_object()) return bad_request("the request body must be a JSON object");
  return std::move(*parsed);
}

std::variant<ParsedRequest, ApiError> parse_request(std::string_view body, bool chat) {
  auto parsed = parse_request_body(body);
  if (auto* error = std::get_if<ApiError>(&parsed)) return *error;
  return parse_request(std::get<json>(parsed), chat);
}

namespace {

// {"token id": bias in -100..100, ...}, as OpenAI takes it; sorted by token for the sampler.
// Whether each id is in the vocabulary is the server's check (it knows the model).
void read_logit_bias(FieldReader& r, std::vector<std::pair<int32_t, float>>& out) {
  constexpr size_t kMaxEntries = 1024;
  const json* v = r.find("logit_bias");
  if (v == nullptr) return;
  if (!v->is_object()) return r.fail("'logit_bias' must be an object of token ids to numbers", "logit_bias");
  if (v->size() > kMaxEntries) return r.fail(fmt::format("'logit_bias' may hold at most {} tokens", kMaxEntries), "logit_bias");
  for (const auto& [key, bias] : v->items()) {
    int64_t token = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size() || token < 0 || token > (1 << 30)) {
      return r.fail(fmt::format("'logit_bias' key '{}' is not a token id", key), "logit_bias");
    }
    if (!bias.is_number() || !(bias.get<double>() >= -100.0 && bias.get<double>() <= 100.0)) {
      return r.fail(fmt::format("'logit_bias' of token {} must be a number between -100 and 100", key), "logit_bias");
    }
    out.emplace_back(static_cast<int32_t>(token), static_cast<float>(bias.get<double>()));
  }
  std::sort(out.begin(), out.end());
  // "01" and "1" are two keys naming one token.
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i - 1].first == out[i].first) return r.fail(fmt::format("'logit_bias' names token {} twice", out[i].first), "logit_bias");
  }
}

// response_format json_schema's {"name", "schema", "strict", "description"}: the schema compiled
// (an object at its root, as OpenAI requires).
void read_json_schema(FieldReader& r, const json& format, GenerationRequest& g) {
  const auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object() || !spec->contains("schema")) {
    return r.fail("'response_format' json_schema needs {\"json_schema\": {\"name\", \"schema\"}}", "response_format");
  }
  for (const auto& [key, value] : spec->items()) {
    if (key != "name" && key != "schema" && key != "strict" && key != "description") {
      return r.fail(fmt::format("'response_format.json_schema.{}' is not recognized", key), "response_format");
    }
  }
  const json& schema = (*spec)["schema"];
  if (!schema.is_object() || schema.value("type", json()) != "object") {
    return r.fail("'response_format' json_schema: the schema's root must be of type object", "response_format");
  }
  auto compiled = grammar::schema_cache().get(schema.dump(), [&schema] { return grammar::compile_schema(schema); });
  if (!compiled.ok()) return r.fail("'response_format' json_schema: " + compiled.error().message(), "response_format");
  g.format = OutputFormat::kJsonSchema;
  g.schema = std::move(*compiled);
}

// response_format: text (the default), json_object or json_schema (constrained decoding).
void read_response_format(FieldReader& r, GenerationRequest& g) {
  OutputFormat& out = g.format;
  const json* v = r.find("response_format");
  if (v == nullptr) return;
  const auto type = v->is_object() ? v->find("type") : v->end();
  if (!v->is_object() || type == v->end() || !type->is_string()) {
    return r.fail("'response_format' must be an object with a 'type'", "response_format");
  }
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text") return;
  if (name == "json_object") {
    out = OutputFormat::kJsonObject;
    return;
  }
  if (name == "json_schema") return read_json_schema(r, *v, g);
  r.fail(fmt::format("'response_format' type '{}' is not one of text, json_object, json_schema", name), "response_format");
}

// The grammar extension: a GBNF string as llama-server takes it (or {"type": "gbnf", "gbnf":
// "..."}), or {"type": "regex", "regex": "..."}; the whole output is what the grammar derives
// or the regex matches.
void read_grammar(FieldReader& r, GenerationRequest& g) {
  const json* v = r.find("grammar");
  if (v == nullptr || r.failed()) return;
  const bool gbnf_object = v->is_object() && v->value("type", json()) == "gbnf";
  if (v->is_string() || gbnf_object) {
    if (gbnf_object && (!v->contains("gbnf") || !(*v)["gbnf"].is_string() || v->size() != 2)) {
      return r.fail("'grammar' must be {\"type\": \"gbnf\", \"gbnf\": \"<grammar>\"}", "grammar");
    }
    if (g.format != OutputFormat::kText) return r.fail("'grammar' cannot be combined with 'response_format'", "grammar");
    const std::string& text = gbnf_object ? (*v)["gbnf"].get_ref<const std::string&>() : v->get_ref<const std::string&>();
    auto gbnf = grammar::gbnf_cache().get(text, [&text] { return grammar::Gbnf::compile(text); });
    if (!gbnf.ok()) return r.fail("'grammar': " + gbnf.error().message(), "grammar");
    g.format = OutputFormat::kGbnf;
    g.gbnf = std::move(*gbnf);
    return;
  }
  if (!v->is_object() || v->value("type", json()) != "regex" || !v->contains("regex") || !(*v)["regex"].is_string() ||
      v->size() != 2) {
    return r.fail("'grammar' must be a GBNF string, {\"type\": \"gbnf\", \"gbnf\": \"<grammar>\"} or {\"type\": \"regex\", "
                  "\"regex\": \"<pattern>\"}",
                  "grammar");
  }
  if (g.format != OutputFormat::kText) return r.fail("'grammar' cannot be combined with 'response_format'", "grammar");
  const std::string& pattern = (*v)["regex"].get_ref<const std::string&>();
  auto regex = grammar::regex_cache().get(pattern, [&pattern] { return grammar::Regex::compile(pattern, /*anchored=*/true); });
  if (!regex.ok()) return r.fail("'grammar': " + regex.error().message(), "grammar");
  g.format = OutputFormat::kRegex;
  g.regex = std::move(*regex);
}

void read_sampling(FieldReader& r, ParsedRequest& out) {
  GenerationRequest& g = out.generation;
  constexpr int32_t kMaxTokens = 1 << 20;
  out.max_tokens_given = r.integer("max_tokens", g.max_tokens, 1, kMaxTokens);
  out.max_tokens_given = r.integer("max_completion_tokens", g.max_tokens, 1, kMaxTokens) || out.max_tokens_given;
  out.temperature_given = r.number("temperature", g.sampling.temperature, 0.0, 2.0);
  out.top_p_given = r.number("top_p", g.sampling.top_p, 0.0, 1.0);
  out.top_k_given = r.integer("top_k", g.sampling.top_k, 0, 1 << 20);
  out.min_p_given = r.number("min_p", g.sampling.min_p, 0.0, 1.0);
  r.number("presence_penalty", g.sampling.presence_penalty, -2.0, 2.0);
  r.number("frequency_penalty", g.sampling.frequency_penalty, -2.0, 2.0);
  r.number("repetition_penalty", g.sampling.repetition_penalty, 0.0, 10.0);
  r.integer("n", g.n, 1, 128);
  r.boolean("ignore_eos", g.ignore_eos);
  r.boolean("speculation", g.speculation);
  if (const json* seed = r.find("seed")) {
    if (!seed->is_number_integer()) return r.fail("'seed' must be an integer", "seed");
    g.sampling.seed = static_cast<uint64_t>(seed->get<int64_t>());
    out.seed_given = true;
  }
  read_stop(r, g.stop);
  read_logit_bias(r, g.sampling.logit_bias);
}

// A router's fields (see ParsedRequest); who may send them is the caller's check (caller.h).
void read_replica_fields(FieldReader& r, ParsedRequest& out) {
  constexpr size_t kMaxReplicas = 8;
  if (const json* known = r.find("mnemo_replica_known_tokens")) {
    const auto is_count = [](const json& n) { return n.is_number_integer() && n.get<int64_t>() >= 0 && n.get<int64_t>() < (1 << 30); };
    if (!known->is_array() || known->size() > kMaxReplicas || !std::all_of(known->begin(), known->end(), is_count)) {
      return r.fail("'mnemo_replica_known_tokens' must be an array of token counts", "mnemo_replica_known_tokens");
    }
    for (const json& n : *known) out.replica_known_tokens.push_back(static_cast<int32_t>(n.get<int64_t>()));
  }
  if (const json* at_end = r.find("mnemo_replica_at_end")) {
    if (!at_end->is_array() || at_end->size() > kMaxReplicas ||
        !std::all_of(at_end->begin(), at_end->end(), [](const json& b) { return b.is_boolean(); })) {
      return r.fail("'mnemo_replica_at_end' must be an array of booleans, one per replica", "mnemo_replica_at_end");
    }
    for (const json& b : *at_end) out.replica_at_end.push_back(b.get<bool>());
  }
  if (const json* replica = r.find("mnemo_replica")) {
    const auto is_endpoint = [](const json& e) { return e.is_string() && !e.get<std::string>().empty(); };
    if (is_endpoint(*replica)) {
      out.replica_endpoints.push_back(replica->get<std::string>());
    } else if (replica->is_array() && replica->size() <= kMaxReplicas && std::all_of(replica->begin(), replica->end(), is_endpoint)) {
      for (const json& e : *replica) out.replica_endpoints.push_back(e.get<std::string>());
    } else {
      return r.fail("'mnemo_replica' must be a KV transport endpoint or an array of at most 8", "mnemo_replica");
    }
  }
}

void read_internal_fields(FieldReader& r, ParsedRequest& out) {
  r.boolean("mnemo_report_tokens", out.report_tokens);
  r.boolean("mnemo_persist_running", out.generation.persist_running);
  r.boolean("mnemo_replica_wait", out.replica_wait);
  read_replica_fields(r, out);
  if (const json* resume = r.find("mnemo_resume_tokens")) {
    if (!resume->is_array() || !std::all_of(resume->begin(), resume->end(), [](const json& t) { return t.is_number_integer(); })) {
      return r.fail("'mnemo_resume_tokens' must be an array of token ids", "mnemo_resume_tokens");
    }
    for (const json& t : *resume) {
      const auto id = t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<TokenId>::max()) {
        return r.fail("'mnemo_resume_tokens' holds a token id out of range", "mnemo_resume_tokens");
      }
      out.generation.resume_tokens.push_back(static_cast<TokenId>(id));
    }
  }
}

// Chat: logprobs (boolean) and top_logprobs; completions: logprobs (how many alternatives).
void read_logprobs(FieldReader& r, ParsedRequest& out, bool chat) {
  int32_t top = 0;
  if (chat) {
    r.boolean("logprobs", out.logprobs);
    const bool has_top = r.integer("top_logprobs", top, 0, 20);
    if (has_top && !out.logprobs) r.fail("'top_logprobs' requires 'logprobs': true", "top_logprobs");
  } else if (const json* lp = r.find("logprobs")) {
    if (lp->is_boolean()) {
      out.logprobs = lp->get<bool>();
    } else if (r.integer("logprobs", top, 0, 5)) {
      out.logprobs = true;
    }
  }
  if (out.logprobs) out.generation.top_logprobs = top;
}

}  // namespace

std::variant<ParsedRequest, ApiError> parse_request(const json& parsed, bool chat) {
  if (!parsed.is_object()) return bad_request("the request body must be a JSON object");
  if (auto refused = refuse_unsupported_fields(parsed, chat ? ApiEndpoint::kChat : ApiEndpoint::kCompletions)) return *refused;
  FieldReader r(parsed);
  ParsedRequest out;
  if (const json* model = r.find("model")) {
    if (!model->is_string()) return bad_request("'model' must be a string", "model");
    out.model = model->get<std::string>();
  }
  if (chat) {
    read_messages(r, out.messages);
    read_template_variables(r, out.template_variables);
  } else {
    read_prompt(r, out);
  }
  r.boolean("stream", out.stream);
  if (const json* options = r.find("stream_options")) {
    if (!options->is_object()) return bad_request("'stream_options' must be an object", "stream_options");
    FieldReader o(*options);
    o.boolean("include_usage", out.include_usage);
    if (o.failed()) return o.error();
  }
  read_sampling(r, out);
  if (const json* salt = r.find("cache_salt")) {
    if (!salt->is_string()) return bad_request("'cache_salt' must be a string", "cache_salt");
    out.cache_salt = salt->get<std::string>();
  }
  if (const json* control = r.find("cache_control")) {
    if (auto error = read_cache_control(*control, out.generation)) return *error;
  }
  read_internal_fields(r, out);
  read_logprobs(r, out, chat);
  if (!chat) r.boolean("echo", out.echo);
  if (chat) read_response_format(r, out.generation);
  read_grammar(r, out.generation);
  if (chat && !r.failed()) {
    auto tools = read_tool_use(parsed, ToolApi::kChat);
    if (auto* error = std::get_if<ApiError>(&tools)) return *error;
    out.tool_use = std::move(std::get<ToolUse>(tools));
  }
  if (out.echo && out.logprobs) {
    return bad_request("'echo' with 'logprobs' would need the prompt's logprobs, which this server does not compute", "echo");
  }
  if (r.failed()) return r.error();
  return out;
}

}  // namespace mnemo::server
