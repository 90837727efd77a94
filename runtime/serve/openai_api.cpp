#include "runtime/serve/openai_api.hpp"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace accord::serve {

namespace {

using nlohmann::json;

// Text cut from a multi-byte character is replaced, never a failed reply.
std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string event(const json& value) { return "data: " + dump(value) + "\n\n"; }

// 'name', for messages. Built by appending: GCC 12 warns falsely
// (-Wrestrict) on "'" + std::string.
std::string in_quotes(std::string_view name) {
  std::string text = "'";
  text.append(name).append("'");
  return text;
}

std::string type_name(const json& value) {
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "null";
}

// What the client sent, for a message: a number as written (never wrapped
// into another type's range), anything else by its type.
std::string as_sent(const json& value) { return value.is_number() ? value.dump() : type_name(value); }

ApiError wrong_type(const std::string& field, const json& value, std::string_view expected) {
  return bad_request(in_quotes(field) + " must be " + std::string(expected) + ", got " + as_sent(value), field);
}

// The reader of one request object: each field read is checked, and the
// first error is kept.
class Fields {
 public:
  explicit Fields(const json& object) : object_(object) {}

  const json* find(const std::string& name) const {
    auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  void read_bool(const std::string& name, bool& out) {
    const json* value = find(name);
    if (value == nullptr) return;
    if (!value->is_boolean()) return fail(wrong_type(name, *value, "a boolean"));
    out = value->get<bool>();
  }

  // A number in [low, high].
  void read_float(const std::string& name, float& out, double low, double high) {
    const json* value = find(name);
    if (value == nullptr) return;
    if (!value->is_number()) return fail(wrong_type(name, *value, "a number"));
    const double number = value->get<double>();
    if (!(number >= low && number <= high)) {
      return fail(bad_request(
          in_quotes(name) + " must be between " + format(low) + " and " + format(high) + ", got " + format(number),
          name));
    }
    out = static_cast<float>(number);
  }

  void read_max_tokens(std::optional<int>& out) {
    for (const char* name : {"max_tokens", "max_completion_tokens"}) {
      const json* value = find(name);
      if (value == nullptr) continue;
      if (!value->is_number_integer()) return fail(wrong_type(name, *value, "an integer"));
      // Read as unsigned where it is not negative, so that a count past
      // int64's range is no negative number: it asks for as many tokens as
      // the context allows.
      const bool negative = !value->is_number_unsigned();
      if (negative || value->get<std::uint64_t>() == 0) {
        return fail(bad_request(in_quotes(name) + " must be at least 1, got " + value->dump(), name));
      }
      out = static_cast<int>(std::min<std::uint64_t>(value->get<std::uint64_t>(), std::numeric_limits<int>::max()));
    }
  }

  void read_seed(std::optional<std::uint64_t>& out) {
    const json* value = find("seed");
    if (value == nullptr) return;
    if (!value->is_number_integer()) return fail(wrong_type("seed", *value, "an integer"));
    if (value->is_number_unsigned()) {
      out = value->get<std::uint64_t>();
      return;
    }
    // -1 asks for a random seed, as llama-server takes it.
    if (value->get<std::int64_t>() == -1) return;
    if (value->get<std::int64_t>() < 0) {
      return fail(bad_request(
          "'seed' must be between 0 and 18446744073709551615, or -1 for a random seed, got " + value->dump(), "seed"));
    }
    out = static_cast<std::uint64_t>(value->get<std::int64_t>());
  }

  // A count in [low, high], low >= 0.
  void read_count(const std::string& name, int& out, int high, int low = 0) {
    const json* value = find(name);
    if (value == nullptr) return;
    if (!value->is_number_integer()) return fail(wrong_type(name, *value, "an integer"));
    // nlohmann reads every integer from 0 up as unsigned.
    if (!value->is_number_unsigned() || value->get<std::uint64_t>() > static_cast<std::uint64_t>(high) ||
        value->get<std::uint64_t>() < static_cast<std::uint64_t>(low)) {
      return fail(bad_request(in_quotes(name) + " must be between " + std::to_string(low) + " and " +
                                  std::to_string(high) + ", got " + value->dump(),
                              name));
    }
    out = value->get<int>();
  }

  // Completions: `logprobs: N`, the alternatives wanted. Chat:
  // `logprobs: true`, and `top_logprobs: N` with it.
  void read_logprobs(Endpoint endpoint, int& top) {
    if (endpoint == Endpoint::completions) return read_count("logprobs", top, kMaxTopLogprobs);
    bool wanted = false;
    read_bool("logprobs", wanted);
    int count = 0;
    read_count("top_logprobs", count, kMaxTopLogprobs);
    if (!wanted && find("top_logprobs") != nullptr && count > 0) {
      return fail(bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs"));
    }
    if (wanted) top = count;
  }

  void read_stop(std::vector<std::string>& out) {
    const json* value = find("stop");
    if (value == nullptr) return;
    if (value->is_string()) {
      out = {value->get<std::string>()};
    } else if (value->is_array()) {
      for (const json& item : *value) {
        if (!item.is_string()) return fail(wrong_type("stop", item, "a string or an array of strings"));
        out.push_back(item.get<std::string>());
      }
    } else {
      return fail(wrong_type("stop", *value, "a string or an array of strings"));
    }
    if (out.size() > 4) return fail(bad_request("'stop' holds at most 4 sequences", "stop"));
    for (const std::string& stop : out) {
      if (stop.empty()) return fail(bad_request("'stop' sequences must not be empty", "stop"));
    }
  }

  // Fields that ask for what accord does not do are refused by name when
  // they ask for something; their neutral values, which OpenAI clients
  // send by default, are accepted.
  void refuse_unsupported() {
    if (const json* value = find("best_of"); value != nullptr && *value != 1) {
      fail(unsupported("best_of", "other than 1", *value));
    }
    for (const char* name : {"presence_penalty", "frequency_penalty"}) {
      const json* value = find(name);
      if (value != nullptr && *value != 0) fail(unsupported(name, "other than 0", *value));
    }
    for (const char* name : {"logit_bias", "tools", "functions", "suffix"}) {
      const json* value = find(name);
      const bool empty =
          value == nullptr || (value->is_string() ? value->get_ref<const std::string&>().empty() : value->empty());
      if (!empty) fail(unsupported(name, "", *value));
    }
    if (const json* format = find("response_format");
        format != nullptr && !(format->is_object() && format->value("type", "") == "text")) {
      fail(unsupported("response_format", "other than {\"type\": \"text\"}", *format));
    }
  }

  void fail(ApiError error) {
    if (!error_) error_ = std::move(error);
  }

  static ApiError unsupported(const std::string& name, std::string_view values, const json& value) {
    std::string message = in_quotes(name);
    if (!values.empty()) message.append(" ").append(values);
    message += " is not supported";
    if (value.is_number()) message += ", got " + value.dump();
    return bad_request(std::move(message), name, "unsupported_value");
  }
  const std::optional<ApiError>& error() const { return error_; }

 private:
  static std::string format(double number) {
    json value = number;
    return value.dump();
  }

  const json& object_;
  std::optional<ApiError> error_;
};

// `prompt`: a string, or an array of one string.
void read_prompt(Fields& fields, CompletionRequest& request) {
  const json* prompt = fields.find("prompt");
  if (prompt == nullptr) return fields.fail(bad_request("'prompt' is required", "prompt"));
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) prompt = &(*prompt)[0];
  if (prompt->is_array()) {
    return fields.fail(
        bad_request("'prompt' must be one string: a batch of prompts is not supported", "prompt", "unsupported_value"));
  }
  if (!prompt->is_string()) return fields.fail(wrong_type("prompt", *prompt, "a string"));
  request.prompt = prompt->get<std::string>();
}

// A message's content: a string, or an array of text parts.
std::optional<std::string> content_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return std::nullopt;
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      return std::nullopt;
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

void read_messages(Fields& fields, CompletionRequest& request) {
  const json* messages = fields.find("messages");
  if (messages == nullptr) return fields.fail(bad_request("'messages' is required", "messages"));
  if (!messages->is_array()) return fields.fail(wrong_type("messages", *messages, "an array"));
  if (messages->empty()) return fields.fail(bad_request("'messages' must not be empty", "messages"));
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) return fields.fail(wrong_type(where, message, "an object"));
    const auto role = message.find("role");
    if (role == message.end() || !role->is_string()) {
      return fields.fail(bad_request(where + ".role must be a string", where + ".role"));
    }
    const std::string name = role->get<std::string>();
    if (name != "system" && name != "user" && name != "assistant" && name != "developer") {
      return fields.fail(bad_request(where + ".role must be system, developer, user or assistant, got '" + name + "'",
                                     where + ".role"));
    }
    const auto content = message.find("content");
    auto text = content == message.end() ? std::nullopt : content_text(*content);
    if (!text) {
      return fields.fail(
          bad_request(where + ".content must be a string or an array of text parts", where + ".content"));
    }
    request.messages.push_back({name == "developer" ? "system" : name, std::move(*text)});
  }
}

