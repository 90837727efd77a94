// The `accord` command line, run as a user would: golden output, JSON
// fields, help, and a clear non-zero exit for every kind of bad input.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/thread_pool.hpp"
#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using test::run_accord;

// Expects exit code `code` (not a crash) and `fragment` in the output.
void expect_failure(const std::vector<std::string>& args, int code, const std::string& fragment) {
  const auto result = run_accord(args);
  EXPECT_EQ(result.exit_code, code) << result.output;
  EXPECT_NE(result.output.find(fragment), std::string::npos) << "expected '" << fragment << "' in:\n" << result.output;
}

std::vector<std::string> generate_args(const std::string& model, const std::string& tokenizer,
                                       std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"generate", "--model", model, "--tokenizer", tokenizer};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Generation on stories260K with its tokenizer.
std::vector<std::string> generate_args(std::vector<std::string> extra) {
  return generate_args(test::stories_model(), test::stories_tokenizer(), std::move(extra));
}

// The JSON report in a command's output, among warnings and errors.
nlohmann::json report_in(const std::string& output) {
  const auto start = output.find('{');
  return nlohmann::json::parse(output.substr(start, output.find('\n', start) - start));
}

// `generate` of eight greedy tokens of "The cat sat" as JSON, and `extra`.
std::vector<std::string> greedy_json_args(const std::vector<std::string>& extra) {
  std::vector<std::string> all = {"--prompt", "The cat sat", "--temperature", "0", "--max-tokens", "8", "--json"};
  all.insert(all.end(), extra.begin(), extra.end());
  return generate_args(all);
}

// Sets ACCORD_FAULTS for the commands run while it lives.
class FaultsInEnvironment {
 public:
  explicit FaultsInEnvironment(const std::string& plan) { ::setenv("ACCORD_FAULTS", plan.c_str(), 1); }
  ~FaultsInEnvironment() { ::unsetenv("ACCORD_FAULTS"); }
  FaultsInEnvironment(const FaultsInEnvironment&) = delete;
  FaultsInEnvironment& operator=(const FaultsInEnvironment&) = delete;
};

TEST(Cli, GreedyJsonMatchesRunC) {
  for (const auto& c : test::greedy_cases()) {
    const auto result = run_accord(generate_args({"--prompt", c.prompt, "--temperature", "0", "--max-tokens",
                                                  std::to_string(c.generated_tokens.size()), "--json"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto json = nlohmann::json::parse(result.output);
    EXPECT_EQ(json.at("prompt_tokens").get<std::vector<int>>(), c.prompt_tokens);
    EXPECT_EQ(json.at("generated_tokens").get<std::vector<int>>(), c.generated_tokens);
    EXPECT_EQ(json.at("text").get<std::string>(), c.text);
    EXPECT_GT(json.at("prefill_tokens_per_second").get<double>(), 0.0);
    EXPECT_GT(json.at("decode_tokens_per_second").get<double>(), 0.0);
  }
}

TEST(Cli, StreamsTheSameText) {
  const auto c = test::greedy_cases().at(1);
  const auto result = run_accord(generate_args({"--prompt", c.prompt, "--temperature", "0", "--max-tokens",
                                                std::to_string(c.generated_tokens.size()), "--threads", "1"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output.rfind(c.text + "\n", 0), 0u) << result.output;
}

TEST(Cli, EveryCommandHasHelp) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"generate", "--help"}, {"synth", "--help"}}) {
    const auto result = run_accord(args);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("Usage"), std::string::npos) << result.output;
  }
  EXPECT_NE(run_accord({"generate", "--help"}).output.find("--max-tokens"), std::string::npos);
  EXPECT_NE(run_accord({"synth", "--help"}).output.find("--kv-heads"), std::string::npos);
}

