#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/llama2c.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/model/weights.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using test::TempDir;

std::vector<float> first_logits(const Model& model) {
  cpu::ThreadPool pool(1);
  Transformer transformer(model, pool);
  KvCache kv(model.config(), 0, model.config().n_layers);
  const std::vector<int> tokens = {1, 5, 9};
  auto logits = transformer.forward(tokens, 0, kv);
  EXPECT_TRUE(logits) << logits.error().message();
  return {logits->begin(), logits->end()};
}

TEST(ModelLoader, ReadsStoriesConfiguration) {
  auto model = Model::load(test::stories_model());
  ASSERT_TRUE(model) << model.error().message();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(model->format(), "llama2c-legacy");
  EXPECT_EQ(model->weights().classifier, model->weights().token_embedding);
}

// --ctx-size: a load may hold fewer positions than the file says, never
// more; the weights are the same, the identity (which names the context
// every rank must share) is not.
TEST(ModelLoader, AContextBelowTheFilesIsTakenAndOneAboveIsNot) {
  const std::string gguf = (test::shared_dir() / "models" / "stories260K.gguf").string();
  for (const std::string& path : {test::stories_model(), gguf}) {
    auto header = Model::read_header(path);
    ASSERT_TRUE(header) << header.error().message();
    const int file_context = header->config.seq_len;  // 512, and the GGUF's 2048
    ModelLoad load;
    auto whole = Model::load(path, load);
    load.context = 100;
    auto short_context = Model::load(path, load);
    load.context = file_context + 1000;
    auto long_context = Model::load(path, load);
    ASSERT_TRUE(whole && short_context && long_context) << path;
    EXPECT_EQ(whole->config().seq_len, file_context);
    EXPECT_EQ(short_context->config().seq_len, 100);
    EXPECT_EQ(long_context->config().seq_len, file_context);
    EXPECT_EQ(short_context->tensor_digests(), whole->tensor_digests());
    EXPECT_NE(short_context->identity(), whole->identity());
    EXPECT_EQ(long_context->identity(), whole->identity());
  }
}

TEST(ModelLoader, TellsItsProgressUpToEveryWeightByte) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  ModelLoad load{WeightScope::everything(), 2};
  load.progress = [&](std::uint64_t done, std::uint64_t total) { calls.emplace_back(done, total); };
  auto model = Model::load(test::stories_model(), load);
  ASSERT_TRUE(model) << model.error().message();
  ASSERT_FALSE(calls.empty());
  for (std::size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GT(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls[i].second, calls[0].second);
  }
  // Every tensor once: the shared classifier is the embedding, and each
  // layer's norms are dim floats.
  std::uint64_t weights = 0;
  for (const auto& [type, bytes] : model->weight_bytes_by_type()) weights += bytes;
  EXPECT_EQ(calls.back().first, calls.back().second);
  EXPECT_EQ(calls.back().second, weights);
}

TEST(ModelLoader, LegacyAndVersion1LayoutsHoldTheSameModel) {
  TempDir dir;
  SyntheticModelOptions options{test::small_config(), 11, llama2c::Layout::legacy};
  const Model legacy = test::synthetic_model(dir, options, "legacy.bin");
  options.layout = llama2c::Layout::v1;
  const Model v1 = test::synthetic_model(dir, options, "v1.bin");
  EXPECT_EQ(v1.format(), "llama2c-v1");
  EXPECT_EQ(first_logits(legacy), first_logits(v1));
}

TEST(ModelLoader, SeparateClassifierIsReadFromItsOwnTensor) {
  TempDir dir;
  for (auto layout : {llama2c::Layout::legacy, llama2c::Layout::v1}) {
    SyntheticModelOptions options{test::small_config(), 12, layout};
    options.config.shared_classifier = false;
    const Model model = test::synthetic_model(dir, options);
    EXPECT_FALSE(model.config().shared_classifier);
    EXPECT_NE(model.weights().classifier, model.weights().token_embedding);
    // Shared and separate classifiers give different logits for the same seed.
    options.config.shared_classifier = true;
    const Model shared = test::synthetic_model(dir, options, "shared.bin");
    EXPECT_NE(first_logits(model), first_logits(shared));
  }
}

