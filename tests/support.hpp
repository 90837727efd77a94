// Helpers shared by the tests: where the shared models live, temporary
// folders, synthetic models, and running the `accord` binary.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <span>

#include <gtest/gtest.h>

#include "actors/distributed_session.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/matrix.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/target.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::test {

// ../shared beside the checkout (ACCORD_SHARED overrides it).
std::filesystem::path shared_dir();
// The zoo's F32 originals (shared/models/zoo/README.md: make_zoo.py writes
// them): the build folder's zoo-f32, which the ctest fixture ZooF32Models
// fills, or $ACCORD_ZOO_F32. A test that needs them fails, not skips, when
// the folder is missing.
std::filesystem::path zoo_f32_dir();
std::string stories_model();      // models/stories260K.bin
std::string stories_tokenizer();  // models/tok512.bin

// Loaded from the paths above; a missing file fails the test and stops the
// binary, since every test that asks needs them.
Model load_stories_model();
Tokenizer load_stories_tokenizer();
// shared/vocab/ggml-vocab-NAME.gguf's tokenizer; a missing one stops the binary.
Tokenizer load_vocab(const std::string& name);
// The id of the token spelt `piece` (a failure and -1 when there is none).
int id_of(const Tokenizer& tokenizer, const std::string& piece);

std::vector<float> to_vector(std::span<const float> values);
// n floats uniform in [-1, 1), the same for the same seed.
std::vector<float> random_floats(std::size_t n, unsigned seed);

// A (rows, cols) matrix of `type` quantized from random floats; owns its bytes.
struct StoredMatrix {
  std::vector<std::byte> bytes;
  cpu::Matrix matrix;
};
StoredMatrix make_matrix(cpu::WeightType type, int rows, int cols, unsigned seed);
// w times `batch` rows of x on a pool of `threads`: (batch, w.rows).
std::vector<float> product(const cpu::Matrix& w, const std::vector<float>& x, int batch, int threads);
// The product on 2 threads of every vector path this CPU has gives the
// portable path's bits on 1 (a path the CPU lacks is skipped; best_isa()
// is checked elsewhere).
void expect_every_path_gives_portables_bits(const cpu::Matrix& w, const std::vector<float>& x, int batch);

// The 8-bit form of n activations that a weight type meets: quants, and a
// scale per `block` of them.
struct ActivationForm {
  int block = 32;
  std::function<void(const float* x, int n, std::int8_t* quants, float* scales)> quantize;
};

// Each (token, row) of w times x (batch tokens), on two threads, within
// 1e-6 of the sum of its terms' magnitudes of the product in double: the
// weights dequantized, x as `form` stands for it (quants times scales).
// What rounds in a product is a few units of 2^-24 of those magnitudes;
// a wrong level, scale or minimum moves a result by far more.
void expect_products_near_their_definition(const cpu::Matrix& w, const std::vector<float>& x, int batch,
                                           const ActivationForm& form);

// The logits of the prefill of `prompt` and of `steps` greedy decode steps
// after it, one after another, of a Session or a DistributedSession.
template <class AnySession>
std::vector<float> greedy_trace(AnySession& session, std::span<const int> prompt, int steps) {
  std::vector<float> trace;
  auto step = session.prefill(prompt);
  for (int i = 0;; ++i) {
    EXPECT_TRUE(step) << step.error().message();
    if (!step) return trace;
    trace.insert(trace.end(), step->logits.begin(), step->logits.end());
    if (i == steps) return trace;
    step = session.decode(argmax(step->logits));
  }
}
bool bit_identical(std::span<const float> a, std::span<const float> b);

// Whether `condition` holds within `patience` (asked every 10 ms): generous,
// as it bounds waits for what happens in milliseconds.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds patience = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Rows [first, first + count) of `unit` in `kv`: its keys, then its values.
std::vector<float> kv_rows(const KvStore& kv, int unit, int first, int count);