TEST(Cli, SynthesisedModelGeneratesWithItsTokenizer) {
  test::TempDir dir;
  const std::string model = dir.file("tiny.bin");
  const auto synth = run_accord({"synth", "--dim", "64", "--hidden", "96", "--layers", "2", "--heads", "4",
                                 "--kv-heads", "2", "--vocab", "320", "--seq", "64", "--seed", "3", "--out", model});
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  const auto result = run_accord(
      {"generate", "--model", model, "--prompt", "hello", "--max-tokens", "5", "--temperature", "0", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_LE(json.at("generated_tokens").size(), 5u);
}

TEST(Cli, RefusesBadModelFiles) {
  test::TempDir dir;
  test::write_bytes(dir.file("garbage.bin"), std::vector<std::byte>(1000, std::byte{0x5A}));
  expect_failure({"generate", "--model", dir.file("garbage.bin"), "--tokenizer", test::stories_tokenizer()}, 1,
                 "accord: error:");
  auto truncated = test::read_bytes(test::stories_model());
  truncated.resize(truncated.size() / 2);
  test::write_bytes(dir.file("truncated.bin"), truncated);
  expect_failure({"generate", "--model", dir.file("truncated.bin"), "--tokenizer", test::stories_tokenizer()}, 1,
                 "truncated");
  expect_failure({"generate", "--model", dir.file("absent.bin")}, 1, "cannot open");
}

TEST(Cli, RefusesMissingOrMismatchedTokenizer) {
  test::TempDir dir;
  const auto bytes = test::read_bytes(test::stories_model());
  test::write_bytes(dir.file("alone.bin"), bytes);
  expect_failure({"generate", "--model", dir.file("alone.bin")}, 1, "no tokenizer given and none found");
  expect_failure(generate_args(test::stories_model(), dir.file("absent-tokenizer.bin")), 1, "cannot open");
  const auto synth = run_accord({"synth", "--dim", "64", "--hidden", "96", "--layers", "1", "--heads", "4",
                                 "--kv-heads", "4", "--vocab", "300", "--seq", "16", "--out", dir.file("s.bin")});
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  expect_failure(generate_args(test::stories_model(), dir.file("s.tokenizer.bin")), 1,
                 "the tokenizer has 300 tokens but the model's vocabulary has 512");
}

// The tokenizer is checked against the model's header before the weights
// are read: with half of the weights missing, the tokenizer is still what
// the error is about.
TEST(Cli, RefusesAMismatchedTokenizerBeforeReadingTheWeights) {
  test::TempDir dir;
  const auto files = test::truncated_model_and_foreign_tokenizer(dir);
  expect_failure(generate_args(files.model, files.tokenizer), 1,
                 "the tokenizer has 300 tokens but the model's vocabulary has 512");
  // A fitting tokenizer lets the load find the damage.
  expect_failure(generate_args(files.model, test::stories_tokenizer()), 1, "truncated");
}

// Non-finite weights are refused at load instead of generating "<unk>"
// over and over.
TEST(Cli, RefusesNonFiniteWeights) {
  test::TempDir dir;
  auto bytes = test::read_bytes(test::stories_model());
  const float nan = NAN;
  std::memcpy(bytes.data() + bytes.size() / 8 * 4, &nan, sizeof nan);  // a float in the middle
  test::write_bytes(dir.file("nan.bin"), bytes);
  expect_failure(generate_args(dir.file("nan.bin"), test::stories_tokenizer()), 1, "holds nan at element");
}

// Formats are told by their magic: a file named .gguf that is not one says
// what it is not.
TEST(Cli, RefusesAFileThatIsNeitherGgufNorLlama2c) {
  test::TempDir dir;
  std::vector<std::byte> bytes(1000, std::byte{0});
  std::memcpy(bytes.data(), "FUGG", 4);
  test::write_bytes(dir.file("x.gguf"), bytes);
  expect_failure({"generate", "--model", dir.file("x.gguf")}, 1,
                 dir.file("x.gguf") +
                     ": not a GGUF file (it starts with \"FUGG\", not \"GGUF\") nor a llama2.c "
                     "checkpoint");
}

TEST(Cli, RefusesBadOptions) {
  expect_failure(generate_args({"--threads", "0"}), 2, "threads");
  // The bound is the int's, printed as such (not a double's 300 digits).
  expect_failure(generate_args({"--phase-timeout-ms", "0"}), 2,
                 "--phase-timeout-ms: Value 0 not in range 1 to 2147483647\n");
  expect_failure(generate_args({"--max-tokens", "many"}), 2, "max-tokens");
  expect_failure(generate_args({"--frobnicate"}), 2, "frobnicate");
  expect_failure({"launch"}, 2, "launch");
  expect_failure({}, 2, "subcommand");
  expect_failure({"generate"}, 2, "--model");
}

// Bad options are command-line errors before the model is opened, not
// checked only once the model has loaded (an exit 1 after a report line of
// 0 tokens), and --max-resident-bytes -1 is refused, not read as 2^64-1:
// the model named does not exist, and the error is still the option's.
TEST(Cli, RefusesBadOptionsBeforeOpeningTheModel) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--max-tokens", "0"}, "--max-tokens: Value 0 not in range 1 to 2147483647"},
      {{"--max-tokens", "-3"}, "--max-tokens: Value -3 not in range 1 to 2147483647"},
      {{"--temperature", "nan"}, "--temperature: expected a finite number >= 0, got 'nan'"},
      {{"--temperature", "-1"}, "--temperature: expected a finite number >= 0, got '-1'"},
      {{"--temperature", "inf"}, "--temperature: expected a finite number >= 0, got 'inf'"},
      {{"--top-p", "0"}, "--top-p: expected a number in (0, 1], got '0'"},
      {{"--top-p", "2"}, "--top-p: expected a number in (0, 1], got '2'"},
      {{"--top-p", "nan"}, "--top-p: expected a number in (0, 1], got 'nan'"},
      {{"--retries", "-5"}, "--retries: Value -5 not in range 0 to 2147483647"},
      {{"--max-resident-bytes", "-1"},
       "--max-resident-bytes: expected a whole number from 0 to 18446744073709551615, got '-1'"},
      {{"--speculative", "lookup"},
       "--speculative: drafts are verified greedily: it needs --temperature 0, got "
       "the default 1"},
      {{"--speculative", "lookup", "--temperature", "0.5"},
       "--speculative: drafts are verified greedily: it needs --temperature 0, got 0.5"},
  };
  test::TempDir dir;
  for (const auto& [options, message] : refused) {
    const auto result = run_accord(generate_args(dir.file("absent.bin"), test::stories_tokenizer(), options));
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find("accord: error: " + message + "\n"), std::string::npos)
        << "expected '" << message << "' in:\n"
        << result.output;
    EXPECT_EQ(result.output.find("prompt tokens"), std::string::npos) << "a report line:\n" << result.output;
    EXPECT_EQ(result.output.find("absent.bin"), std::string::npos) << "the model was opened:\n" << result.output;
  }
  // A node's byte counts, which CLI11 alone also read -1 into 2^64-1.
  for (const std::string option : {"--max-resident-bytes", "--max-frame-bytes"}) {
    expect_failure({"node", "--listen", "127.0.0.1:0", "--model", dir.file("absent.bin"), option, "-1"}, 2,
                   option + ": expected a whole number from 0 to 18446744073709551615, got '-1'");
  }
}