TEST(ModelLoader, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir dir;
  SyntheticModelOptions options{test::small_config(), 5, llama2c::Layout::legacy};
  ASSERT_TRUE(write_synthetic_model(dir.file("a.bin"), options));
  ASSERT_TRUE(write_synthetic_model(dir.file("b.bin"), options));
  options.seed = 6;
  ASSERT_TRUE(write_synthetic_model(dir.file("c.bin"), options));
  EXPECT_EQ(test::read_bytes(dir.file("a.bin")), test::read_bytes(dir.file("b.bin")));
  EXPECT_NE(test::read_bytes(dir.file("a.bin")), test::read_bytes(dir.file("c.bin")));
}

// A routed shape is written as GGUF (llama2.c holds no experts): it loads
// with its experts and runs, and the same seed gives the same bytes.
TEST(ModelLoader, SyntheticMixtureOfExpertsIsAGgufFileWithItsExperts) {
  TempDir dir;
  SyntheticModelOptions options{test::small_config(), 5, llama2c::Layout::legacy};
  options.config.n_experts = 4;
  options.config.n_experts_used = 2;
  ASSERT_TRUE(write_synthetic_model(dir.file("a.gguf"), options));
  ASSERT_TRUE(write_synthetic_model(dir.file("b.gguf"), options));
  EXPECT_EQ(test::read_bytes(dir.file("a.gguf")), test::read_bytes(dir.file("b.gguf")));
  auto model = Model::load(dir.file("a.gguf"));
  ASSERT_TRUE(model) << model.error().message();
  EXPECT_EQ(model->format().rfind("gguf", 0), 0u) << model->format();
  EXPECT_EQ(model->config().n_experts, 4);
  EXPECT_EQ(model->config().n_experts_used, 2);
  EXPECT_EQ(model->config().hidden_dim, options.config.hidden_dim);
  const std::vector<float> logits = first_logits(*model);
  ASSERT_FALSE(logits.empty());
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
}

// Loads `bytes` as a model file named `name` and expects a clear error of
// `code` whose message contains `fragment`.
void expect_refused(const std::vector<std::byte>& bytes, ErrorCode code, const std::string& fragment,
                    const std::string& name = "bad.bin") {
  TempDir dir;
  test::write_bytes(dir.file(name), bytes);
  auto model = Model::load(dir.file(name));
  ASSERT_FALSE(model) << "loaded a model that should be refused (" << fragment << ")";
  EXPECT_EQ(model.error().code(), code) << model.error().message();
  EXPECT_NE(model.error().message().find(fragment), std::string::npos) << model.error().message();
}

std::vector<std::byte> with_header_field(std::vector<std::byte> bytes, int field, std::int32_t value) {
  std::memcpy(bytes.data() + 4 * field, &value, 4);
  return bytes;
}

TEST(ModelLoader, RefusesTruncatedAndPaddedFiles) {
  auto bytes = test::read_bytes(test::stories_model());
  auto truncated = bytes;
  truncated.resize(bytes.size() - 1);
  expect_refused(truncated, ErrorCode::format, "truncated");
  auto padded = bytes;
  padded.push_back(std::byte{0});
  expect_refused(padded, ErrorCode::format, "trailing data");
  expect_refused(std::vector<std::byte>(bytes.begin(), bytes.begin() + 10), ErrorCode::format, "truncated");
  expect_refused({}, ErrorCode::format, "truncated");
}

TEST(ModelLoader, RefusesImpossibleShapes) {
  const auto bytes = test::read_bytes(test::stories_model());
  expect_refused(with_header_field(bytes, 0, 0), ErrorCode::format, "dim is 0");
  expect_refused(with_header_field(bytes, 0, 1 << 30), ErrorCode::format, "dim is");
  expect_refused(with_header_field(bytes, 3, 7), ErrorCode::format, "not a multiple of n_heads");
  expect_refused(with_header_field(bytes, 4, 3), ErrorCode::format, "not a multiple of n_kv_heads");
  expect_refused(with_header_field(bytes, 5, INT32_MIN), ErrorCode::format, "vocab_size");
  expect_refused(with_header_field(bytes, 6, -5), ErrorCode::format, "seq_len");
  // A shape that is valid but does not match the data that follows.
  expect_refused(with_header_field(bytes, 2, 6), ErrorCode::format, "implies");
}

