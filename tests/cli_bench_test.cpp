// `accord bench`: the JSON report's fields, the table, the temporary files
// it leaves behind (none) and clear refusals. Speeds are not asserted
// (bench/README.md): only that every measured figure is there and positive.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support.hpp"

namespace accord {
namespace {

using test::run_accord;

// Points TMPDIR at a fresh folder for the commands run while it lives.
class TmpdirInEnvironment {
 public:
  TmpdirInEnvironment() { ::setenv("TMPDIR", dir_.path().c_str(), 1); }
  ~TmpdirInEnvironment() { ::unsetenv("TMPDIR"); }
  TmpdirInEnvironment(const TmpdirInEnvironment&) = delete;
  TmpdirInEnvironment& operator=(const TmpdirInEnvironment&) = delete;
  bool empty() const { return std::filesystem::is_empty(dir_.path()); }

 private:
  test::TempDir dir_;
};

// A quick synthetic run: the 15M shape in Q8_0, short tests, one thread.
std::vector<std::string> quick_bench(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"bench", "--shape",   "15m", "--precision",     "q8_0", "--repetitions",
                                   "1",     "--threads", "1",   "--decode-tokens", "8",    "--prefill-tokens",
                                   "16"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

void expect_failure(const std::vector<std::string>& args, int code, const std::string& fragment) {
  const auto result = run_accord(args);
  EXPECT_EQ(result.exit_code, code) << result.output;
  EXPECT_NE(result.output.find(fragment), std::string::npos) << "expected '" << fragment << "' in:\n" << result.output;
}

TEST(CliBench, JsonHasBandwidthAndEveryRateAndRemovesItsFiles) {
  TmpdirInEnvironment tmpdir;
  const auto result = run_accord(quick_bench({"--json"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_GT(json.at("bandwidth_gb_per_s").get<double>(), 0.0);
  EXPECT_EQ(json.at("threads"), 1);
  const auto& results = json.at("results");
  ASSERT_EQ(results.size(), 2u) << json.dump(2);
  for (const auto& row : results) {
    EXPECT_EQ(row.at("precision"), "Q8_0");
    EXPECT_GT(row.at("weights_bytes").get<std::uint64_t>(), 0u);
    EXPECT_GT(row.at("tokens_per_second").get<double>(), 0.0);
  }
  const auto& tg = results.at(0);
  EXPECT_EQ(tg.at("test"), "tg8");
  EXPECT_GT(tg.at("bandwidth_limit_tokens_per_second").get<double>(), 0.0);
  EXPECT_GT(tg.at("fraction_of_limit").get<double>(), 0.0);
  // A shared classifier: every stored weight is read once per token.
  EXPECT_EQ(tg.at("weight_bytes_per_token"), tg.at("weights_bytes"));
  EXPECT_GT(tg.at("kv_bytes_per_token").get<std::uint64_t>(), 0u);
  const auto& pp = results.at(1);
  EXPECT_EQ(pp.at("test"), "pp16");
  EXPECT_TRUE(pp.at("bandwidth_limit_tokens_per_second").is_null());
  EXPECT_TRUE(pp.at("fraction_of_limit").is_null());
  EXPECT_TRUE(tmpdir.empty());
}

TEST(CliBench, PrintsATableForAModelFile) {
  const auto result = run_accord({"bench", "--model", test::stories_model(), "--repetitions", "1", "--threads", "1",
                                  "--decode-tokens", "8", "--prefill-tokens", "16"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* fragment : {"memory bandwidth: ", " GB/s", "| precision | weights MiB | threads | test  |",
                               "| F32       |", "| tg8   |", "| pp16  |", "|                     - |        - |"}) {
    EXPECT_NE(result.output.find(fragment), std::string::npos) << fragment << " in\n" << result.output;
  }
}

TEST(CliBench, RefusesBadRequestsClearly) {
  expect_failure({"bench", "--precision", "q8_0,q8_1"}, 2,
                 "--precision: unknown precision 'q8_1': expected a comma-separated list of bf16, f16, f32, iq4_nl, "
                 "iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0");
  expect_failure({"bench", "--threads", "0"}, 2, "--threads: Value 0 not in range 1 to 1024");
  expect_failure({"bench", "--shape", "7b"}, 2, "--shape: 7b not in");
  expect_failure({"bench", "--model", "/nonexistent/model.gguf"}, 1, "cannot open");
  expect_failure({"bench", "--model", test::stories_model(), "--precision", "f16"}, 2, "excludes");
  expect_failure({"bench", "--model", test::stories_model(), "--decode-tokens", "600", "--repetitions", "1"}, 1,
                 "the model's context is 512");
  // A run that fails after writing its synthetic model removes it too.
  TmpdirInEnvironment tmpdir;
  expect_failure({"bench", "--shape", "15m", "--precision", "q8_0", "--threads", "1", "--prefill-tokens", "300"}, 1,
                 "the model's context is 256");
  EXPECT_TRUE(tmpdir.empty());
  const auto help = run_accord({"bench", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--precision"), std::string::npos) << help.output;
}

}  // namespace
}  // namespace accord