// CLI11 alone reads a negative or too large seed as 2^64-1.
TEST(Cli, RefusesSeedsOutsideZeroToTwoToTheSixtyFourMinusOne) {
  for (const std::string seed : {"-2", "18446744073709551616", "99999999999999999999999", "1.5", "0x10", ""}) {
    expect_failure(
        generate_args({"--seed", seed}), 2,
        "--seed: expected a whole number from 0 to 18446744073709551615, or -1 for a random seed, got '" + seed + "'");
  }
  expect_failure({"synth", "--seed", "-1", "--out", "/nonexistent/x.bin"}, 2, "--seed: expected a whole number");
  const auto largest = run_accord(generate_args({"--seed", "18446744073709551615", "--max-tokens", "2"}));
  EXPECT_EQ(largest.exit_code, 0) << largest.output;
}

// -1 draws a seed at random, as llama-server takes it; the
// report names the seed used, so that the run can be repeated.
TEST(Cli, SeedMinusOneDrawsASeedThatTheReportNames) {
  auto sample = [](const std::string& seed) {
    return run_accord(generate_args({"--prompt", "Once upon a time", "--temperature", "1", "--top-p", "1",
                                     "--max-tokens", "20", "--json", "--seed", seed}));
  };
  const auto first = sample("-1");
  const auto second = sample("-1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const std::uint64_t seed = report_in(first.output).at("seed").get<std::uint64_t>();
  EXPECT_NE(report_in(second.output).at("seed").get<std::uint64_t>(), seed) << "two draws, one seed";
  const auto repeated = sample(std::to_string(seed));
  ASSERT_EQ(repeated.exit_code, 0) << repeated.output;
  EXPECT_EQ(report_in(repeated.output).at("seed").get<std::uint64_t>(), seed);
  EXPECT_EQ(report_in(repeated.output).at("generated_tokens"), report_in(first.output).at("generated_tokens"));
  // Streamed, a drawn seed has a line of its own; a seed given has none.
  const auto streamed = run_accord(generate_args({"--max-tokens", "2", "--seed", "-1"}));
  ASSERT_EQ(streamed.exit_code, 0) << streamed.output;
  EXPECT_NE(streamed.output.find(", drawn at random (--seed "), std::string::npos) << streamed.output;
  const auto given = run_accord(generate_args({"--max-tokens", "2", "--seed", "7"}));
  ASSERT_EQ(given.exit_code, 0) << given.output;
  EXPECT_EQ(given.output.find("drawn at random"), std::string::npos) << given.output;
}

// A FIFO given as the model is refused, not waited on: opening it for
// reading waits for a writer. Every command that opens a model refuses it
// at once.
TEST(Cli, AFifoAsTheModelOrKeyIsRefusedAtOnce) {
  test::TempDir dir;
  const std::string fifo = dir.file("model.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::vector<std::string>> commands = {
      {"generate", "--model", fifo, "--tokenizer", test::stories_tokenizer()},
      {"serve", "--model", fifo, "--tokenizer", test::stories_tokenizer(), "--listen", "127.0.0.1:0"},
      {"node", "--model", fifo, "--listen", "127.0.0.1:0"},
      {"inspect", fifo},
      // Not a model, but opened the same way.
      {"serve", "--model", test::stories_model(), "--api-key-file", fifo, "--listen", "127.0.0.1:0"},
  };
  for (const auto& args : commands) {
    test::CommandResult result{-1, ""};
    EXPECT_TRUE(test::finishes_unaided(fifo, [&] { result = run_accord(args); })) << args[0] << " hung";
    EXPECT_EQ(result.exit_code, 1) << args[0] << ":\n" << result.output;
    EXPECT_NE(result.output.find(fifo + " is not a regular file"), std::string::npos) << args[0] << ":\n"
                                                                                      << result.output;
  }
}

// Below about 1e-37 a logit divided by the temperature overflows a float;
// softmax then saw NaNs and every token was 0 (<unk>).
TEST(Cli, ATemperatureTooSmallToDivideBySamplesGreedily) {
  const auto c = test::greedy_cases().at(1);
  for (const std::string temperature : {"1e-30", "1e-38", "1e-45"}) {
    const auto result = run_accord(generate_args({"--prompt", c.prompt, "--temperature", temperature, "--max-tokens",
                                                  std::to_string(c.generated_tokens.size()), "--json"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(nlohmann::json::parse(result.output).at("generated_tokens").get<std::vector<int>>(), c.generated_tokens)
        << "temperature " << temperature;
  }
}

// 1000 threads on 2 cores took 2 s a token.
TEST(Cli, CapsThreadsAtAFewPerCoreWithAWarning) {
  const int limit = cpu::max_useful_threads();
  if (limit >= 1024) GTEST_SKIP() << "--threads cannot exceed this machine's limit of " << limit;
  const auto result = run_accord(generate_args({"--threads", "1024", "--max-tokens", "2", "--json"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string warning = "accord: warning: --threads 1024 is more than " + std::to_string(cpu::kThreadsPerCore) +
                              " per core of this machine; using " + std::to_string(limit);
  EXPECT_NE(result.output.find(warning), std::string::npos) << result.output;
  EXPECT_EQ(report_in(result.output).at("threads"), limit);
}

// Bytes from the command line or the environment could drive the terminal
// (here: retitle it, clear it) if errors printed them raw.
TEST(Cli, ErrorsEscapeUnprintableBytes) {
  const auto missing_model = [](std::vector<std::string> extra) {
    return generate_args("/nonexistent/model.bin", "/nonexistent/tokenizer.bin", std::move(extra));
  };
  auto expect_escaped = [](const test::CommandResult& result, const std::string& fragment) {
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find(fragment), std::string::npos) << "expected '" << fragment << "' in:\n"
                                                               << result.output;
    EXPECT_EQ(result.output.find('\x1B'), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find('\x07'), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find('\xFF'), std::string::npos) << result.output;
  };
  {
    const FaultsInEnvironment bad("0:Execution\x1B]0;x\x07:error\xFF");
    expect_escaped(run_accord(missing_model({})), "bad fault '0:Execution\\x1B]0'");
  }
  {
    const FaultsInEnvironment bad("0:Exec\x1B[2Jution:err\xFFor");
    expect_escaped(run_accord(missing_model({})), "unknown phase 'Exec\\x1B[2Jution'");
  }
  expect_escaped(run_accord(missing_model({"--fault", "1:Execution:\x1B[2J\xFF"})), "unknown kind '\\x1B[2J\\xFF'");
  expect_escaped(run_accord(missing_model({"--peers", "a:1,\x1B[2J"})), "bad node address '\\x1B[2J'");
  expect_escaped(run_accord({"\x1B]0;x\x07"}), "unknown command '\\x1B]0;x\\x07'");
  expect_escaped(run_accord(generate_args("/nonexistent/\x1B[2J\xFF.bin", "t.bin")), "/nonexistent/\\x1B[2J\\xFF.bin");
  // Printable UTF-8 stays as it is.
  expect_failure(generate_args("/nonexistent/caf\xC3\xA9.bin", "t.bin"), 1, "/nonexistent/caf\xC3\xA9.bin");
}

TEST(Cli, RefusesAPromptPastTheContext) {
  std::string prompt;
  for (int i = 0; i < 300; ++i) prompt += "zq ";
  expect_failure(generate_args({"--prompt", prompt}), 1, "past the model's context of 512 tokens");
  expect_failure(generate_args({"--prompt", "Once upon a time", "--ctx-size", "4"}), 1,
                 "past the model's context of 4 tokens");
  expect_failure(generate_args({"--ctx-size", "0"}), 2, "--ctx-size");
}

TEST(Cli, SynthRefusesImpossibleShapes) {
  test::TempDir dir;
  expect_failure({"synth", "--dim", "66", "--heads", "4", "--out", dir.file("x.bin")}, 1, "not a multiple");
  expect_failure({"synth", "--vocab", "100", "--out", dir.file("x.bin")}, 1, "at least 259");
  expect_failure({"synth", "--layers", "0", "--out", dir.file("x.bin")}, 1, "n_layers is 0");
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

TEST(Cli, PromptCacheIsSavedThenHitThenRejectedWhenCorrupt) {
  test::TempDir dir;
  const std::string cache = dir.file("cache");
  const auto args = generate_args(
      {"--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "20", "--prompt-cache", cache, "--json"});
  auto run = [&] {
    const auto result = run_accord(args);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return result;
  };
  const auto first = nlohmann::json::parse(run().output);
  EXPECT_EQ(first.at("prompt_cache"), "saved");
  EXPECT_EQ(first.at("prompt_cache_tokens_reused"), 0);

  const auto second = nlohmann::json::parse(run().output);
  EXPECT_EQ(second.at("prompt_cache"), "hit");
  EXPECT_EQ(second.at("prompt_cache_tokens_reused"), 4);  // BOS and three of the prompt's four tokens
  EXPECT_EQ(second.at("generated_tokens"), first.at("generated_tokens"));
  EXPECT_EQ(second.at("text"), first.at("text"));

  // Corrupt the shard: the run warns, prefills cold and prints the same.
  std::ifstream current(cache + "/rank-00/CURRENT");
  std::string generation;
  std::getline(current, generation);
  const std::string shard = cache + "/rank-00/generations/" + generation + "/kv.bin";
  auto bytes = test::read_bytes(shard);
  bytes[3] ^= std::byte{0x10};
  test::write_bytes(shard, bytes);
  const auto result = run_accord(args);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("accord: warning: prompt cache rejected"), std::string::npos) << result.output;
  const auto third = nlohmann::json::parse(result.output.substr(result.output.find('{')));
  EXPECT_EQ(third.at("prompt_cache"), "rejected");
  EXPECT_NE(third.at("prompt_cache_reason").get<std::string>().find("corrupted"), std::string::npos);
  EXPECT_EQ(third.at("generated_tokens"), first.at("generated_tokens"));
  // A rejected cache is left alone for inspection, not overwritten.
  EXPECT_EQ(test::read_bytes(shard), bytes);
}

TEST(Cli, JsonCarriesTheSessionReportOnOneRankOrSeveral) {
  for (const std::string ranks : {"1", "2"}) {
    const auto result = run_accord(generate_args(
        {"--prompt", "The cat sat", "--temperature", "0", "--max-tokens", "3", "--ranks", ranks, "--json"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto report = nlohmann::json::parse(result.output).at("report");
    EXPECT_EQ(report.at("position"), 8) << ranks;  // 6 prompt tokens + 2 decode steps
    EXPECT_EQ(report.at("last_outcome"), "committed");
    EXPECT_EQ(report.at("weights_bytes"), 1040128);
    EXPECT_EQ(report.at("weight_shares").size(), std::stoul(ranks));
    EXPECT_EQ(report.at("state_digest").get<std::string>().size(), 32u);
    EXPECT_EQ(report.at("kv_bytes_capacity"), 512 * 5 * 32 * 2 * 4) << "every rank's together";
  }
}

TEST(Cli, ABudgetOfResidentWeightsKeepsTheTokensAndTooSmallABudgetIsAClearError) {
  const auto resident = run_accord(greedy_json_args({}));
  ASSERT_EQ(resident.exit_code, 0) << resident.output;
  for (const std::string ranks : {"1", "2"}) {
    const auto layered = run_accord(greedy_json_args({"--max-resident-bytes", "500000", "--ranks", ranks}));
    ASSERT_EQ(layered.exit_code, 0) << layered.output;
    const auto json = nlohmann::json::parse(layered.output);
    EXPECT_EQ(json.at("generated_tokens"), nlohmann::json::parse(resident.output).at("generated_tokens")) << ranks;
    EXPECT_EQ(json.at("report").at("weights_residency"), "layered") << ranks;
    for (const auto& share : json.at("report").at("weight_shares")) EXPECT_EQ(share.at("budget_bytes"), 500000);
  }
  const auto refused = run_accord(greedy_json_args({"--max-resident-bytes", "1000"}));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.output.find("--max-resident-bytes 1000 is too small"), std::string::npos) << refused.output;
}

TEST(Cli, TheCpuBackendIsTheDefaultAndCudaWithoutADeviceIsAClearError) {
  const auto plain = run_accord(greedy_json_args({}));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto cpu = run_accord(greedy_json_args({"--backend", "cpu"}));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_EQ(nlohmann::json::parse(cpu.output).at("generated_tokens"),
            nlohmann::json::parse(plain.output).at("generated_tokens"));

  const auto says_why_not = [](const std::string& output) {
    return output.find("no CUDA device") != std::string::npos ||
           output.find("no usable CUDA device") != std::string::npos ||
           output.find("built without CUDA") != std::string::npos;
  };
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // no device, on a machine with a GPU too
  for (const std::string ranks : {"1", "2"}) {
    const auto cuda = run_accord(greedy_json_args({"--backend", "cuda", "--ranks", ranks}));
    EXPECT_EQ(cuda.exit_code, 1) << cuda.output;
    EXPECT_TRUE(says_why_not(cuda.output)) << cuda.output;
  }
  const auto node =
      run_accord({"node", "--listen", "127.0.0.1:0", "--model", test::stories_model(), "--backend", "cuda"});
  EXPECT_EQ(node.exit_code, 1) << node.output;
  EXPECT_TRUE(says_why_not(node.output)) << node.output;
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  const auto devices_on_cpu = run_accord(greedy_json_args({"--devices", "0"}));
  EXPECT_EQ(devices_on_cpu.exit_code, 1);
  EXPECT_NE(devices_on_cpu.output.find("--devices needs --backend cuda"), std::string::npos) << devices_on_cpu.output;
  const auto unknown = run_accord(greedy_json_args({"--backend", "gpu"}));
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("--backend"), std::string::npos) << unknown.output;
}

TEST(Cli, SeveralRanksGiveRunCsTokens) {
  for (const auto& c : test::greedy_cases()) {
    for (int ranks = 2; ranks <= 3; ++ranks) {
      const auto result = run_accord(
          generate_args({"--prompt", c.prompt, "--temperature", "0", "--max-tokens",
                         std::to_string(c.generated_tokens.size()), "--ranks", std::to_string(ranks), "--json"}));
      ASSERT_EQ(result.exit_code, 0) << result.output;
      const auto json = nlohmann::json::parse(result.output);
      EXPECT_EQ(json.at("generated_tokens").get<std::vector<int>>(), c.generated_tokens);
      EXPECT_EQ(json.at("text").get<std::string>(), c.text);
      EXPECT_EQ(json.at("ranks"), ranks);
      // Every generation step runs 2 boundary phases per route and 7 others
      // (SamplingSynchronization among them).
      const auto steps = c.generated_tokens.size();
      EXPECT_EQ(json.at("phases_run").get<std::size_t>(), steps * (2 * static_cast<std::size_t>(ranks - 1) + 7));
      EXPECT_GE(json.at("protocol_us_per_token").get<double>(), 0.0);
    }
  }
}

TEST(Cli, SeveralRanksSampleAsOneRankDoes) {
  const std::vector<std::string> sampled = {
      "--prompt", "Once upon a time", "--temperature", "0.9", "--top-p", "0.9", "--seed", "42", "--max-tokens", "30",
      "--json"};
  const auto one = run_accord(generate_args(sampled));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto expected = nlohmann::json::parse(one.output).at("generated_tokens").get<std::vector<int>>();
  for (const std::string ranks : {"1", "2", "3"}) {
    auto args = sampled;
    args.insert(args.end(), {"--ranks", ranks});
    const auto result = run_accord(generate_args(args));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(nlohmann::json::parse(result.output).at("generated_tokens").get<std::vector<int>>(), expected)
        << ranks << " ranks";
  }
}

TEST(Cli, PromptCacheOnTwoRanksIsSavedThenHitAndRefusedOnThree) {
  test::TempDir dir;
  const std::string cache = dir.file("cache");
  auto run = [&](const std::string& ranks, bool with_cache) {
    std::vector<std::string> extra = {"--prompt", "Once upon a time", "--temperature", "0",     "--max-tokens",
                                      "20",       "--ranks",          ranks,           "--json"};
    if (with_cache) extra.insert(extra.end(), {"--prompt-cache", cache});
    const auto result = run_accord(generate_args(extra));
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return nlohmann::json::parse(result.output.substr(result.output.find('{')));
  };
  const auto uncached = run("2", false);
  const auto first = run("2", true);
  EXPECT_EQ(first.at("prompt_cache"), "saved");
  EXPECT_TRUE(std::filesystem::exists(cache + "/rank-01/CURRENT"));
  const auto second = run("2", true);
  EXPECT_EQ(second.at("prompt_cache"), "hit");
  EXPECT_EQ(second.at("prompt_cache_tokens_reused"), 4);
  for (const auto* json : {&first, &second}) {
    EXPECT_EQ(json->at("text"), uncached.at("text"));
    EXPECT_EQ(json->at("generated_tokens"), uncached.at("generated_tokens"));
  }
  const auto three = run("3", true);
  EXPECT_EQ(three.at("prompt_cache"), "rejected");
  EXPECT_NE(three.at("prompt_cache_reason")
                .get<std::string>()
                .find("the cache was saved with 2 rank(s); this session has 3 rank(s)"),
            std::string::npos)
      << three.at("prompt_cache_reason");
  EXPECT_EQ(three.at("text"), uncached.at("text"));
}

TEST(Cli, RefusesRanksTheModelCannotHold) {
  const std::vector<std::string> base = {
      "generate", "--model", test::stories_model(), "--tokenizer", test::stories_tokenizer(), "--max-tokens", "2"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_accord(args);
  };
  const auto too_many = with({"--ranks", "6"});
  EXPECT_EQ(too_many.exit_code, 1) << too_many.output;
  EXPECT_NE(too_many.output.find("cannot split 5 units over 6 ranks"), std::string::npos) << too_many.output;
  EXPECT_EQ(with({"--ranks", "0"}).exit_code, 2);
}

TEST(Cli, RefusesBadFaultsBeforeLoadingTheModel) {
  const auto missing_model = [](std::vector<std::string> extra) {
    return generate_args("/nonexistent/model.bin", "/nonexistent/tokenizer.bin", std::move(extra));
  };
  expect_failure(missing_model({"--fault", "1:Execution"}), 2, "bad fault '1:Execution': it has 2 fields");
  expect_failure(missing_model({"--fault", "0:Execution:error", "--fault", "1:Nowhere:error"}), 2,
                 "bad fault '1:Nowhere:error': unknown phase 'Nowhere'");
  expect_failure(missing_model({"--fault", "0:Execution:error:0"}), 2, "the occurrence is a number from 1");
  expect_failure(missing_model({"--fault", "5:Execution:error", "--ranks", "3"}), 1,
                 "names rank 5 but the session has 3 rank(s)");
  const FaultsInEnvironment bad("0:Execution:oops");
  expect_failure(missing_model({}), 1, "ACCORD_FAULTS: bad fault '0:Execution:oops': unknown kind 'oops'");
}

TEST(Cli, JsonCountsNoRetriesWithoutFaults) {
  const auto result = run_accord(generate_args({"--prompt", "The cat sat", "--max-tokens", "3", "--json"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json.at("aborted_steps"), 0);
  EXPECT_EQ(json.at("retries"), 0);
  EXPECT_EQ(json.at("poisoned"), false);
  EXPECT_EQ(json.at("poison_cause"), "");
  EXPECT_FALSE(json.contains("error"));
}

// A fault plan needs rank actors to inject into, so one rank runs as a
// distributed session (phases_run, no single-rank report). The faults here
// never fire: the runs are too short to reach them.
TEST(Cli, AFaultPlanRunsOneRankAsActors) {
  const auto args = generate_args({"--prompt", "The cat sat", "--temperature", "0", "--max-tokens", "3", "--json"});
  const auto plain = run_accord(args);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto with_flag = args;
  with_flag.insert(with_flag.end(), {"--fault", "0:Execution:error:1000", "--phase-timeout-ms", "20000"});
  const auto flagged = run_accord(with_flag);
  const FaultsInEnvironment environment("0:OutputPublication:error:1000");
  const auto from_environment = run_accord(args);
  for (const auto* result : {&flagged, &from_environment}) {
    ASSERT_EQ(result->exit_code, 0) << result->output;
    const auto json = nlohmann::json::parse(result->output);
    EXPECT_EQ(json.at("ranks"), 1);
    EXPECT_TRUE(json.contains("phases_run"));
    EXPECT_EQ(json.at("report").at("position"), nlohmann::json::parse(plain.output).at("report").at("position"));
    EXPECT_EQ(json.at("text"), nlohmann::json::parse(plain.output).at("text"));
  }
}

// needs fault injection in the actors. The first fault fires in the
// prefill; the second in a decode step the coordinator began before the
// generator asked for it (a chained step), whose abort waits for it.
TEST(Cli, AnInjectedErrorIsRetriedAndGivesTheSameText) {
  const auto args = generate_args(
      {"--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "20", "--ranks", "3", "--json"});
  const auto plain = run_accord(args);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  for (const std::string fault : {"1:Execution:error", "1:Execution:error:6"}) {
    auto faulted_args = args;
    faulted_args.insert(faulted_args.end(), {"--fault", fault});
    const auto faulted = run_accord(faulted_args);
    ASSERT_EQ(faulted.exit_code, 0) << faulted.output;
    const auto json = report_in(faulted.output);
    EXPECT_EQ(json.at("aborted_steps"), 1) << fault;
    EXPECT_EQ(json.at("retries"), 1) << fault;
    EXPECT_EQ(json.at("poisoned"), false) << fault;
    EXPECT_EQ(json.at("text"), nlohmann::json::parse(plain.output).at("text")) << fault;
    EXPECT_EQ(json.at("generated_tokens"), nlohmann::json::parse(plain.output).at("generated_tokens")) << fault;
  }
}

// needs fault injection in the actors
TEST(Cli, AStepOutOfRetriesFailsWithAJsonReport) {
  const auto result =
      run_accord(generate_args({"--prompt", "Once upon a time", "--max-tokens", "5", "--ranks", "2", "--retries", "1",
                                "--fault", "1:Execution:error:1", "--fault", "1:Execution:error:2", "--json"}));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("accord: error: transaction aborted"), std::string::npos) << result.output;
  const auto json = report_in(result.output);
  EXPECT_EQ(json.at("aborted_steps"), 2);
  EXPECT_EQ(json.at("retries"), 1);
  EXPECT_EQ(json.at("poisoned"), false);
  EXPECT_EQ(json.at("stop_reason"), "error");
  EXPECT_NE(json.at("error").get<std::string>().find("transaction aborted"), std::string::npos);
}

// needs fault injection in the actors
TEST(Cli, APoisonedSessionFailsAtOnceWithAJsonReport) {
  const auto result = run_accord(generate_args({"--prompt", "Once upon a time", "--max-tokens", "5", "--ranks", "2",
                                                "--fault", "1:Execution:exit", "--heal-attempts", "0", "--json"}));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  const auto json = report_in(result.output);
  EXPECT_EQ(json.at("poisoned"), true);
  EXPECT_FALSE(json.at("poison_cause").get<std::string>().empty());
  EXPECT_EQ(json.at("retries"), 0);
  EXPECT_NE(json.at("error").get<std::string>().find("poisoned"), std::string::npos);
}

TEST(Cli, ALostRankHealsAndTheJsonCountsIt) {
  const std::vector<std::string> args = {
      "--prompt", "Once upon a time", "--max-tokens", "12", "--ranks", "3", "--temperature", "0", "--json"};
  const auto plain = run_accord(generate_args(args));
  auto faulted_args = args;
  faulted_args.insert(faulted_args.end(), {"--fault", "2:Commit:exit:4"});
  const auto healed = run_accord(generate_args(faulted_args));
  ASSERT_EQ(healed.exit_code, 0) << healed.output;
  const auto json = report_in(healed.output);
  EXPECT_EQ(json.at("generated_tokens"), report_in(plain.output).at("generated_tokens"));
  EXPECT_EQ(json.at("heals"), 1);
  EXPECT_EQ(json.at("heal_attempts"), 1);
  EXPECT_GT(json.at("replayed_tokens").get<int>(), 0);
  EXPECT_GT(json.at("heal_seconds").get<double>(), 0.0);
  EXPECT_NE(healed.output.find("warning: healed: 1 rank(s) started afresh"), std::string::npos) << healed.output;
}

// --- speculative decoding ---------------------------------------------------

TEST(Cli, SpeculativeDecodingGivesRunCsTokensAndReportsAcceptance) {
  const auto c = test::greedy_cases().at(1);
  for (const std::string& spec : std::vector<std::string>{"lookup", "model:" + test::stories_model()}) {
    for (const std::string ranks : {"1", "3"}) {
      const auto result = run_accord(generate_args({"--prompt", c.prompt, "--temperature", "0", "--max-tokens",
                                                    std::to_string(c.generated_tokens.size()), "--speculative", spec,
                                                    "--draft-tokens", "3", "--ranks", ranks, "--json"}));
      ASSERT_EQ(result.exit_code, 0) << result.output;
      const auto json = nlohmann::json::parse(result.output);
      EXPECT_EQ(json.at("generated_tokens").get<std::vector<int>>(), c.generated_tokens) << spec << ", " << ranks;
      EXPECT_EQ(json.at("text").get<std::string>(), c.text);
      EXPECT_EQ(json.at("speculative"), spec);
      EXPECT_EQ(json.at("draft_tokens"), 3);
      const int drafted = json.at("drafted_tokens").get<int>();
      const int accepted = json.at("accepted_tokens").get<int>();
      EXPECT_GT(drafted, 0);
      EXPECT_LE(accepted, drafted);
      EXPECT_DOUBLE_EQ(json.at("acceptance_rate").get<double>(), static_cast<double>(accepted) / drafted);
      // Every decode step produced greedy's token and the draft tokens it kept.
      EXPECT_EQ(json.at("decode_steps").get<int>() + accepted, static_cast<int>(c.generated_tokens.size()) - 1);
    }
  }
}

TEST(Cli, SpeculativeDecodingRefusesBadOptions) {
  expect_failure(generate_args({"--speculative", "ngram"}), 2, "expected `lookup` or `model:PATH`");
  expect_failure(generate_args({"--speculative", "model:"}), 2, "expected `lookup` or `model:PATH`");
  expect_failure(generate_args({"--speculative", "lookup", "--draft-tokens", "0"}), 2, "--draft-tokens");
  expect_failure(generate_args({"--draft-tokens", "4"}), 2, "--draft-tokens requires --speculative");
  expect_failure(generate_args({"--speculative", "lookup"}), 2, "it needs --temperature 0");
  expect_failure(generate_args({"--speculative", "model:/nonexistent/draft.bin", "--temperature", "0"}), 1,
                 "the draft model");
  const test::TempDir dir;
  const std::string draft = dir.file("draft.bin");
  const auto synth = run_accord({"synth", "--out", draft, "--vocab", "300"});
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  expect_failure(generate_args({"--speculative", "model:" + draft, "--temperature", "0"}), 1,
                 "the draft model's vocabulary has 300 tokens but the target's has 512");
}

// needs fault injection in the actors
TEST(Cli, SpeculativeGenerationRecoversFromARankThatExits) {
  const auto c = test::greedy_cases().at(1);
  const auto result = run_accord(
      generate_args({"--prompt", c.prompt, "--temperature", "0", "--max-tokens",
                     std::to_string(c.generated_tokens.size()), "--speculative", "model:" + test::stories_model(),
                     "--ranks", "3", "--fault", "1:PredictionExtensionExecution:exit:2", "--json"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json.at("generated_tokens").get<std::vector<int>>(), c.generated_tokens);
  EXPECT_EQ(json.at("recoveries"), 1);
  EXPECT_EQ(json.at("retries"), 1);
}

}  // namespace
}  // namespace accord
