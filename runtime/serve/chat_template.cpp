#include "runtime/serve/chat_template.hpp"

#include <array>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "runtime/io/mapped_file.hpp"
#include "runtime/model/gguf.hpp"

namespace accord::serve {

namespace {

// What most templates are: each role's text between a prefix and a suffix,
// then the prefix of the reply.
struct Turns {
  std::string_view system_before, system_after;
  std::string_view user_before, user_after;
  std::string_view assistant_before, assistant_after;
  std::string_view generation;
  bool trim = false;  // surrounding whitespace of every message is dropped
};

struct Builtin {
  std::string_view name;  // llama.cpp's
  ChatFormat format;
  std::optional<Turns> turns;  // none: a renderer of its own (render)
  std::array<std::string_view, 2> stops;
};

constexpr std::string_view kEndOfSentence =
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
constexpr std::string_view kDeepseekUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
constexpr std::string_view kDeepseekAssistant =
    "<\xEF\xBD\x9C"
    "Assistant\xEF\xBD\x9C>";

constexpr Turns kChatml{"<|im_start|>system\n",    "<|im_end|>\n", "<|im_start|>user\n",     "<|im_end|>\n",
                        "<|im_start|>assistant\n", "<|im_end|>\n", "<|im_start|>assistant\n"};
constexpr Turns kCommandR{"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",  "<|END_OF_TURN_TOKEN|>",
                          "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",    "<|END_OF_TURN_TOKEN|>",
                          "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
                          "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", true};
constexpr Turns kLlama3{"<|start_header_id|>system<|end_header_id|>\n\n",    "<|eot_id|>",
                        "<|start_header_id|>user<|end_header_id|>\n\n",      "<|eot_id|>",
                        "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>",
                        "<|start_header_id|>assistant<|end_header_id|>\n\n", true};

const std::array<Builtin, 24> kBuiltins{{
    {"chatml", ChatFormat::chatml, kChatml, {"<|im_end|>"}},
    {"llama2", ChatFormat::llama2, std::nullopt, {"</s>", "[INST]"}},
    {"llama2-sys", ChatFormat::llama2_sys, std::nullopt, {"</s>", "[INST]"}},
    {"llama2-sys-bos", ChatFormat::llama2_sys_bos, std::nullopt, {"</s>", "[INST]"}},
    {"llama2-sys-strip", ChatFormat::llama2_sys_strip, std::nullopt, {"</s>", "[INST]"}},
    {"mistral-v1", ChatFormat::mistral_v1, std::nullopt, {"</s>", "[INST]"}},
    {"mistral-v3", ChatFormat::mistral_v3, std::nullopt, {"</s>", "[INST]"}},
    {"mistral-v3-tekken", ChatFormat::mistral_v3_tekken, std::nullopt, {"</s>", "[INST]"}},
    {"mistral-v7",
     ChatFormat::mistral_v7,
     Turns{"[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]", "[INST] ", "[/INST]", " ", "</s>", ""},
     {"</s>", "[INST]"}},
    {"mistral-v7-tekken",
     ChatFormat::mistral_v7_tekken,
     Turns{"[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]", "", "</s>", ""},
     {"</s>", "[INST]"}},
    {"phi3",
     ChatFormat::phi3,
     Turns{"<|system|>\n", "<|end|>\n", "<|user|>\n", "<|end|>\n", "<|assistant|>\n", "<|end|>\n", "<|assistant|>\n"},
     {"<|end|>"}},
    {"phi4",
     ChatFormat::phi4,
     Turns{"<|im_start|>system<|im_sep|>", "<|im_end|>", "<|im_start|>user<|im_sep|>", "<|im_end|>",
           "<|im_start|>assistant<|im_sep|>", "<|im_end|>", "<|im_start|>assistant<|im_sep|>"},
     {"<|im_end|>"}},
    {"falcon3",
     ChatFormat::falcon3,
     Turns{"<|system|>\n", "\n", "<|user|>\n", "\n", "<|assistant|>\n", "\n", "<|assistant|>\n"},
     {"<|user|>"}},
    {"zephyr",
     ChatFormat::zephyr,
     Turns{"<|system|>\n", "<|endoftext|>\n", "<|user|>\n", "<|endoftext|>\n", "<|assistant|>\n", "<|endoftext|>\n",
           "<|assistant|>\n"},
     {"<|endoftext|>", "</s>"}},
    {"gemma", ChatFormat::gemma, std::nullopt, {"<end_of_turn>"}},
    {"openchat",
     ChatFormat::openchat,
     Turns{"", "<|end_of_turn|>", "GPT4 Correct User: ", "<|end_of_turn|>",
           "GPT4 Correct Assistant: ", "<|end_of_turn|>", "GPT4 Correct Assistant:"},
     {"<|end_of_turn|>"}},
    {"vicuna",
     ChatFormat::vicuna,
     Turns{"", "\n\n", "USER: ", "\n", "ASSISTANT: ", "</s>\n", "ASSISTANT:"},
     {"</s>", "\nUSER:"}},
    {"vicuna-orca",
     ChatFormat::vicuna_orca,
     Turns{"SYSTEM: ", "\n", "USER: ", "\n", "ASSISTANT: ", "</s>\n", "ASSISTANT:"},
     {"</s>", "\nUSER:"}},
    {"deepseek",
     ChatFormat::deepseek,
     Turns{"", "", "### Instruction:\n", "\n", "### Response:\n", "\n<|EOT|>\n", "### Response:\n"},
     {"<|EOT|>"}},
    {"deepseek2",
     ChatFormat::deepseek2,
     Turns{"", "\n\n", "User: ", "\n\n", "Assistant: ", kEndOfSentence, "Assistant:"},
     {kEndOfSentence}},
    {"deepseek3",
     ChatFormat::deepseek3,
     Turns{"", "\n\n", kDeepseekUser, "", kDeepseekAssistant, kEndOfSentence, kDeepseekAssistant},
     {kEndOfSentence}},
    {"command-r", ChatFormat::command_r, kCommandR, {"<|END_OF_TURN_TOKEN|>"}},
    {"llama3", ChatFormat::llama3, kLlama3, {"<|eot_id|>"}},
    {"plain",
     ChatFormat::plain,
     Turns{"System: ", "\n", "User: ", "\n", "Assistant: ", "\n", "Assistant:"},
     {"\nUser:"}},
}};

const Builtin& builtin_of(ChatFormat format) {
  for (const Builtin& builtin : kBuiltins) {
    if (builtin.format == format) return builtin;
  }
  return kBuiltins.back();
}

// Whitespace as C's isspace sees it, which llama.cpp's trim uses.
std::string trimmed(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return std::string(text.substr(first, text.find_last_not_of(kSpace) - first + 1));
}

std::string render_turns(const Turns& turns, const std::vector<ChatMessage>& messages) {
  std::string prompt;
  for (const ChatMessage& m : messages) {
    const bool system = m.role == "system", user = m.role == "user";
    prompt += system ? turns.system_before : user ? turns.user_before : turns.assistant_before;
    prompt += turns.trim ? trimmed(m.content) : m.content;
    prompt += system ? turns.system_after : user ? turns.user_after : turns.assistant_after;
  }
  return prompt += turns.generation;
}

// Llama 2 and its variants: one [INST] ... [/INST] per user turn, the
// system prompt inside the first (between <<SYS>> markers where the
// variant has them).
std::string render_llama2(ChatFormat format, const std::vector<ChatMessage>& messages) {
  const bool system_markers = format != ChatFormat::llama2;
  const bool strip = format == ChatFormat::llama2_sys_strip;
  std::string prompt = "[INST] ";
  bool inside_turn = true;
  for (const ChatMessage& m : messages) {
    const std::string content = strip ? trimmed(m.content) : m.content;
    if (!inside_turn) {
      prompt += format == ChatFormat::llama2_sys_bos ? "<s>[INST] " : "[INST] ";
      inside_turn = true;
    }
    if (m.role == "system") {
      prompt += system_markers ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
    } else if (m.role == "user") {
      prompt += content + " [/INST]";
    } else {
      prompt += content + "</s>";
      inside_turn = false;
    }
  }
  return prompt;
}

// Mistral's v1, v3 and v3-tekken: the system prompt opens the next [INST].
std::string render_mistral(ChatFormat format, const std::vector<ChatMessage>& messages) {
  const std::string leading = format == ChatFormat::mistral_v1 ? " " : "";
  const std::string trailing = format == ChatFormat::mistral_v3_tekken ? "" : " ";
  std::string prompt;
  bool inside_turn = false;
  for (const ChatMessage& m : messages) {
    if (!inside_turn) {
      prompt += leading + "[INST]" + trailing;
      inside_turn = true;
    }
    if (m.role == "system") {
      prompt += m.content + "\n\n";
    } else if (m.role == "user") {
      prompt += m.content + leading + "[/INST]";
    } else {
      prompt += trailing + (format == ChatFormat::mistral_v3 ? trimmed(m.content) : m.content) + "</s>";
      inside_turn = false;
    }
  }
  return prompt;
}

// Gemma has no system role: its text opens the next user turn. The
// assistant is the "model".
std::string render_gemma(const std::vector<ChatMessage>& messages) {
  std::string prompt, system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += trimmed(m.content);
      continue;
    }
    const bool model = m.role == "assistant";
    prompt += "<start_of_turn>" + std::string(model ? "model" : m.role) + "\n";
    if (!model && !system.empty()) prompt += std::exchange(system, {}) + "\n\n";
    prompt += trimmed(m.content) + "<end_of_turn>\n";
  }
  return prompt + "<start_of_turn>model\n";
}

