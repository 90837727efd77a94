// The architectures and types of docs/models.md against llama.cpp. The
// model zoo's F32 originals (shared/models/zoo; the ZooF32Models ctest
// fixture writes them into the build folder) and its quantized files
// generate three prompts' 64 greedy tokens on one rank and on three, and
// each must equal llama.cpp's (shared/reference/zoo-f32.json, zoo.json) up
// to the first step whose top-2 logit margin is under 0.02, where two
// correct engines may pick differently. The mixture-of-experts files
// (Mixtral's llama with experts, qwen3moe) also give every row the same
// bits whatever the batch and the threads, and damaged experts are refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "actors/distributed_session.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/drafter.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "runtime/text/tokenizer.hpp"
#include "tests/node_process.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

// Below this top-2 margin llama.cpp's own choice is a near tie (the zoo's
// README, reference/README.md).
constexpr float kTieMargin = 0.02f;

std::filesystem::path zoo_model(const std::string& file) { return test::zoo_f32_dir() / file; }

struct ZooCase {
  std::vector<int> prompt_tokens;
  std::vector<int> generated_tokens;
  std::vector<float> margins;
};

// shared/reference/zoo-f32.json (the F32 originals) or zoo.json (the zoo's files).
std::filesystem::path shared_reference(const std::string& name) { return test::shared_dir() / "reference" / name; }

// `path`: a reference file (shared_reference, or tests/zoo's).
std::vector<ZooCase> reference_cases(const std::string& file, const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "missing " << path;
  if (!in) return {};
  const auto json = nlohmann::json::parse(in);
  std::vector<ZooCase> cases;
  for (const auto& c : json.at(file).at("cases")) {
    cases.push_back({c.at("prompt_tokens").get<std::vector<int>>(), c.at("generated_tokens").get<std::vector<int>>(),
                     c.at("logprob_margins").get<std::vector<float>>()});
  }
  return cases;
}

// The steps that must match: those before the first near tie.
std::size_t decisive_steps(const ZooCase& c) {
  std::size_t steps = 0;
  while (steps < c.margins.size() && c.margins[steps] >= kTieMargin) ++steps;
  return steps;
}

// `count` greedy tokens after `prompt` on either kind of session.
template <class AnySession>
std::vector<int> greedy_tokens(AnySession& session, const std::vector<int>& prompt, std::size_t count) {
  std::vector<int> tokens;
  auto step = session.prefill(prompt);
  while (step && !step->logits.empty()) {
    tokens.push_back(argmax(step->logits));
    if (tokens.size() == count) break;
    step = session.decode(tokens.back());
  }
  EXPECT_TRUE(step) << step.error().message();
  return tokens;
}

// How many tokens agree with the reference from the start.
std::size_t agreeing(const std::vector<int>& tokens, const std::vector<int>& reference) {
  std::size_t n = 0;
  while (n < tokens.size() && n < reference.size() && tokens[n] == reference[n]) ++n;
  return n;
}

// `floor`: the steps that must agree where fewer than the decisive ones
// do today (ZooQuantized).
void expect_matches(const std::vector<int>& tokens, const ZooCase& c, const std::string& what, std::size_t floor) {
  const std::size_t decisive = decisive_steps(c), equal = agreeing(tokens, c.generated_tokens);
  std::printf("[ zoo      ] %s: %zu of %zu tokens equal llama.cpp's; first margin under %.2f at step %zu\n",
              what.c_str(), equal, c.generated_tokens.size(), kTieMargin, decisive);
  if (equal < std::min(decisive, floor)) {
    ADD_FAILURE() << what << ": step " << equal << " gives token "
                  << (equal < tokens.size() ? std::to_string(tokens[equal]) : "none") << ", llama.cpp "
                  << c.generated_tokens[equal] << " with a margin of " << c.margins[equal];
  }
}

// Steps of each of a file's three prompts that must agree with llama.cpp's.
using Floors = std::array<std::size_t, 3>;
constexpr Floors kEveryStep = {64, 64, 64};

