// The OpenAI-compatible wire format of `accord serve`: requests of
// /v1/completions and /v1/chat/completions read into one CompletionRequest,
// checked as OpenAI checks them, and the replies (whole, or streamed as
// server-sent events) and errors written in OpenAI's shapes. No HTTP here:
// apps/accord/serve_http.cpp moves the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/generate/logprobs.hpp"

namespace accord::serve {

enum class Endpoint { completions, chat_completions };

// The most completions one request may ask for (`n`).
inline constexpr int kMaxCompletionChoices = 16;

// An error as OpenAI reports it: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, or empty
  std::string code;   // a machine-readable code, or empty

  std::string body() const;
};

ApiError bad_request(std::string message, std::string param = {}, std::string code = {});

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// One request of either endpoint, every default filled in.
struct CompletionRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;
  std::string prompt;                 // completions
  std::vector<ChatMessage> messages;  // chat completions
  // Completions default to 16 as OpenAI's do; chat to the rest of the context.
  std::optional<int> max_tokens;
  float temperature = 1.0f;
  float top_p = 1.0f;
  std::optional<std::uint64_t> seed;  // none: the server picks one
  std::vector<std::string> stop;      // at most four
  bool stream = false;
  bool echo = false;  // completions: the prompt before the completion
  // Log-probabilities of the generated tokens with this many alternatives
  // each (0 to kMaxTopLogprobs), -1: none. Completions' `logprobs: N`
  // (with `echo`, the prompt's too); chat's `logprobs: true` with
  // `top_logprobs: N`.
  int top_logprobs = -1;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the counts
  // `n`: completions of the prompt (1 to kMaxCompletionChoices); more than
  // one is not streamed.
  int choices = 1;
};

// Reads and checks a request body: malformed JSON, a field of the wrong
// type or out of range, or a missing prompt is an ApiError naming the field.
Result<CompletionRequest, ApiError> parse_request(std::string_view body, Endpoint endpoint);

// The log-probabilities a reply or chunk carries: its tokens in order and,
// for completions, where each one's text starts in the prompt and
// completion together (OpenAI's text_offset).
struct Logprobs {
  std::vector<TokenLogprobs> tokens;
  std::vector<std::size_t> text_offsets;
};

// One of a reply's completions.
struct CompletionChoice {
  std::string text;
  std::string finish_reason;         // "stop" or "length"
  std::optional<Logprobs> logprobs;  // when the request asked for them
};

// What the reply says of a finished request.
struct CompletionOutcome {
  std::vector<CompletionChoice> choices;  // the i-th has index i
  int prompt_tokens = 0;                  // counted once, whatever the choices
  int cached_tokens = 0;                  // of the prompt tokens, those its first choice did not prefill
  int completion_tokens = 0;              // over every choice
};

// The reply's identity, shared by a stream's chunks.
struct ReplyHeader {
  std::string id;            // "cmpl-..." or "chatcmpl-..."
  std::int64_t created = 0;  // Unix seconds
  std::string model;
  Endpoint endpoint = Endpoint::completions;
};

std::string completion_body(const ReplyHeader& header, const CompletionOutcome& outcome);

// One server-sent event of a stream ("data: {...}\n\n"): a piece of text,
// or with `finish_reason` the last chunk. Chat streams open with a chunk
// that gives the role.
std::string stream_role_event(const ReplyHeader& header);
std::string stream_text_event(const ReplyHeader& header, std::string_view text, const Logprobs* logprobs = nullptr);
std::string stream_finish_event(const ReplyHeader& header, std::string_view finish_reason);
std::string stream_usage_event(const ReplyHeader& header, const CompletionOutcome& outcome);
std::string stream_error_event(const ApiError& error);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

// GET /v1/models: the one model served, with its context in tokens as
// vLLM gives it (`max_model_len`), prompt and reply together.
std::string models_body(std::string_view model, std::int64_t created, int context);

}  // namespace accord::serve
