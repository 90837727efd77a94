// GGUF models: stories260K.gguf against the llama2.c reference, conversion
// round trips, and how far F16, BF16, Q8_0, Q4_0 and the K-quants drift
// from F32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>

#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

Model load(const std::string& path) {
  auto model = Model::load(path);
  if (!model) {
    ADD_FAILURE() << model.error().message();
    std::abort();
  }
  return std::move(*model);
}

std::string stories_gguf() { return (test::shared_dir() / "models" / "stories260K.gguf").string(); }

TEST(GgufModel, ReadsStoriesConfiguration) {
  const Model model = load(stories_gguf());
  const ModelConfig& c = model.config();
  EXPECT_EQ(model.format(), "gguf-v3");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 2048);  // the GGUF's context_length, not the .bin's 512
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.shared_classifier);  // output.weight is stored
  EXPECT_EQ(model.tensors().size(), 48u);
  EXPECT_EQ(model.owned_floats(), 0u);  // F32, read in place
}

TEST(GgufModel, StoriesGreedyTokensMatchTheLlama2cModel) {
  const Model model = load(stories_gguf());
  auto tokenizer = Tokenizer::load(stories_gguf());
  ASSERT_TRUE(tokenizer) << tokenizer.error().message();
  EXPECT_EQ(tokenizer->kind(), TokenizerKind::sentencepiece);
  cpu::ThreadPool pool(2);
  for (const auto& c : test::greedy_cases()) {
    Session session(model, pool);
    GenerationOptions options;
    options.max_tokens = static_cast<int>(c.generated_tokens.size());
    options.sampler.temperature = 0.0f;
    auto result = generate(session, *tokenizer, c.prompt, options);
    ASSERT_TRUE(result) << result.error().message();
    EXPECT_EQ(result->prompt_tokens, c.prompt_tokens) << c.prompt;
    EXPECT_EQ(result->generated_tokens, c.generated_tokens) << c.prompt;
    EXPECT_EQ(result->text, c.text) << c.prompt;
  }
}

// The logits after a prompt and after each of `steps` further tokens, all
// concatenated, and the argmax at each of those points. The further tokens
// are `forced` when given (so two models see the same inputs), else the
// model's own greedy choices.
struct Trace {
  std::vector<float> logits;
  std::vector<int> tokens;
  std::vector<float> margins;  // top-1 minus top-2 logit at each step
};

float top_two_margin(std::span<const float> logits) {
  float first = -INFINITY, second = -INFINITY;
  for (float v : logits) {
    if (v > first) {
      second = first;
      first = v;
    } else if (v > second) {
      second = v;
    }
  }
  return first - second;
}

Trace greedy_trace(const Model& model, int steps, const std::vector<int>& forced = {}) {
  cpu::ThreadPool pool(2);
  Transformer transformer(model, pool);
  KvCache kv(model.config(), 0, model.config().n_layers);
  const std::vector<int> prompt = {1, 40, 77, 300, 12, 150, 260};
  Trace trace;
  auto logits = transformer.forward(prompt, 0, kv);
  int pos = static_cast<int>(prompt.size());
  for (int step = 0; step < steps; ++step) {
    trace.logits.insert(trace.logits.end(), logits->begin(), logits->end());
    trace.tokens.push_back(argmax(*logits));
    trace.margins.push_back(top_two_margin(*logits));
    const int next = forced.empty() ? trace.tokens.back() : forced[static_cast<std::size_t>(step)];
    logits = transformer.forward(std::span<const int>(&next, 1), pos++, kv);
  }
  return trace;
}

// A synthetic model whose rows split into 32-value blocks, so every matrix
// is stored in the requested type.
ModelConfig block_config() {
  ModelConfig c = test::small_config();
  c.dim = 128;
  c.hidden_dim = 352;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.vocab_size = 320;
  c.seq_len = 64;
  return c;
}

// One whose rows split into the K-quants' super-blocks of 256 values.
ModelConfig super_block_config() {
  ModelConfig c = block_config();
  c.dim = 256;
  c.hidden_dim = 768;
  return c;
}

