#include "tests/support.hpp"

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant.hpp"
#include "runtime/text/sampler.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <random>

namespace accord::test {

std::filesystem::path shared_dir() {
  if (const char* dir = std::getenv("ACCORD_SHARED")) return dir;
  return ACCORD_SHARED_DIR;
}

std::filesystem::path zoo_f32_dir() {
  const char* set = std::getenv("ACCORD_ZOO_F32");
  const std::filesystem::path dir = set != nullptr ? set : ACCORD_ZOO_F32_DIR;
  if (!std::filesystem::is_directory(dir)) {
    ADD_FAILURE() << "the zoo's F32 originals are not in " << dir
                  << ": the ZooF32Models test writes them (or set ACCORD_ZOO_F32)";
  }
  return dir;
}

std::string stories_model() { return (shared_dir() / "models" / "stories260K.bin").string(); }
std::string stories_tokenizer() { return (shared_dir() / "models" / "tok512.bin").string(); }

Model load_stories_model() {
  auto model = Model::load(stories_model());
  if (!model) {
    ADD_FAILURE() << model.error().message();
    std::abort();
  }
  return std::move(*model);
}

Tokenizer load_stories_tokenizer() {
  auto tokenizer = Tokenizer::load_llama2c(stories_tokenizer());
  if (!tokenizer) {
    ADD_FAILURE() << tokenizer.error().message();
    std::abort();
  }
  return std::move(*tokenizer);
}

std::vector<float> to_vector(std::span<const float> values) { return {values.begin(), values.end()}; }

bool bit_identical(std::span<const float> a, std::span<const float> b) {
  // memcmp may not see a null pointer, which an empty vector's data() can be.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<float> kv_rows(const KvStore& kv, int unit, int first, int count) {
  std::vector<float> rows;
  kv.view_rows(unit, first, count, [&](std::span<const float> keys, std::span<const float> values) {
    rows.assign(keys.begin(), keys.end());
    rows.insert(rows.end(), values.begin(), values.end());
  });
  return rows;
}

std::vector<std::byte> q8_0_reference(std::span<const float> values) {
  constexpr std::size_t kGroup = 32;
  std::vector<std::byte> bytes;
  for (std::size_t g = 0; g + kGroup <= values.size(); g += kGroup) {
    const std::span<const float> group = values.subspan(g, kGroup);
    float amax = 0.0f;
    for (float x : group) amax = std::max(amax, std::fabs(x));
    const float d = amax / 127.0f;
    const float inverse = d == 0.0f ? 0.0f : 1.0f / d;
    const std::uint16_t half = cpu::f32_to_f16(d);
    bytes.push_back(static_cast<std::byte>(half & 0xffu));
    bytes.push_back(static_cast<std::byte>(half >> 8));
    for (float x : group) bytes.push_back(static_cast<std::byte>(static_cast<std::int8_t>(std::lround(x * inverse))));
  }
  return bytes;
}

std::vector<float> q8_0_reference_values(std::span<const float> values) {
  const std::vector<std::byte> bytes = q8_0_reference(values);
  std::vector<float> read;
  for (std::size_t b = 0; b < bytes.size(); b += 34) {
    const auto half =
        static_cast<std::uint16_t>(std::to_integer<unsigned>(bytes[b]) | std::to_integer<unsigned>(bytes[b + 1]) << 8);
    const float d = cpu::f16_to_f32(half);
    for (std::size_t j = 0; j < 32; ++j)
      read.push_back(d * static_cast<float>(static_cast<std::int8_t>(bytes[b + 2 + j])));
  }
  return read;
}

TempDir::TempDir() {
  std::random_device random;
  path_ = std::filesystem::temp_directory_path() / ("accord-test-" + std::to_string(random()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

ModelConfig small_config() {
  ModelConfig c;
  c.dim = 72;
  c.hidden_dim = 100;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.seq_len = 40;
  return c;
}

Model synthetic_model(const TempDir& dir, const SyntheticModelOptions& options, const std::string& name) {
  const std::string path = dir.file(name);
  Status written = write_synthetic_model(path, options);
  if (!written) ADD_FAILURE() << written.error().message();
  auto model = Model::load(path);
  if (!model) {
    ADD_FAILURE() << model.error().message();
    std::abort();
  }
  return std::move(*model);
}

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

FailureHook fail_once(Phase target, std::uint64_t epoch) {
  return [=](Phase phase, std::uint64_t e) -> Status {
    if (phase == target && e == epoch) return Error(ErrorCode::mechanism, "injected fault");
    return {};
  };
}

FailureHook fail_every(Phase target) {
  return [=](Phase phase, std::uint64_t) -> Status {
    if (phase == target) return Error(ErrorCode::mechanism, "injected fault");
    return {};
  };
}

namespace {

std::string shell_quote(const std::string& arg) {
  std::string quoted(1, '\'');
  for (char c : arg) {
    if (c == '\'') {
      quoted.append("'\\''");
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('\'');
  return quoted;
}

}  // namespace

CommandResult run_accord(const std::vector<std::string>& args) {
  std::string command = shell_quote(ACCORD_BINARY);
  for (const auto& arg : args) {
    command.push_back(' ');
    command.append(shell_quote(arg));
  }
  command += " 2>&1 </dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  CommandResult result{0, {}};
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  // A crash shows as 128 + signal, so tests can tell it from a clean failure.
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool finishes_unaided(const std::string& fifo, const std::function<void()>& work) {
  auto done = std::async(std::launch::async, work);
  if (done.wait_for(std::chrono::seconds(60)) == std::future_status::ready) return true;
  // O_NONBLOCK: succeeds at once when a reader is waiting, fails when none is.
  const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (writer >= 0) ::close(writer);
  done.wait();
  return false;
}

MismatchedFiles truncated_model_and_foreign_tokenizer(const TempDir& dir) {
  const auto synth = run_accord({"synth", "--dim", "64", "--hidden", "96", "--layers", "1", "--heads", "4",
                                 "--kv-heads", "4", "--vocab", "300", "--seq", "16", "--out", dir.file("s.bin")});
  EXPECT_EQ(synth.exit_code, 0) << synth.output;
  auto half = read_bytes(stories_model());
  half.resize(half.size() / 2);
  write_bytes(dir.file("half.bin"), half);
  return {dir.file("half.bin"), dir.file("s.tokenizer.bin")};
}

CpuPathScope::CpuPathScope(cpu::Isa isa)
    : previous_(cpu::active_isa()), ok_(cpu::use_isa(cpu::to_string(isa)).empty()) {}

CpuPathScope::~CpuPathScope() { cpu::use_isa(cpu::to_string(previous_)); }

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Tokenizer load_vocab(const std::string& name) {
  auto t = Tokenizer::load((shared_dir() / "vocab" / ("ggml-vocab-" + name + ".gguf")).string());
  if (!t) {
    ADD_FAILURE() << t.error().message();
    std::abort();
  }
  return std::move(*t);
}

int id_of(const Tokenizer& tokenizer, const std::string& piece) {
  for (int id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.piece(id) == piece) return id;
  }
  ADD_FAILURE() << "no token '" << piece << "'";
  return -1;
}

StoredMatrix make_matrix(cpu::WeightType type, int rows, int cols, unsigned seed) {
  const auto values = random_floats(static_cast<std::size_t>(rows) * cols, seed);
  StoredMatrix m;
  m.bytes.resize(static_cast<std::size_t>(rows) * cpu::row_bytes(type, static_cast<std::size_t>(cols)));
  cpu::quantize_values(type, m.bytes.data(), values.data(), values.size());
  m.matrix = {type, m.bytes.data(), rows, cols};
  return m;
}

std::vector<float> product(const cpu::Matrix& w, const std::vector<float>& x, int batch, int threads) {
  cpu::ThreadPool pool(threads);
  std::vector<float> out(static_cast<std::size_t>(batch) * w.rows);
  cpu::matmul(pool, out.data(), x.data(), w, batch);
  return out;
}

namespace {

// Row r of w against token x in double, and the sum of its terms' magnitudes.
double reference_dot(const cpu::Matrix& w, int r, const float* x, const ActivationForm& form, double& magnitude) {
  const auto n = static_cast<std::size_t>(w.cols);
  std::vector<float> weights(n), scales(n / static_cast<std::size_t>(form.block));
  std::vector<std::int8_t> quants(n);
  cpu::dequantize_row(w, r, weights.data());
  form.quantize(x, w.cols, quants.data(), scales.data());
  double sum = 0;
  magnitude = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double term = static_cast<double>(weights[i]) * quants[i] * scales[i / static_cast<std::size_t>(form.block)];
    sum += term;
    magnitude += std::fabs(term);
  }
  return sum;
}

}  // namespace

void expect_products_near_their_definition(const cpu::Matrix& w, const std::vector<float>& x, int batch,
                                           const ActivationForm& form) {
  const auto out = product(w, x, batch, 2);
  for (int t = 0; t < batch; ++t) {
    for (int r = 0; r < w.rows; ++r) {
      double magnitude = 0;
      const double expected = reference_dot(w, r, x.data() + static_cast<std::size_t>(t) * w.cols, form, magnitude);
      EXPECT_NEAR(out[static_cast<std::size_t>(t) * w.rows + r], expected, 1e-6 * magnitude)
          << to_string(w.type) << " " << t << "," << r;
    }
  }
}

void expect_every_path_gives_portables_bits(const cpu::Matrix& w, const std::vector<float>& x, int batch) {
  std::vector<float> portable;
  {
    CpuPathScope scope(cpu::Isa::portable);
    ASSERT_TRUE(scope.ok());
    portable = product(w, x, batch, 1);
  }
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512}) {
    CpuPathScope scope(isa);
    if (!scope.ok()) continue;
    EXPECT_TRUE(bit_identical(product(w, x, batch, 2), portable))
        << cpu::to_string(w.type) << " on " << cpu::to_string(isa) << ", batch " << batch;
  }
}

}  // namespace accord::test