TEST(ModelLoader, RefusesGarbageAndOtherFormats) {
  std::vector<std::byte> garbage(4096);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<std::byte>((i * 7919 + 13) & 0xFF);
  expect_refused(garbage, ErrorCode::format, "");
  std::vector<std::byte> v2(256, std::byte{0});
  const std::uint32_t magic = 0x616b3432;
  const std::int32_t version = 2;
  std::memcpy(v2.data(), &magic, 4);
  std::memcpy(v2.data() + 4, &version, 4);
  expect_refused(v2, ErrorCode::architecture, "version 2");
  auto v9 = v2;
  v9[4] = std::byte{9};
  expect_refused(v9, ErrorCode::format, "unknown llama2.c format version 9");
  std::vector<std::byte> gguf = {std::byte{'G'}, std::byte{'G'}, std::byte{'U'}, std::byte{'F'}};
  gguf.resize(64);
  expect_refused(gguf, ErrorCode::format, "unknown GGUF version 0");
}

// A copy of `bytes` with the float at byte `offset` set to `value`.
std::vector<std::byte> with_float(std::vector<std::byte> bytes, std::uint64_t offset, float value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
  return bytes;
}

// Where the stored tensor `name` of `model` starts in its file.
std::uint64_t tensor_offset(const Model& model, const std::string& name) {
  for (const StoredTensor& t : model.tensors()) {
    if (t.name == name) return t.offset;
  }
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

TEST(ModelLoader, RefusesNonFiniteWeightsNamingTheTensor) {
  TempDir dir;
  for (auto layout : {llama2c::Layout::legacy, llama2c::Layout::v1}) {
    SyntheticModelOptions options{test::small_config(), 7, layout};
    options.config.shared_classifier = false;
    const Model model = test::synthetic_model(dir, options);
    const auto bytes = test::read_bytes(model.path());
    const std::uint64_t wq_layer_bytes = 72 * 72 * sizeof(float);
    const struct {
      std::string tensor;
      std::uint64_t at;  // bytes into the stored tensor
      float value;
      std::string expected;
    } cases[] = {
        {"wq", wq_layer_bytes + 5 * sizeof(float), NAN, "tensor wq (layer 1) holds nan at element 5 of 5184"},
        {"token_embedding_table", 0, INFINITY, "tensor token_embedding_table holds inf at element 0 of 21600"},
        {"rms_final_weight", 71 * sizeof(float), -INFINITY, "tensor rms_final_weight holds -inf at element 71"},
        {"wcls", 17 * sizeof(float), NAN, "tensor wcls holds nan at element 17"},
    };
    for (const auto& c : cases) {
      expect_refused(with_float(bytes, tensor_offset(model, c.tensor) + c.at, c.value), ErrorCode::format,
                     "bad.bin: " + c.expected);
    }
  }
}

TEST(ModelLoader, ValidateRefusesNonFiniteOrNonPositiveRopeThetaAndNormEps) {
  for (float bad : {INFINITY, -INFINITY, NAN, 0.0f, -1e-5f}) {
    ModelConfig c = test::small_config();
    c.norm_eps = bad;
    Status valid = validate(c);
    ASSERT_FALSE(valid) << bad;
    EXPECT_NE(valid.error().message().find("norm_eps is"), std::string::npos) << valid.error().message();
    c = test::small_config();
    c.rope_theta = bad;
    valid = validate(c);
    ASSERT_FALSE(valid) << bad;
    EXPECT_NE(valid.error().message().find("rope_theta is"), std::string::npos) << valid.error().message();
  }
}

// The format is the file's first bytes' word, not its name's: a GGUF magic
// read as a legacy llama2.c header gave "dim is 1195857222".
TEST(ModelLoader, AFileNamedGgufThatIsNotSaysWhatItIsNot) {
  std::vector<std::byte> bytes(4096, std::byte{0});
  std::memcpy(bytes.data(), "FUGG", 4);
  expect_refused(bytes, ErrorCode::format,
                 "x.gguf: not a GGUF file (it starts with \"FUGG\", not \"GGUF\") nor a llama2.c checkpoint "
                 "(read as a legacy header: dim is 1195857222",
                 "x.gguf");
  bytes[0] = std::byte{0x01};
  expect_refused(bytes, ErrorCode::format, "it starts with \"\\x01UGG\"", "x.gguf");
  expect_refused({}, ErrorCode::format, "not a GGUF file (it is empty) nor a llama2.c checkpoint", "x.gguf");
}

TEST(ModelLoader, FormatsAreRecognisedByMagicWhateverTheName) {
  TempDir dir;
  const Model bin = test::synthetic_model(dir, {test::small_config(), 9, llama2c::Layout::legacy});
  ASSERT_TRUE(write_gguf_model(dir.file("gguf.bin"), bin, llama_metadata(bin.config()), gguf::TensorType::f32));
  auto gguf = Model::load(dir.file("gguf.bin"));
  ASSERT_TRUE(gguf) << gguf.error().message();
  EXPECT_EQ(gguf->format(), "gguf-v3");
  EXPECT_EQ(gguf->identity(), bin.identity());
  test::write_bytes(dir.file("llama2c.gguf"), test::read_bytes(bin.path()));
  auto llama2c = Model::load(dir.file("llama2c.gguf"));
  ASSERT_TRUE(llama2c) << llama2c.error().message();
  EXPECT_EQ(llama2c->format(), "llama2c-legacy");
}

// read_header() reads the configuration alone, so the tokenizer can be
// checked before a long load; the weights are load()'s to check.
TEST(ModelLoader, ReadHeaderTouchesNoWeight) {
  TempDir dir;
  auto bytes = test::read_bytes(test::stories_model());
  bytes.resize(bytes.size() / 2);
  test::write_bytes(dir.file("half.bin"), bytes);
  auto header = Model::read_header(dir.file("half.bin"));
  ASSERT_TRUE(header) << header.error().message();
  EXPECT_EQ(header->config.vocab_size, 512);
  EXPECT_EQ(header->format, "llama2c-legacy");
  EXPECT_FALSE(Model::load(dir.file("half.bin")));

  const auto gguf_path = (test::shared_dir() / "models" / "stories260K.gguf").string();
  header = Model::read_header(gguf_path);
  ASSERT_TRUE(header) << header.error().message();
  EXPECT_EQ(header->format, "gguf-v3");
  EXPECT_EQ(header->config.seq_len, 2048);
  EXPECT_FALSE(header->config.shared_classifier);

  test::write_bytes(dir.file("x.gguf"), std::vector<std::byte>(100, std::byte{'x'}));
  header = Model::read_header(dir.file("x.gguf"));
  ASSERT_FALSE(header);
  EXPECT_NE(header.error().message().find("not a GGUF file"), std::string::npos) << header.error().message();
}

TEST(ModelLoader, MissingFileIsAnIoError) {
  auto model = Model::load("/nonexistent/accord/model.bin");
  ASSERT_FALSE(model);
  EXPECT_EQ(model.error().code(), ErrorCode::io);
  EXPECT_NE(model.error().message().find("/nonexistent/accord/model.bin"), std::string::npos);
}

// A Unix socket bound at `path`; the file stays when the socket closes.
void bind_unix_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof address.sun_path) << path;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << path;
  ::close(fd);
}

