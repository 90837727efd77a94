// Chat templates against llama.cpp's: the conversation and the expected
// prompts are those of llama.cpp's tests/test-chat-template.cpp (the tree of
// llama-cpp-python 0.3.36), for the families accord renders.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/serve/chat_template.hpp"

namespace accord {
namespace {

const std::vector<serve::ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

struct Expected {
  const char* name;
  const char* prompt;
};

// llama.cpp's expected_output of each family, by its built-in name.
const Expected kExpected[] = {
    {"chatml",
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>"
     "assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an "
     "assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
    {"llama2",
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   "
     "</s>[INST] Another question [/INST]"},
    {"llama2-sys-bos",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are you "
     "[/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {"llama2-sys-strip",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]I "
     "am an assistant</s>[INST] Another question [/INST]"},
    {"gemma",
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
     "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
     "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
    {"openchat",
     "You are a helpful assistant<|end_of_turn|>GPT4 Correct User: Hello<|end_of_turn|>GPT4 Correct Assistant: Hi "
     "there<|end_of_turn|>GPT4 Correct User: Who are you<|end_of_turn|>GPT4 Correct Assistant:    I am an assistant   "
     "<|end_of_turn|>GPT4 Correct User: Another question<|end_of_turn|>GPT4 Correct Assistant:"},
    {"deepseek",
     "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### Instruction:\nWho are "
     "you\n### Response:\n   I am an assistant   \n<|EOT|>\n### Instruction:\nAnother question\n### Response:\n"},
    {"vicuna",
     "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    I am an "
     "assistant   </s>\nUSER: Another question\nASSISTANT:"},
    {"vicuna-orca",
     "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    I "
     "am an assistant   </s>\nUSER: Another question\nASSISTANT:"},
    {"command-r",
     "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
     "<|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I "
     "am an assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another "
     "question<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {"llama3",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|"
     "end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi "
     "there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
     "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
     "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"phi3",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
     "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   "
     "<|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"},
    {"deepseek2",
     "You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there<\xEF\xBD\x9C"
     "end\xE2\x96\x81of\xE2\x96\x81"
     "sentence\xEF\xBD\x9C>User: Who are you\n\nAssistant:    I am an assistant   <\xEF\xBD\x9C"
     "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>User: Another question\n\nAssistant:"},
    {"mistral-v1",
     " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
     "assistant   </s> [INST] Another question [/INST]"},
    {"mistral-v3",
     "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
     "assistant</s>[INST] Another question[/INST]"},
    {"mistral-v3-tekken",
     "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   "
     "</s>[INST]Another question[/INST]"},
    {"mistral-v7",
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are "
     "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
    {"phi4",
     "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_"
     "start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>"
     "assistant<|im_sep|>   I am an assistant   <|im_end|><|im_start|>user<|im_sep|>Another "
     "question<|im_end|><|im_start|>assistant<|im_sep|>"},
};

TEST(ChatTemplate, RendersAsLlamaCppDoes) {
  for (const Expected& expected : kExpected) {
    auto chat = serve::chat_template_named(expected.name);
    ASSERT_TRUE(chat) << chat.error().message();
    EXPECT_EQ(chat->render(kConversation), expected.prompt) << expected.name;
    EXPECT_EQ(chat->name(), expected.name);
  }
}

TEST(ChatTemplate, PlainIsAccordsOwn) {
  const std::vector<serve::ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(serve::ChatTemplate{}.render(messages), "System: Be brief.\nUser: Hi\nAssistant:");
  EXPECT_EQ(serve::ChatTemplate{}.stop_sequences(), std::vector<std::string>{"\nUser:"});
}

// Pieces of the Jinja sources of real models' templates, each enough for
// llama.cpp's recognition, and the family it names.
TEST(ChatTemplate, RecognisedByTheMarkersLlamaCppLooksFor) {
  const std::pair<const char*, const char*> cases[] = {
      {"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n'}}", "chatml"},
      {"{{'<|im_start|>' + m['role'] + '<|im_sep|>'}}", "phi4"},
      {"{{ bos_token }}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}", "llama2"},
      {"{{ '[INST] <<SYS>>\\n' + m }}{{ bos_token + '[INST] ' }}", "llama2-sys-bos"},
      {"{{ '[SYSTEM_PROMPT]' + system }}[INST]", "mistral-v7"},
      {"{{ '[AVAILABLE_TOOLS]' }}{{ \"[INST]\" + m }}", "mistral-v3-tekken"},
      {"{{'<|user|>' + '\\n' + m + '<|end|>' + '\\n' + '<|assistant|>'}}", "phi3"},
      {"{{ '<start_of_turn>' + role + '\\n' + m | trim + '<end_of_turn>\\n' }}", "gemma"},
      {"{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' }}", "llama3"},
      {"### Instruction:\\n{{ m }}\\n### Response:\\n{{ m }}\\n<|EOT|>", "deepseek"},
      {"<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "command-r"},
      {"llama3", "llama3"},
  };
  for (const auto& [jinja, family] : cases) {
    auto chat = serve::recognise_chat_template(jinja);
    ASSERT_TRUE(chat) << jinja << ": " << chat.error().message();
    EXPECT_EQ(chat->name(), family) << jinja;
  }
}

TEST(ChatTemplate, AFamilyAccordDoesNotRenderIsRefusedByName) {
  auto chatglm = serve::recognise_chat_template("[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>");
  ASSERT_FALSE(chatglm);
  EXPECT_NE(chatglm.error().message().find("'chatglm4'"), std::string::npos) << chatglm.error().message();
  auto unknown = serve::recognise_chat_template("{{ messages | tojson }}");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("none accord knows"), std::string::npos);
}

TEST(ChatTemplate, StopSequencesEndTheAssistantsTurn) {
  EXPECT_EQ(serve::chat_template_named("llama3")->stop_sequences(), std::vector<std::string>{"<|eot_id|>"});
  EXPECT_EQ(serve::chat_template_named("gemma")->stop_sequences(), std::vector<std::string>{"<end_of_turn>"});
  EXPECT_EQ(serve::chat_template_named("phi3")->stop_sequences(), std::vector<std::string>{"<|end|>"});
  EXPECT_FALSE(serve::chat_template_from_option("no-such-template-or-file"));
  EXPECT_EQ(serve::chat_template_from_option("zephyr")->name(), "zephyr");
}

}  // namespace
}  // namespace accord