// llama.cpp's recognition (llm_chat_detect_template), in its order, up to
// the families accord renders; the name of the family, or empty.
std::string_view detect_family(std::string_view t) {
  const auto has = [t](std::string_view marker) { return t.find(marker) != std::string_view::npos; };
  if (has("<|im_start|>")) return has("<|im_sep|>") ? "phi4" : has("<end_of_utterance>") ? "smolvlm" : "chatml";
  if (t.starts_with("mistral") || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return "mistral-v7";
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return "mistral-v1";
      return has("\"[INST]\"") ? "mistral-v3-tekken" : "mistral-v3";
    }
    if (has("content.strip()")) return "llama2-sys-strip";
    if (has("bos_token + '[INST]")) return "llama2-sys-bos";
    return has("<<SYS>>") ? "llama2-sys" : "llama2";
  }
  if (has("<|assistant|>") && has("<|end|>")) return "phi3";
  if (has("[gMASK]<sop>")) return "chatglm4";
  if (has("<|assistant|>") && has("<|user|>")) {
    if (has("<|tool_declare|>")) return "exaone-moe";
    return has("</s>") ? "falcon3" : "glmedge";
  }
  if (has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>")) return "glmedge";
  if (has("<|user|>") && has("<|endoftext|>")) return "zephyr";
  if (has("bos_token + message['role']")) return "monarch";
  if (has("<start_of_turn>")) return "gemma";
  if (has("'\\n\\nAssistant: ' + eos_token")) return "orion";
  if (has("GPT4 Correct ")) return "openchat";
  if (has("USER: ") && has("ASSISTANT: ")) return has("SYSTEM: ") ? "vicuna-orca" : "vicuna";
  if (has("### Instruction:") && has("<|EOT|>")) return "deepseek";
  if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) return "command-r";
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return "llama3";
  if (has("[gMASK]sop")) return "chatglm3";
  if (has("<\xE7\x94\xA8\xE6\x88\xB7>")) return "minicpm";  // <用户>
  if (has("'Assistant: ' + message['content'] + eos_token")) return "deepseek2";
  if (has(kDeepseekAssistant) && has(kDeepseekUser) && has(kEndOfSentence)) return "deepseek3";
  return {};
}

}  // namespace

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  switch (format) {
    case ChatFormat::llama2:
    case ChatFormat::llama2_sys:
    case ChatFormat::llama2_sys_bos:
    case ChatFormat::llama2_sys_strip: return render_llama2(format, messages);
    case ChatFormat::mistral_v1:
    case ChatFormat::mistral_v3:
    case ChatFormat::mistral_v3_tekken: return render_mistral(format, messages);
    case ChatFormat::gemma: return render_gemma(messages);
    default: return render_turns(*builtin_of(format).turns, messages);
  }
}