// The error `open` returns; "opened" when it returns none.
template <class Open>
std::string refusal(Open open) {
  auto result = open();
  return result ? "opened" : result.error().message();
}

// A FIFO given as the model is refused, not waited on: opening it for
// reading blocks for a writer before fstat can refuse it, unless opened
// without blocking. Every loader opens files through MappedFile, so each
// is asked here about each kind of file that is not one.
TEST(ModelLoader, AFifoASocketADeviceOrAFolderIsRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir.file("model.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string socket = dir.file("model.sock");
  bind_unix_socket(socket);
  for (const std::string& path : {fifo, socket, std::string("/dev/null"), dir.path().string()}) {
    const std::vector<std::function<std::string()>> loaders = {
        [&] { return refusal([&] { return Model::read_header(path); }); },
        [&] { return refusal([&] { return Model::load(path); }); },
        [&] { return refusal([&] { return Tokenizer::load(path); }); },
    };
    for (std::size_t i = 0; i < loaders.size(); ++i) {
      std::string said;
      EXPECT_TRUE(test::finishes_unaided(fifo, [&] { said = loaders[i](); })) << "loader " << i << " hung on " << path;
      EXPECT_EQ(said, path + " is not a regular file") << "loader " << i;
    }
  }
}

}  // namespace
}  // namespace accord
