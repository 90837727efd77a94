// Chat templates: how /v1/chat/completions turns messages into the prompt
// text a model was trained on. accord does not run Jinja; it knows a few
// templates by name and recognises a GGUF's `tokenizer.chat_template` (or a
// Jinja file) as one of them by the markers it writes, as llama.cpp does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/serve/openai_api.hpp"

namespace accord::serve {

enum class ChatFormat { chatml, llama2, llama3, zephyr, plain };

struct ChatTemplate {
  ChatFormat format = ChatFormat::plain;

  // The prompt for `messages`, ending where the assistant's reply begins.
  std::string render(const std::vector<ChatMessage>& messages) const;
  // Text that ends the assistant's turn, which a reply stops before.
  std::vector<std::string> stop_sequences() const;
  std::string_view name() const;
};

// The names --chat-template takes: chatml, llama2, llama3, zephyr, plain.
std::vector<std::string_view> chat_template_names();
Result<ChatTemplate> chat_template_named(std::string_view name);
// The built-in a Jinja template's text is, recognised by its markers.
Result<ChatTemplate> recognise_chat_template(std::string_view jinja);

// --chat-template's value: a built-in's name, else a file holding a Jinja
// template that is recognised.
Result<ChatTemplate> chat_template_from_option(const std::string& name_or_file);

// A GGUF model's `tokenizer.chat_template`; empty when it has none (or is
// not a GGUF file).
Result<std::string> gguf_chat_template(const std::string& model_path);

}  // namespace accord::serve