// ggml's block_q8_0 of each group of 32 of `values` (whole groups),
// written here from its definition (quantize_row_q8_0_ref), not by the
// code under test: d = max |x| / 127, stored as F16, then 32 int8 quants,
// x * (1 / d) rounded half away from zero (0 where d is 0).
std::vector<std::byte> q8_0_reference(std::span<const float> values);
// What those blocks read back as: d as stored, times q.
std::vector<float> q8_0_reference_values(std::span<const float> values);

// The prompt and descriptor the prompt-cache tests save and load, one
// session or several ranks alike, and its first n tokens.
// An observer the test owns, lent to a step as a session takes one.
inline std::shared_ptr<StepObserver> borrow(StepObserver& observer) {
  return std::shared_ptr<StepObserver>(std::shared_ptr<void>{}, &observer);
}

// Generation steps on a distributed session (StepOptions::sampler): the
// output owner samples; `logits` says whether the step returns them.
inline Result<DistributedStep> sample_prefill(DistributedSession& session, std::span<const int> tokens,
                                              Sampler& sampler, std::span<const int> stop_tokens, bool logits = true) {
  return session.step({.tokens = tokens, .sampler = &sampler, .stop_tokens = stop_tokens, .return_logits = logits});
}
inline Result<DistributedStep> sample_decode(DistributedSession& session, int token, Sampler& sampler,
                                             std::span<const int> stop_tokens, bool logits = true,
                                             NextDecode next = NextDecode::unlikely) {
  return session.step(
      {.tokens = {&token, 1}, .sampler = &sampler, .stop_tokens = stop_tokens, .return_logits = logits, .next = next});
}

// A prediction-target step of `input` on either kind of session.
template <class AnySession>
auto speculate(AnySession& session, const PredictionTargetInput& input) {
  return session.step({.tokens = input.tokens, .prediction_target = true, .draft_tokens = input.draft_tokens});
}

inline const std::vector<int> kCachePrompt = {1, 403, 407, 261, 378, 432, 383, 286};
inline const PromptCacheDescriptor kCacheDescriptor{"story-opening", "tests"};
inline std::span<const int> cache_prefix(int n) {
  return std::span<const int>(kCachePrompt).first(static_cast<std::size_t>(n));
}

// A fresh empty folder, removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A small synthetic shape with grouped-query attention and odd sizes, so
// kernels meet tails and several threads get work.
ModelConfig small_config();

// Writes a synthetic model into dir and loads it; fails the test on error.
Model synthetic_model(const TempDir& dir, const SyntheticModelOptions& options, const std::string& name = "m.bin");

std::vector<std::byte> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<std::byte>& bytes);

// Failure hooks: fail `phase` in the transaction numbered `epoch` only, or
// every time it runs. The error is a mechanism error saying "injected fault".
FailureHook fail_once(Phase phase, std::uint64_t epoch);
FailureHook fail_every(Phase phase);

// Switches the process's CPU kernels to `isa` (kernels/cpu/isa.hpp) for
// the scope, and back. ok() is false where this CPU cannot run it.
class CpuPathScope {
 public:
  explicit CpuPathScope(cpu::Isa isa);
  ~CpuPathScope();
  CpuPathScope(const CpuPathScope&) = delete;
  CpuPathScope& operator=(const CpuPathScope&) = delete;
  bool ok() const { return ok_; }

 private:
  cpu::Isa previous_;
  bool ok_;
};

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

// Runs the accord binary with the given arguments (shell-quoted here).
CommandResult run_accord(const std::vector<std::string>& args);

// Runs `work` on a thread of its own; whether it finished within 60 s
// unaided. Past that the writing end of the FIFO `fifo` is opened and
// closed, which releases anything blocked opening it for reading (this
// process or another), so that a test of such a hang fails, not hangs.
bool finishes_unaided(const std::string& fifo, const std::function<void()>& work);

// A model that a load would find damaged and a tokenizer that does not fit
// it, written into dir: stories260K cut in half, and the tokenizer of a
// synthetic 300-token model. A check that refuses the pair for its
// vocabulary proves it ran before any weight was read.
struct MismatchedFiles {
  std::string model;
  std::string tokenizer;
};
MismatchedFiles truncated_model_and_foreign_tokenizer(const TempDir& dir);

}  // namespace accord::test