// The three prompts of `file` (at `path`) on one rank and on three, each
// against llama.cpp's tokens in `reference`; three ranks give one rank's
// tokens exactly.
void expect_greedy_tokens_of_llama_cpp(const std::filesystem::path& path, const std::string& file,
                                       const std::filesystem::path& reference, cpu::ThreadPool& pool,
                                       const Floors& floors = kEveryStep) {
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing";
  auto model = Model::load(path.string());
  ASSERT_TRUE(model) << model.error().message();
  const auto cases = reference_cases(file, reference);
  ASSERT_EQ(cases.size(), 3u);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ZooCase& c = cases[i];
    Session one(*model, pool);
    const auto alone = greedy_tokens(one, c.prompt_tokens, c.generated_tokens.size());
    expect_matches(alone, c, file + " prompt " + std::to_string(i) + ", 1 rank", floors[i]);
    DistributedOptions options;
    options.ranks = 3;
    auto three = DistributedSession::create(*model, options);
    ASSERT_TRUE(three) << three.error().message();
    EXPECT_EQ(greedy_tokens(**three, c.prompt_tokens, c.generated_tokens.size()), alone)
        << file << " prompt " << i << ": 3 ranks";
  }
}

class ZooF32 : public testing::TestWithParam<const char*> {
 protected:
  cpu::ThreadPool pool_{2};
};

TEST_P(ZooF32, GreedyTokensMatchLlamaCppOnOneAndThreeRanks) {
  expect_greedy_tokens_of_llama_cpp(zoo_model(GetParam()), GetParam(), shared_reference("zoo-f32.json"), pool_);
}

// Three ranks that each load only their share (as node processes do; the
// rest of the file is confined away) digest the whole model's tensors and,
// run one after another, compute its logits bit for bit.
TEST_P(ZooF32, ShardsOfThreeRanksMakeTheWholeModel) {
  const auto path = zoo_model(GetParam()).string();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: the ZooF32Models test writes it";
  auto whole = Model::load(path);
  ASSERT_TRUE(whole) << whole.error().message();
  const ModelConfig& c = whole->config();
  const Partition partition = Partition::balanced(c.n_layers, 3).value();
  const std::vector<int> prompt = {1, 450, 4996, 17354, 1701, 29916};
  Transformer reference(*whole, pool_);
  KvCache cache(c, 0, c.n_layers);
  const auto expected = test::to_vector(*reference.forward(prompt, 0, cache));
  std::vector<std::string> digests(digest_count(c));
  std::vector<float> hidden;
  for (int r = 0; r < 3; ++r) {
    const WeightScope scope = partition.scope(r);
    auto shard = Model::load(path, {scope, 1});
    ASSERT_TRUE(shard) << shard.error().message();
    EXPECT_FALSE(merge_digests(digests, shard->tensor_digests())) << "two ranks disagree on a tensor they share";
    Transformer stage(*shard, pool_);
    KvCache shard_cache(c, scope.first_unit, scope.units);
    ASSERT_TRUE(shard_cache.reserve(static_cast<int>(prompt.size())));
    if (r == 0) {
      stage.embed(prompt);
    } else {
      stage.load_hidden(hidden);
    }
    for (int unit = scope.first_unit; unit < scope.first_unit + scope.units; ++unit)
      stage.run_unit(unit, 0, shard_cache);
    hidden = test::to_vector(stage.hidden());
    if (r == 2) {
      EXPECT_TRUE(test::bit_identical(stage.head(Transformer::Rows::last), expected));
    }
  }
  EXPECT_EQ(digests, whole->tensor_digests());
  EXPECT_EQ(combine_identity(c, digests).value(), whole->identity());
}

