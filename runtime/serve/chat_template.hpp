// Chat templates: how /v1/chat/completions and `generate --chat` turn
// messages into the prompt text a model was trained on. accord does not run
// Jinja; as llama.cpp's built-in templates do (src/llama-chat.cpp), it knows
// the common families by name, renders each the way llama.cpp renders it,
// and recognises a GGUF's `tokenizer.chat_template` (or a Jinja file) as one
// of them by the markers its source writes, in llama.cpp's order. A template
// recognised as a family accord does not render is refused by that name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/serve/openai_api.hpp"

namespace accord::serve {

// llama.cpp's names, less the dashes; `plain` is accord's own
// ("User: ...\nAssistant:") for models trained on no template.
enum class ChatFormat {
  chatml,
  llama2,
  llama2_sys,
  llama2_sys_bos,
  llama2_sys_strip,
  mistral_v1,
  mistral_v3,
  mistral_v3_tekken,
  mistral_v7,
  mistral_v7_tekken,
  phi3,
  phi4,
  falcon3,
  zephyr,
  gemma,
  openchat,
  vicuna,
  vicuna_orca,
  deepseek,
  deepseek2,
  deepseek3,
  command_r,
  llama3,
  plain,
};

struct ChatTemplate {
  ChatFormat format = ChatFormat::plain;

  // The prompt for `messages`, ending where the assistant's reply begins
  // (llama.cpp's add_generation_prompt; the Mistral and Llama 2 families
  // end with the user's [/INST]). Without the BOS token: the tokenizer adds
  // it as the model file says.
  std::string render(const std::vector<ChatMessage>& messages) const;
  // Text that ends the assistant's turn, which a reply stops before. The
  // vocabulary's end-of-generation tokens stop it too.
  std::vector<std::string> stop_sequences() const;
  std::string_view name() const;
};

// The names --chat-template takes, llama.cpp's spelling (chatml, llama3,
// mistral-v7, ...), and `plain`.
std::vector<std::string_view> chat_template_names();
Result<ChatTemplate> chat_template_named(std::string_view name);
// The built-in a Jinja template's text is, recognised by its markers (or
// the text is a built-in's name, as llama.cpp allows).
Result<ChatTemplate> recognise_chat_template(std::string_view jinja);

// --chat-template's value: a built-in's name, else a file holding a Jinja
// template that is recognised.
Result<ChatTemplate> chat_template_from_option(const std::string& name_or_file);

// A GGUF model's `tokenizer.chat_template`; empty when it has none (or is
// not a GGUF file).
Result<std::string> gguf_chat_template(const std::string& model_path);

// The template a command uses: --chat-template's `option` when given, else
// the model's own, else `plain`; `*fell_back` (when given) tells whether
// plain was taken for want of one.
Result<ChatTemplate> chat_template_for(const std::string& option, const std::string& model_path,
                                       bool* fell_back = nullptr);

}  // namespace accord::serve