std::vector<std::string> ChatTemplate::stop_sequences() const {
  std::vector<std::string> stops;
  for (std::string_view stop : builtin_of(format).stops) {
    if (!stop.empty()) stops.emplace_back(stop);
  }
  return stops;
}

std::string_view ChatTemplate::name() const { return builtin_of(format).name; }

std::vector<std::string_view> chat_template_names() {
  std::vector<std::string_view> names;
  for (const Builtin& builtin : kBuiltins) names.push_back(builtin.name);
  return names;
}

Result<ChatTemplate> chat_template_named(std::string_view name) {
  for (const Builtin& builtin : kBuiltins) {
    if (builtin.name == name) return ChatTemplate{builtin.format};
  }
  return Error(ErrorCode::contract, "no built-in chat template is named '" + std::string(name) + "'");
}

Result<ChatTemplate> recognise_chat_template(std::string_view jinja) {
  if (auto named = chat_template_named(jinja)) return named;
  const std::string_view family = detect_family(jinja);
  if (family.empty()) {
    return Error(ErrorCode::contract,
                 "the chat template is none accord knows (it does not run Jinja; it recognises the families of "
                 "llama.cpp's built-in templates by their markers): pass --chat-template with a built-in's name");
  }
  auto known = chat_template_named(family);
  if (!known) {
    return Error(ErrorCode::contract, "the chat template is llama.cpp's '" + std::string(family) +
                                          "', which accord does not render: pass --chat-template with a "
                                          "built-in's name");
  }
  return known;
}