bool is_k_quant(gguf::TensorType type) { return cpu::is_k_quant(gguf::weight_type(type)); }

TEST(GgufModel, F32ConversionIsBitIdenticalToTheLlama2cModel) {
  test::TempDir dir;
  SyntheticModelOptions options{block_config(), 21, llama2c::Layout::legacy};
  options.config.shared_classifier = false;
  const Model bin = test::synthetic_model(dir, options);
  ASSERT_TRUE(write_gguf_model(dir.file("m.gguf"), bin, llama_metadata(bin.config()), gguf::TensorType::f32));
  const Model gguf = load(dir.file("m.gguf"));
  EXPECT_EQ(gguf.config().seq_len, bin.config().seq_len);
  EXPECT_FALSE(gguf.config().shared_classifier);
  const auto a = greedy_trace(bin, 8), b = greedy_trace(gguf, 8);
  EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)));
}

// With general.alignment 1 an F32 tensor may start at an address that is
// not float-aligned; the loader then copies it instead of pointing into it.
TEST(GgufModel, MisalignedF32TensorsAreCopied) {
  test::TempDir dir;
  const Model bin = test::synthetic_model(dir, {block_config(), 5, llama2c::Layout::legacy});
  gguf::Metadata metadata = llama_metadata(bin.config());
  metadata[1].second = gguf::Value::unsigned_int(gguf::ValueType::u32, 1);  // general.alignment
  ASSERT_EQ(metadata[1].first, "general.alignment");
  metadata.emplace_back("padding", gguf::Value::string(""));
  for (int pad = 0; pad < 4; ++pad) {
    metadata.back().second = gguf::Value::string(std::string(static_cast<std::size_t>(pad), 'x'));
    ASSERT_TRUE(write_gguf_model(dir.file("a1.gguf"), bin, metadata, gguf::TensorType::f32));
    if (load(dir.file("a1.gguf")).owned_floats() > 0) break;
  }
  const Model gguf = load(dir.file("a1.gguf"));
  EXPECT_GT(gguf.owned_floats(), 0u);
  const auto a = greedy_trace(bin, 4), b = greedy_trace(gguf, 4);
  EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)));
}

// Every CPU path this machine has computes the same bits for every stored
// type, through prefill and decode (kernels/cpu/kernel_table.hpp).
TEST(GgufModel, EveryCpuPathGivesBitIdenticalLogitsForEveryType) {
  test::TempDir dir;
  const Model bin = test::synthetic_model(dir, {block_config(), 13, llama2c::Layout::legacy});
  const Model wide = test::synthetic_model(dir, {super_block_config(), 13, llama2c::Layout::legacy}, "wide.bin");
  using gguf::TensorType;
  for (auto type : {TensorType::f32, TensorType::f16, TensorType::q8_0, TensorType::q4_0, TensorType::bf16,
                    TensorType::q2_k, TensorType::q3_k, TensorType::q4_k, TensorType::q5_k, TensorType::q6_k,
                    TensorType::iq4_xs, TensorType::q4_1, TensorType::q5_0, TensorType::q5_1, TensorType::iq4_nl}) {
    const std::string path = dir.file(std::string(gguf::to_string(type)) + ".gguf");
    const Model& source = is_k_quant(type) ? wide : bin;
    ASSERT_TRUE(write_gguf_model(path, source, llama_metadata(source.config()), type));
    const Model model = load(path);
    Trace portable;
    {
      test::CpuPathScope scope(cpu::Isa::portable);
      ASSERT_TRUE(scope.ok());
      portable = greedy_trace(model, 6);
    }
    int paths = 0;
    for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512}) {
      test::CpuPathScope scope(isa);
      if (!scope.ok()) continue;
      ++paths;
      const Trace trace = greedy_trace(model, 6);
      EXPECT_EQ(0, std::memcmp(trace.logits.data(), portable.logits.data(), portable.logits.size() * sizeof(float)))
          << gguf::to_string(type) << " on " << cpu::to_string(isa);
    }
    std::printf("[ paths    ] %s: %d vector path(s) equal the portable one\n",
                std::string(gguf::to_string(type)).c_str(), paths);
  }
}