json usage(const CompletionOutcome& outcome) {
  return {{"prompt_tokens", outcome.prompt_tokens},
          {"completion_tokens", outcome.completion_tokens},
          {"total_tokens", outcome.prompt_tokens + outcome.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", outcome.cached_tokens}}}};
}

json utf8_bytes(const std::string& text) {
  json bytes = json::array();
  for (char c : text) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

// OpenAI's legacy shape for completions: parallel lists.
json completion_logprobs(const Logprobs& logprobs) {
  json tokens = json::array();
  json values = json::array();
  json tops = json::array();
  for (const TokenLogprobs& token : logprobs.tokens) {
    tokens.push_back(token.chosen.text);
    values.push_back(token.chosen.logprob);
    json top = json::object();
    for (const TokenChoice& choice : token.top) top.emplace(choice.text, choice.logprob);
    tops.push_back(std::move(top));
  }
  return {
      {"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", logprobs.text_offsets}};
}

json chat_choice(const TokenChoice& choice) {
  return {{"token", choice.text}, {"logprob", choice.logprob}, {"bytes", utf8_bytes(choice.text)}};
}

// Chat's shape: one object per token.
json chat_logprobs(const Logprobs& logprobs) {
  json content = json::array();
  for (const TokenLogprobs& token : logprobs.tokens) {
    json entry = chat_choice(token.chosen);
    entry["top_logprobs"] = json::array();
    for (const TokenChoice& choice : token.top) entry["top_logprobs"].push_back(chat_choice(choice));
    content.push_back(std::move(entry));
  }
  return {{"content", content}};
}

json logprobs_json(Endpoint endpoint, const Logprobs* logprobs) {
  if (logprobs == nullptr) return nullptr;
  return endpoint == Endpoint::completions ? completion_logprobs(*logprobs) : chat_logprobs(*logprobs);
}

json reply_head(const ReplyHeader& header, bool chunk) {
  const bool chat = header.endpoint == Endpoint::chat_completions;
  const char* object = chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model}};
}

json choice(const ReplyHeader& header, std::string_view text, const json& finish_reason, bool chunk,
            const Logprobs* logprobs = nullptr, std::size_t index = 0) {
  json entry = {
      {"index", index}, {"finish_reason", finish_reason}, {"logprobs", logprobs_json(header.endpoint, logprobs)}};
  if (header.endpoint == Endpoint::completions) {
    entry["text"] = text;
  } else if (chunk) {
    entry["delta"] = text.empty() ? json::object() : json{{"content", text}};
  } else {
    entry["message"] = {{"role", "assistant"}, {"content", text}};
  }
  return entry;
}

json chunk_with(const ReplyHeader& header, json entry) {
  json reply = reply_head(header, /*chunk=*/true);
  reply["choices"] = json::array({std::move(entry)});
  return reply;
}

}  // namespace