Result<ChatTemplate> chat_template_from_option(const std::string& name_or_file) {
  if (auto named = chat_template_named(name_or_file)) return named;
  std::ifstream file(name_or_file, std::ios::binary);
  if (!file) {
    std::string names;
    for (std::string_view name : chat_template_names()) names += (names.empty() ? "" : ", ") + std::string(name);
    return Error(ErrorCode::io,
                 "--chat-template: '" + name_or_file + "' is neither a built-in (" + names + ") nor a readable file");
  }
  std::ostringstream text;
  text << file.rdbuf();
  auto recognised = recognise_chat_template(text.str());
  if (!recognised) return Error(recognised.error().code(), name_or_file + ": " + recognised.error().message());
  return recognised;
}

Result<std::string> gguf_chat_template(const std::string& model_path) {
  auto file = MappedFile::open(model_path);
  if (!file) return file.error();
  if (!gguf::has_magic(file->bytes())) return std::string();
  auto parsed = gguf::parse(file->bytes(), model_path);
  if (!parsed) return parsed.error();
  const gguf::Value* value = parsed->find("tokenizer.chat_template");
  if (value == nullptr) return std::string();
  auto text = value->as_string();
  if (!text) return Error(ErrorCode::format, model_path + ": tokenizer.chat_template is not a string");
  return std::string(*text);
}

Result<ChatTemplate> chat_template_for(const std::string& option, const std::string& model_path, bool* fell_back) {
  if (fell_back != nullptr) *fell_back = false;
  if (!option.empty()) return chat_template_from_option(option);
  auto jinja = gguf_chat_template(model_path);
  if (!jinja) return jinja.error();
  if (jinja->empty()) {
    if (fell_back != nullptr) *fell_back = true;
    return ChatTemplate{ChatFormat::plain};
  }
  auto recognised = recognise_chat_template(*jinja);
  if (!recognised) return Error(recognised.error().code(), model_path + ": " + recognised.error().message());
  return recognised;
}

}  // namespace accord::serve