// The architectures' own kernels (NeoX RoPE, windows, GELU, head norms)
// keep accord's promise: every CPU path computes the same bits.
TEST_P(ZooF32, EveryCpuPathGivesBitIdenticalLogits) {
  const auto path = zoo_model(GetParam()).string();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: the ZooF32Models test writes it";
  auto model = Model::load(path);
  ASSERT_TRUE(model) << model.error().message();
  const std::vector<int> prompt = {
      1,     450,   4996,  17354, 1701, 29916, 432,   17204, 975,  278,
      17366, 11203, 29889, 13,    1576, 4996,  17354, 1701,  29916};  // longer than gemma3's window
  std::vector<float> portable;
  {
    test::CpuPathScope scope(cpu::Isa::portable);
    ASSERT_TRUE(scope.ok());
    Session session(*model, pool_);
    portable = test::greedy_trace(session, prompt, 4);
  }
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512}) {
    test::CpuPathScope scope(isa);
    if (!scope.ok()) continue;
    Session session(*model, pool_);
    EXPECT_TRUE(test::bit_identical(test::greedy_trace(session, prompt, 4), portable)) << cpu::to_string(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ZooF32,
                         testing::Values("llama3-f32.gguf", "qwen2-f32.gguf", "qwen3-f32.gguf", "gemma3-f32.gguf",
                                         "phi3-f32.gguf", "mixtral-f32.gguf", "qwen3moe-f32.gguf"));

// The CUDA forward pass is dense Llama's alone: make_stage names what it
// refuses, whether or not this build has CUDA.
TEST(ZooF32Refusals, CudaBackendRefusesOtherArchitecturesAndExpertsByName) {
  for (const auto& [file, named] :
       {std::pair{"qwen3-f32.gguf", "'qwen3'"}, std::pair{"mixtral-f32.gguf", "mixture-of-experts"}}) {
    const auto path = zoo_model(file);
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: the ZooF32Models test writes it";
    auto model = Model::load(path.string());
    ASSERT_TRUE(model) << model.error().message();
    cpu::ThreadPool pool(1);
    StageOptions cuda;
    cuda.backend.kind = BackendChoice::Kind::cuda;
    auto stage = make_stage(*model, pool, WeightScope::everything(), cuda, 0);
    ASSERT_FALSE(stage) << file;
    EXPECT_EQ(stage.error().code(), ErrorCode::architecture);
    EXPECT_NE(stage.error().message().find(named), std::string::npos) << stage.error().message();
  }
}

// The zoo's own files, as people download them: the same architectures in
// the types llama-quantize writes (shared/models/zoo), against llama.cpp's
// tokens for each file (reference/zoo.json). They compute llama.cpp's
// bits for one token (docs/models.md); llama.cpp's prompt rows, which its
// batch kernels compute, part in the last bits, so three prompts part
// before the first near tie, and the floor there is the step they reach,
// so that it can only rise.
struct QuantizedFile {
  const char* file;
  Floors floors;
};

void PrintTo(const QuantizedFile& q, std::ostream* out) { *out << q.file; }

class ZooQuantized : public testing::TestWithParam<QuantizedFile> {
 protected:
  cpu::ThreadPool pool_{2};
};

TEST_P(ZooQuantized, GreedyTokensMatchLlamaCppOnOneAndThreeRanks) {
  const QuantizedFile& q = GetParam();
  expect_greedy_tokens_of_llama_cpp(test::shared_dir() / "models" / "zoo" / q.file, q.file,
                                    shared_reference("zoo.json"), pool_, q.floors);
}

INSTANTIATE_TEST_SUITE_P(
    Files, ZooQuantized,
    testing::Values(QuantizedFile{"llama3-Q4_K_M.gguf", kEveryStep}, QuantizedFile{"llama3-Q5_K_M.gguf", kEveryStep},
                    QuantizedFile{"llama3-Q6_K.gguf", {64, 51, 64}}, QuantizedFile{"llama3-Q3_K_M.gguf", kEveryStep},
                    QuantizedFile{"llama3-Q2_K.gguf", kEveryStep}, QuantizedFile{"llama3-IQ4_XS.gguf", kEveryStep},
                    QuantizedFile{"llama3-BF16.gguf", kEveryStep}, QuantizedFile{"qwen2-Q4_K_M.gguf", kEveryStep},
                    QuantizedFile{"qwen3-Q4_K_M.gguf", {24, 64, 64}}, QuantizedFile{"gemma3-Q4_K_M.gguf", kEveryStep},
                    QuantizedFile{"phi3-Q4_K_M.gguf", {64, 23, 64}}, QuantizedFile{"mixtral-Q4_K_M.gguf", kEveryStep},
                    QuantizedFile{"qwen3moe-Q4_K_M.gguf", {29, 25, 22}}));

// The rest of the engine on each architecture and type: speculative
// decoding (the file as its own draft, so verification steps of five rows)
// and the prompt cache (saved, then hit) give plain greedy decoding's
// tokens, and so does the file's own tokenizer end to end.
TEST_P(ZooQuantized, SpeculativeDecodingAndThePromptCacheGiveGreedysTokens) {
  const auto path = (test::shared_dir() / "models" / "zoo" / GetParam().file).string();
  auto model = Model::load(path);
  ASSERT_TRUE(model) << model.error().message();
  auto tokenizer = Tokenizer::load(path);
  ASSERT_TRUE(tokenizer) << tokenizer.error().message();
  const std::string prompt = "The quick brown fox jumps over the lazy dog";
  GenerationOptions options;
  options.max_tokens = 24;
  options.sampler.temperature = 0.0f;
  const auto run = [&](const GenerationOptions& o) {
    Session session(*model, pool_);
    auto result = generate(session, *tokenizer, prompt, o);
    EXPECT_TRUE(result) << result.error().message();
    return result ? *result : GenerationResult{};
  };
  const GenerationResult plain = run(options);
  ASSERT_FALSE(plain.generated_tokens.empty());
  ModelDrafter drafter(*model, 1);
  GenerationOptions speculative = options;
  speculative.drafter = &drafter;
  const GenerationResult drafted = run(speculative);
  EXPECT_EQ(drafted.generated_tokens, plain.generated_tokens) << "speculative decoding";
  EXPECT_EQ(drafted.accepted_tokens, drafted.drafted_tokens) << "the file as its own draft";
  test::TempDir cache;
  GenerationOptions cached = options;
  cached.prompt_cache = cache.path();
  const GenerationResult saved = run(cached);
  EXPECT_EQ(saved.prompt_cache, PromptCacheOutcome::saved);
  EXPECT_EQ(saved.generated_tokens, plain.generated_tokens) << "saving the prompt cache";
  const GenerationResult hit = run(cached);
  EXPECT_EQ(hit.prompt_cache, PromptCacheOutcome::hit);
  EXPECT_EQ(hit.generated_tokens, plain.generated_tokens) << "from the prompt cache";
}

// Q4_1, Q5_0, Q5_1 and IQ4_NL, of which the zoo has no files: `accord
// convert` writes llama3's F32 original as llama-quantize does (bytes
// checked by LegacyQuantZooF32), against llama.cpp's tokens for
// llama-quantize's file (tests/zoo/llama3-legacy-quants.json). Floors as
// ZooQuantized's: these random models part at margins up to 0.52 on
// rounding alone (the activations' scale as an f16 and rounding to even,
// as ggml's x86 quantize_row_q8_0 does, moved Q5_0 from {2, 0, 2} to
// {2, 64, 64} and IQ4_NL from {28, 64, 5} to {55, 4, 64}, before the rest
// of the forward pass took ggml's arithmetic).
class ZooF32Converted : public testing::TestWithParam<QuantizedFile> {
 protected:
  cpu::ThreadPool pool_{2};
};

TEST_P(ZooF32Converted, GreedyTokensMatchLlamaCppOnOneAndThreeRanks) {
  const QuantizedFile& q = GetParam();
  const std::filesystem::path references =
      std::filesystem::path(ACCORD_TESTS_DIR) / "zoo" / "llama3-legacy-quants.json";
  std::ifstream in(references);
  ASSERT_TRUE(in) << "missing " << references;
  const std::string type = nlohmann::json::parse(in).at(q.file).at("convert_type");
  test::TempDir dir;
  const auto result = test::run_accord(
      {"convert", "--in", zoo_model("llama3-f32.gguf").string(), "--out", dir.file(q.file), "--type", type});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  expect_greedy_tokens_of_llama_cpp(dir.file(q.file), q.file, references, pool_, q.floors);
}

INSTANTIATE_TEST_SUITE_P(Files, ZooF32Converted,
                         testing::Values(QuantizedFile{"llama3-Q4_1.gguf", {12, 64, 64}},
                                         QuantizedFile{"llama3-Q5_0.gguf", {17, 0, 2}},
                                         QuantizedFile{"llama3-Q5_1.gguf", {60, 52, 64}},
                                         QuantizedFile{"llama3-IQ4_NL.gguf", {28, 2, 5}}));

// A routed feed-forward groups a batch's rows by expert; every row still
// gets the bits it gets alone, on one thread or two.
class ZooMixtureOfExperts : public testing::TestWithParam<const char*> {};

// Every row's logits of `prompt` run as one batch.
std::vector<float> batched_logits(const Model& model, cpu::ThreadPool& pool, const std::vector<int>& prompt) {
  Transformer transformer(model, pool);
  KvCache cache(model.config(), 0, model.config().n_layers);
  EXPECT_TRUE(cache.reserve(static_cast<int>(prompt.size())));
  const Transformer::Lane lane{prompt, 0, &cache, true};
  return test::to_vector(transformer.forward_lanes({&lane, 1}));
}

TEST_P(ZooMixtureOfExperts, EveryRowIsTheSameInABatchTokenByTokenAndOnEitherThreadCount) {
  auto model = Model::load((test::shared_dir() / "models" / "zoo" / GetParam()).string());
  ASSERT_TRUE(model) << model.error().message();
  ASSERT_GT(model->config().n_experts, model->config().n_experts_used);
  const std::vector<int> prompt = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203};
  cpu::ThreadPool one(1), two(2);
  const std::vector<float> batch = batched_logits(*model, two, prompt);
  EXPECT_TRUE(test::bit_identical(batched_logits(*model, one, prompt), batch)) << "one thread against two";
  Transformer transformer(*model, two);
  KvCache cache(model->config(), 0, model->config().n_layers);
  std::vector<float> token_by_token;
  for (std::size_t t = 0; t < prompt.size(); ++t) {
    auto logits = transformer.forward({&prompt[t], 1}, static_cast<int>(t), cache);
    ASSERT_TRUE(logits) << logits.error().message();
    token_by_token.insert(token_by_token.end(), logits->begin(), logits->end());
  }
  EXPECT_TRUE(test::bit_identical(token_by_token, batch)) << "token by token against one batch";
}

