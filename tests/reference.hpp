// The reference outputs of llama2.c's run.c in ../shared/reference.
#pragma once

#include <string>
#include <vector>

namespace accord::test {

struct GreedyCase {
  std::string prompt;
  std::vector<int> prompt_tokens;
  std::vector<int> generated_tokens;
  std::string text;
};

// Every case of stories260K-greedy.json; fails the test if it is missing.
std::vector<GreedyCase> greedy_cases();

struct FirstLogits {
  int input_token;
  std::vector<float> first8;
  int argmax;
  float argmax_logit;
};

FirstLogits first_logits();

}  // namespace accord::test