struct Drift {
  double max_abs = 0;    // largest |logit - reference logit|
  double logit_rms = 0;  // RMS of the reference logits
  int tokens_equal = 0;  // steps whose argmax equals the reference's
  // Steps whose argmax differs although the reference's top-2 margin is
  // more than twice the largest logit error: a change that error cannot
  // explain. Where the margin is smaller, a tie may break either way.
  int unexplained = 0;
};

Drift drift(const Trace& reference, const Trace& other) {
  Drift d;
  double sum_squares = 0;
  for (std::size_t i = 0; i < reference.logits.size(); ++i) {
    d.max_abs = std::max(d.max_abs, std::fabs(double(other.logits[i]) - reference.logits[i]));
    sum_squares += double(reference.logits[i]) * reference.logits[i];
  }
  d.logit_rms = std::sqrt(sum_squares / static_cast<double>(reference.logits.size()));
  for (std::size_t i = 0; i < reference.tokens.size(); ++i) {
    const bool equal = reference.tokens[i] == other.tokens[i];
    d.tokens_equal += equal;
    d.unexplained += !equal && reference.margins[i] > 2 * d.max_abs;
  }
  return d;
}

// The quantized model reads the F32 model's greedy tokens, so logits are
// compared on the same inputs. Bounds are relative to the RMS of the F32
// logits, about 2.5x above what was measured; docs/gguf.md derives them from
// each format's per-weight error (F16: 11 significant bits; Q8_0: half a
// step of max|block|/127; Q4_0: up to a step of max|block|/8).
struct DriftBound {
  gguf::TensorType type;
  double max_relative;  // max |Δlogit| / RMS(logit)
  int min_equal_tokens;
};

// Each of `bounds`: `reference_model` converted to its type stays within
// them, its matrices read where the mapping put them.
void expect_drift_within(const test::TempDir& dir, const Model& reference_model, int steps,
                         std::span<const DriftBound> bounds) {
  const Trace reference = greedy_trace(reference_model, steps);
  for (const auto& c : bounds) {
    const std::string path = dir.file(std::string(gguf::to_string(c.type)) + ".gguf");
    ASSERT_TRUE(write_gguf_model(path, reference_model, llama_metadata(reference_model.config()), c.type));
    const Model quantized = load(path);
    EXPECT_EQ(quantized.owned_floats(), 0u);
    const auto by_type = quantized.weight_bytes_by_type();
    ASSERT_TRUE(by_type.count(std::string(gguf::to_string(c.type))));
    EXPECT_LT(by_type.at(std::string(gguf::to_string(c.type))), quantized.file_bytes());
    const Drift d = drift(reference, greedy_trace(quantized, steps, reference.tokens));
    const double relative = d.max_abs / d.logit_rms;
    std::printf("[ drift    ] %s: max |dlogit| %.3g, logit RMS %.3g, relative %.3g, %d/%d greedy tokens equal\n",
                std::string(gguf::to_string(c.type)).c_str(), d.max_abs, d.logit_rms, relative, d.tokens_equal, steps);
    EXPECT_LE(relative, c.max_relative) << gguf::to_string(c.type);
    EXPECT_GE(d.tokens_equal, c.min_equal_tokens) << gguf::to_string(c.type);
    EXPECT_EQ(d.unexplained, 0) << gguf::to_string(c.type);
  }
}

// The quantized model reads the F32 model's greedy tokens, so logits are
// compared on the same inputs. Bounds are relative to the RMS of the F32
// logits, about 2.5x above what was measured; docs/gguf.md derives them from
// each format's per-weight error (F16: 11 significant bits; Q8_0: half a
// step of max|block|/127; Q4_0: up to a step of max|block|/8).
TEST(GgufModel, QuantizedConversionsStayWithinTolerance) {
  test::TempDir dir;
  const Model reference_model = test::synthetic_model(dir, {block_config(), 33, llama2c::Layout::legacy});
  const int steps = 32;
  const DriftBound bounds[] = {{gguf::TensorType::f16, 1e-2, steps},
                               {gguf::TensorType::q8_0, 0.15, steps - 2},
                               {gguf::TensorType::q4_0, 2.5, steps / 2}};
  expect_drift_within(dir, reference_model, steps, bounds);
}