// A decode token reads the experts it is routed to, not all of them: the
// bandwidth `accord bench` reports; and `accord inspect` says how many.
TEST_P(ZooMixtureOfExperts, DecodeBytesCountTheUsedExpertsAndInspectNamesThem) {
  const auto path = (test::shared_dir() / "models" / "zoo" / GetParam()).string();
  auto model = Model::load(path);
  ASSERT_TRUE(model) << model.error().message();
  const ModelConfig& c = model->config();
  std::uint64_t dense = 0, experts = 0;
  for (const StoredTensor& t : model->tensors()) (t.name.ends_with("_exps.weight") ? experts : dense) += t.bytes;
  ASSERT_GT(experts, 0u);
  EXPECT_EQ(decode_weight_bytes(*model),
            dense + experts / static_cast<std::uint64_t>(c.n_experts) * static_cast<std::uint64_t>(c.n_experts_used));
  const auto inspect = test::run_accord({"inspect", path});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  const std::string line =
      "experts      " + std::to_string(c.n_experts) + ", " + std::to_string(c.n_experts_used) + " per token";
  EXPECT_NE(inspect.output.find(line), std::string::npos) << inspect.output;
}

INSTANTIATE_TEST_SUITE_P(Files, ZooMixtureOfExperts, testing::Values("mixtral-Q4_K_M.gguf", "qwen3moe-Q4_K_M.gguf"));

