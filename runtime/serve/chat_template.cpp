#include "runtime/serve/chat_template.hpp"

#include <array>
#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/io/mapped_file.hpp"
#include "runtime/model/gguf.hpp"

namespace accord::serve {

namespace {

struct Builtin {
  std::string_view name;
  ChatFormat format;
  std::string_view marker;  // what its Jinja source writes, and no other's does
};

constexpr std::array<Builtin, 5> kBuiltins{{
    {"chatml", ChatFormat::chatml, "<|im_start|>"},
    {"llama3", ChatFormat::llama3, "<|start_header_id|>"},
    {"zephyr", ChatFormat::zephyr, "<|assistant|>"},
    {"llama2", ChatFormat::llama2, "[INST]"},
    {"plain", ChatFormat::plain, ""},
}};

std::string capitalised(std::string role) {
  if (!role.empty() && role[0] >= 'a' && role[0] <= 'z') role[0] = static_cast<char>(role[0] - 'a' + 'A');
  return role;
}

std::string render_llama2(const std::vector<ChatMessage>& messages) {
  std::string prompt;
  std::string system;
  bool open = false;  // an [INST] waits for its answer
  for (const ChatMessage& message : messages) {
    if (message.role == "system") {
      system += message.content;
    } else if (message.role == "user") {
      prompt += open ? " " : "";
      prompt += "[INST] ";
      if (!system.empty()) prompt += "<<SYS>>\n" + std::exchange(system, {}) + "\n<</SYS>>\n\n";
      prompt += message.content + " [/INST]";
      open = true;
    } else {
      prompt += " " + message.content + " </s>";
      open = false;
    }
  }
  return prompt;
}

}  // namespace

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string prompt;
  switch (format) {
    case ChatFormat::chatml:
      for (const ChatMessage& m : messages) prompt += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return prompt + "<|im_start|>assistant\n";
    case ChatFormat::llama3:
      for (const ChatMessage& m : messages) {
        prompt += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      }
      return prompt + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::zephyr:
      for (const ChatMessage& m : messages) prompt += "<|" + m.role + "|>\n" + m.content + "</s>\n";
      return prompt + "<|assistant|>\n";
    case ChatFormat::llama2: return render_llama2(messages);
    case ChatFormat::plain:
      for (const ChatMessage& m : messages) prompt += capitalised(m.role) + ": " + m.content + "\n";
      return prompt + "Assistant:";
  }
  return prompt;
}

std::vector<std::string> ChatTemplate::stop_sequences() const {
  switch (format) {
    case ChatFormat::chatml: return {"<|im_end|>"};
    case ChatFormat::llama3: return {"<|eot_id|>"};
    case ChatFormat::zephyr: return {"</s>"};
    case ChatFormat::llama2: return {"</s>", "[INST]"};
    case ChatFormat::plain: return {"\nUser:"};
  }
  return {};
}

std::string_view ChatTemplate::name() const {
  for (const Builtin& builtin : kBuiltins) {
    if (builtin.format == format) return builtin.name;
  }
  return "unknown";
}

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
  for (const Builtin& builtin : kBuiltins) {
    if (!builtin.marker.empty() && jinja.find(builtin.marker) != std::string_view::npos) {
      return ChatTemplate{builtin.format};
    }
  }
  return Error(ErrorCode::contract,
               "the chat template is none accord knows (it does not run Jinja; it recognises chatml, llama3, "
               "zephyr and llama2 templates by their markers): pass --chat-template with one of their names");
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

}  // namespace accord::serve
