#include "tests/reference.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support.hpp"

namespace accord::test {

namespace {

nlohmann::json read_json(const std::string& name) {
  const auto path = shared_dir() / "reference" / name;
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "missing reference file " << path;
    return nullptr;
  }
  return nlohmann::json::parse(in);
}

}  // namespace

std::vector<GreedyCase> greedy_cases() {
  std::vector<GreedyCase> cases;
  const auto json = read_json("stories260K-greedy.json");
  if (!json.is_array()) return cases;
  for (const auto& c : json) {
    cases.push_back({c.at("prompt").get<std::string>(), c.at("prompt_tokens").get<std::vector<int>>(),
                     c.at("generated_tokens").get<std::vector<int>>(), c.at("text").get<std::string>()});
  }
  return cases;
}

FirstLogits first_logits() {
  const auto json = read_json("stories260K-first-logits.json");
  if (json.is_null()) return {};
  return {json.at("input_token").get<int>(), json.at("logits_first8").get<std::vector<float>>(),
          json.at("argmax").get<int>(), json.at("argmax_logit").get<float>()};
}

}  // namespace accord::test