// The zoo's `file` written again with its metadata and tensors changed by
// `edit`, then loaded.
Result<Model> load_edited(const std::string& file, const test::TempDir& dir,
                          const std::function<void(gguf::Metadata&, std::vector<gguf::TensorData>&)>& edit) {
  const auto bytes = test::read_bytes((test::shared_dir() / "models" / "zoo" / file).string());
  auto parsed = gguf::parse(bytes, file);
  EXPECT_TRUE(parsed) << parsed.error().message();
  std::vector<gguf::TensorData> tensors;
  for (const gguf::TensorInfo& t : parsed->tensors) {
    const auto* data = bytes.data() + t.offset;
    tensors.push_back({t.name, t.shape, t.type, std::vector<std::byte>(data, data + t.bytes)});
  }
  edit(parsed->metadata, tensors);
  EXPECT_TRUE(gguf::write(dir.file(file), parsed->metadata, tensors));
  return Model::load(dir.file(file));
}

// Experts that do not fit their metadata are refused with one line that
// names what is wrong, before any expert is multiplied.
TEST(ZooMixtureOfExpertsRefusals, DamagedExpertsAreRefusedByName) {
  using Edit = std::function<void(gguf::Metadata&, std::vector<gguf::TensorData>&)>;
  const auto set_used = [](std::uint64_t used) -> Edit {
    return [used](gguf::Metadata& m, auto&) {
      for (auto& [key, value] : m) {
        if (key == "llama.expert_used_count") value = gguf::Value::unsigned_int(gguf::ValueType::u32, used);
      }
    };
  };
  const Edit no_router = [](auto&, std::vector<gguf::TensorData>& t) {
    std::erase_if(t, [](const gguf::TensorData& d) { return d.name == "blk.1.ffn_gate_inp.weight"; });
  };
  // The same bytes as eight experts of half the rows.
  const Edit reshaped = [](auto&, std::vector<gguf::TensorData>& t) {
    for (gguf::TensorData& d : t) {
      if (d.name == "blk.0.ffn_up_exps.weight") d.shape = {d.shape[0], d.shape[1] / 2, d.shape[2] * 2};
    }
  };
  const std::pair<Edit, std::string> cases[] = {
      {set_used(5), "expert_used_count is 5, expected 1..4"},
      {set_used(0), "expert_used_count is 0, expected 1..4"},
      {no_router, "missing tensor blk.1.ffn_gate_inp.weight"},
      {reshaped, "tensor blk.0.ffn_up_exps.weight has shape [256, 256, 8], but the metadata implies [256, 512, 4]"}};
  test::TempDir dir;
  for (const auto& [edit, fragment] : cases) {
    auto model = load_edited("mixtral-Q4_K_M.gguf", dir, edit);
    ASSERT_FALSE(model) << fragment;
    EXPECT_EQ(model.error().code(), ErrorCode::format) << model.error().message();
    EXPECT_NE(model.error().message().find(fragment), std::string::npos) << model.error().message();
    EXPECT_EQ(model.error().message().find('\n'), std::string::npos) << model.error().message();
  }
  auto dense = load_edited("qwen3moe-Q4_K_M.gguf", dir, [](gguf::Metadata& m, auto&) {
    std::erase_if(m, [](const auto& kv) { return kv.first == "qwen3moe.expert_count"; });
  });
  ASSERT_FALSE(dense);
  EXPECT_NE(dense.error().message().find("qwen3moe.expert_count: missing or 0, but architecture 'qwen3moe' routes"),
            std::string::npos)
      << dense.error().message();
}