// The same for BF16 (8 significant bits) and the K-quants (dim 256, so
// that rows hold whole super-blocks): with 6, 5, 4, 3 and 2 bits per
// weight their errors grow about twofold per bit from Q8_0's, and their
// activations are quantized per 256 values, not 32. Measured relative
// errors: BF16 0.027, Q6_K 0.22, Q5_K 0.38, Q4_K 0.88, Q3_K 1.8, Q2_K 2.8,
// IQ4_XS (4 bits on 16 non-linear levels) 0.97
// (the tokens of random models' flat logits change at the least error);
// bounds about 2.3x above them.
TEST(GgufModel, KQuantConversionsStayWithinTolerance) {
  test::TempDir dir;
  const Model reference_model = test::synthetic_model(dir, {super_block_config(), 33, llama2c::Layout::legacy});
  const int steps = 32;
  using gguf::TensorType;
  const DriftBound bounds[] = {{TensorType::bf16, 0.07, steps - 2}, {TensorType::q6_k, 0.5, steps - 4},
                               {TensorType::q5_k, 0.9, steps - 4},  {TensorType::q4_k, 2.0, steps / 2},
                               {TensorType::q3_k, 4.0, steps / 4},  {TensorType::q2_k, 6.0, 0},
                               {TensorType::iq4_xs, 2.2, steps / 2}};
  expect_drift_within(dir, reference_model, steps, bounds);
}

// A K-quant needs rows of whole super-blocks: a narrower model is not
// written, a file that claims such rows is refused, and so is a super-block
// whose f16 scale is infinite.
TEST(GgufModel, KQuantsRefuseRowsOfPartSuperBlocksAndNonFiniteScales) {
  test::TempDir dir;
  const Model narrow = test::synthetic_model(dir, {block_config(), 3, llama2c::Layout::legacy});
  const Status written =
      write_gguf_model(dir.file("n.gguf"), narrow, llama_metadata(narrow.config()), gguf::TensorType::q4_k);
  ASSERT_FALSE(written);
  EXPECT_EQ(written.error().message(),
            "cannot write token_embd.weight as Q4_K: its rows of 128 values are not whole super-blocks of 256");
  const std::vector<gguf::TensorData> tensors = {
      {"w", {128, 2}, gguf::TensorType::q4_k, std::vector<std::byte>(cpu::kQ4_KBlockBytes)}};
  ASSERT_TRUE(gguf::write(dir.file("w.gguf"), {}, tensors));
  const auto bytes = test::read_bytes(dir.file("w.gguf"));
  const auto file = gguf::parse(bytes, "w.gguf");
  ASSERT_FALSE(file);
  EXPECT_NE(file.error().message().find("tensor 'w' has rows of 128 values, not a multiple of the Q4_K block of 256"),
            std::string::npos)
      << file.error().message();

  const Model wide = test::synthetic_model(dir, {super_block_config(), 3, llama2c::Layout::legacy}, "wide.bin");
  const std::string path = dir.file("inf.gguf");
  ASSERT_TRUE(write_gguf_model(path, wide, llama_metadata(wide.config()), gguf::TensorType::q4_k));
  auto patched = test::read_bytes(path);
  auto parsed = gguf::parse(patched, path);
  ASSERT_TRUE(parsed) << parsed.error().message();
  const std::uint16_t f16_inf = 0x7C00;
  // The second super-block's d: its values are infinite or NaN.
  std::memcpy(patched.data() + parsed->tensor("blk.1.ffn_down.weight")->offset + cpu::kQ4_KBlockBytes, &f16_inf, 2);
  test::write_bytes(path, patched);
  auto model = Model::load(path);
  ASSERT_FALSE(model);
  EXPECT_NE(model.error().message().find("tensor blk.1.ffn_down.weight holds "), std::string::npos)
      << model.error().message();
}