std::string ApiError::body() const {
  json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  if (!code.empty()) error["code"] = code;
  return dump({{"error", error}});
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

Result<CompletionRequest, ApiError> parse_request(std::string_view body, Endpoint endpoint) {
  json object = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return bad_request("the request body is not valid JSON");
  if (!object.is_object()) return bad_request("the request body must be a JSON object, got " + type_name(object));
  CompletionRequest request;
  request.endpoint = endpoint;
  Fields fields(object);
  if (const json* model = fields.find("model"); model == nullptr) {
    fields.fail(bad_request("'model' is required", "model"));
  } else if (!model->is_string()) {
    fields.fail(wrong_type("model", *model, "a string"));
  } else {
    request.model = model->get<std::string>();
  }
  if (endpoint == Endpoint::completions) {
    read_prompt(fields, request);
    fields.read_bool("echo", request.echo);
  } else {
    read_messages(fields, request);
  }
  fields.read_max_tokens(request.max_tokens);
  fields.read_float("temperature", request.temperature, 0.0, 2.0);
  fields.read_float("top_p", request.top_p, 0.0, 1.0);
  if (fields.error() == std::nullopt && request.top_p == 0.0f) {
    fields.fail(bad_request("'top_p' must be greater than 0", "top_p"));
  }
  fields.read_seed(request.seed);
  fields.read_logprobs(endpoint, request.top_logprobs);
  fields.read_stop(request.stop);
  fields.read_bool("stream", request.stream);
  fields.read_count("n", request.choices, kMaxCompletionChoices, 1);
  if (!fields.error() && request.stream && request.choices > 1) {
    fields.fail(bad_request("'n' greater than 1 is not streamed: ask with 'stream': false", "n", "unsupported_value"));
  }
  fields.refuse_unsupported();
  if (const json* options = fields.find("stream_options"); options != nullptr) {
    if (!options->is_object()) {
      fields.fail(wrong_type("stream_options", *options, "an object"));
    } else {
      Fields(*options).read_bool("include_usage", request.include_usage);
    }
  }
  if (fields.error()) return *fields.error();
  if (endpoint == Endpoint::completions && !request.max_tokens) request.max_tokens = 16;
  return request;
}

std::string completion_body(const ReplyHeader& header, const CompletionOutcome& outcome) {
  json reply = reply_head(header, /*chunk=*/false);
  reply["choices"] = json::array();
  for (std::size_t i = 0; i < outcome.choices.size(); ++i) {
    const CompletionChoice& each = outcome.choices[i];
    const Logprobs* logprobs = each.logprobs ? &*each.logprobs : nullptr;
    reply["choices"].push_back(choice(header, each.text, each.finish_reason, /*chunk=*/false, logprobs, i));
  }
  reply["usage"] = usage(outcome);
  return dump(reply);
}

std::string stream_role_event(const ReplyHeader& header) {
  json entry = {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}};
  return event(chunk_with(header, std::move(entry)));
}

std::string stream_text_event(const ReplyHeader& header, std::string_view text, const Logprobs* logprobs) {
  return event(chunk_with(header, choice(header, text, nullptr, /*chunk=*/true, logprobs)));
}

std::string stream_finish_event(const ReplyHeader& header, std::string_view finish_reason) {
  return event(chunk_with(header, choice(header, "", finish_reason, /*chunk=*/true)));
}

std::string stream_usage_event(const ReplyHeader& header, const CompletionOutcome& outcome) {
  json reply = reply_head(header, /*chunk=*/true);
  reply["choices"] = json::array();
  reply["usage"] = usage(outcome);
  return event(reply);
}

std::string stream_error_event(const ApiError& error) { return "data: " + error.body() + "\n\n"; }

std::string models_body(std::string_view model, std::int64_t created, int context) {
  json entry = {
      {"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "accord"}, {"max_model_len", context}};
  return dump({{"object", "list"}, {"data", json::array({entry})}});
}

}  // namespace accord::serve