// The zoo's files on three `accord node` processes serving its folder
// (--model-dir) give one rank's tokens, prompt by prompt; with
// ZooQuantized's floors, llama.cpp's. Each node reads only its rank's
// shard.
TEST(RemoteZoo, ThreeNodesGiveOneRanksTokensForEveryFile) {
  const auto zoo = test::shared_dir() / "models" / "zoo";
  test::TempDir logs;
  std::vector<std::unique_ptr<test::NodeProcess>> nodes;
  std::vector<NodeAddress> peers;
  for (int r = 0; r < 3; ++r) {
    nodes.push_back(std::make_unique<test::NodeProcess>(logs, std::vector<std::string>{"--model-dir", zoo.string()}));
    ASSERT_NE(nodes.back()->port(), 0) << nodes.back()->log();
    peers.push_back(nodes.back()->address());
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(zoo)) {
    if (entry.path().extension() == ".gguf") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  cpu::ThreadPool pool(2);
  for (const auto& path : files) {
    auto model = Model::load(path.string());
    ASSERT_TRUE(model) << path << ": " << model.error().message();
    const std::string file = path.filename().string();
    auto remote = DistributedSession::connect(peers, *model, DistributedOptions{});
    ASSERT_TRUE(remote) << file << ": " << remote.error().message();
    for (const ZooCase& c : reference_cases(file, shared_reference("zoo.json"))) {
      Session one(*model, pool);
      ASSERT_TRUE((*remote)->reset());
      EXPECT_EQ(greedy_tokens(**remote, c.prompt_tokens, c.generated_tokens.size()),
                greedy_tokens(one, c.prompt_tokens, c.generated_tokens.size()))
          << file << ", prompt of " << c.prompt_tokens.size() << " tokens";
    }
  }
}

}  // namespace
}  // namespace accord