// A NaN or infinity in a weight, stored in any type (in a quantized block,
// in its f16 scale), is refused at load with the tensor's name: such a
// model would generate nothing but one repeated token.
TEST(GgufModel, RefusesNonFiniteWeightsInEveryType) {
  test::TempDir dir;
  const Model bin = test::synthetic_model(dir, {block_config(), 8, llama2c::Layout::legacy});
  const float nan = NAN, inf = INFINITY;
  const std::uint16_t f16_nan = 0x7E00, f16_inf = 0x7C00;
  const auto raw = [](const auto& value) {
    std::vector<std::byte> bytes(sizeof value);
    std::memcpy(bytes.data(), &value, sizeof value);
    return bytes;
  };
  const struct {
    gguf::TensorType type;
    std::string tensor;
    std::uint64_t at;  // bytes into the tensor
    std::vector<std::byte> patch;
    std::string expected;
  } cases[] = {
      {gguf::TensorType::f32, "blk.1.attn_q.weight", 3 * 4, raw(nan),
       "tensor blk.1.attn_q.weight holds nan at element 3"},
      {gguf::TensorType::f16, "token_embd.weight", 10 * 2, raw(f16_inf),
       "tensor token_embd.weight holds inf at element 10"},
      // The scale of the second block: every value of the block is NaN.
      {gguf::TensorType::q8_0, "blk.0.ffn_up.weight", cpu::kQ8_0BlockBytes, raw(f16_nan),
       "tensor blk.0.ffn_up.weight holds nan at element 32"},
      {gguf::TensorType::q4_0, "blk.2.attn_v.weight", 0, raw(f16_inf), "tensor blk.2.attn_v.weight holds "},
      // Norms stay F32 in a quantized file.
      {gguf::TensorType::q4_0, "output_norm.weight", 0, raw(-inf), "tensor output_norm.weight holds -inf at element 0"},
  };
  for (const auto& c : cases) {
    const std::string path = dir.file("bad.gguf");
    ASSERT_TRUE(write_gguf_model(path, bin, llama_metadata(bin.config()), c.type));
    auto bytes = test::read_bytes(path);
    auto file = gguf::parse(bytes, path);
    ASSERT_TRUE(file) << file.error().message();
    ASSERT_NE(file->tensor(c.tensor), nullptr) << c.tensor;
    std::memcpy(bytes.data() + file->tensor(c.tensor)->offset + c.at, c.patch.data(), c.patch.size());
    test::write_bytes(path, bytes);
    auto model = Model::load(path);
    ASSERT_FALSE(model) << c.expected;
    EXPECT_EQ(model.error().code(), ErrorCode::format);
    EXPECT_NE(model.error().message().find(path + ": " + c.expected), std::string::npos) << model.error().message();
  }
}

TEST(GgufModel, StoriesSurvivesQ8_0) {
  test::TempDir dir;
  const Model f32 = load(stories_gguf());
  ASSERT_TRUE(write_gguf_model(dir.file("q8.gguf"), f32, llama_metadata(f32.config()), gguf::TensorType::q8_0));
  const Model q8 = load(dir.file("q8.gguf"));
  // ffn_down's rows of 172 values do not split into blocks: stored as F16.
  int q8_tensors = 0, f16_tensors = 0;
  for (const auto& t : q8.tensors()) {
    q8_tensors += t.type == "Q8_0";
    f16_tensors += t.type == "F16";
  }
  EXPECT_EQ(q8_tensors, 1 + 5 * 6 + 1);
  EXPECT_EQ(f16_tensors, 5);
  const Drift d = drift(greedy_trace(f32, 32), greedy_trace(q8, 32, greedy_trace(f32, 32).tokens));
  std::printf("[ drift    ] stories260K Q8_0: relative %.3g, %d/32 greedy tokens equal\n", d.max_abs / d.logit_rms,
              d.tokens_equal);
  EXPECT_GE(d.tokens_equal, 30);
  EXPECT_EQ(d.unexplained, 0);
}

}  // namespace
}  // namespace accord
