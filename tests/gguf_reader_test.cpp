// The GGUF reader on hand-made and damaged files: every malformation gets a
// format (or architecture) error that says what is wrong, never a crash.
#include "runtime/model/gguf.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/model/gguf_model.hpp"
#include "runtime/model/model.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using gguf::ValueType;

// Builds GGUF bytes field by field, so a test can write any lie.
class Bytes {
 public:
  Bytes& u32(std::uint32_t v) { return put(v); }
  Bytes& u64(std::uint64_t v) { return put(v); }
  Bytes& f32(float v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    for (char c : s) bytes.push_back(static_cast<std::byte>(c));
    return *this;
  }
  Bytes& header(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
    return str_raw("GGUF").u32(version).u64(tensors).u64(kvs);
  }
  Bytes& kv_u32(std::string_view key, std::uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  Bytes& tensor(std::string_view name, std::vector<std::uint64_t> shape, std::uint32_t type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(shape.size()));
    for (auto extent : shape) u64(extent);
    return u32(type).u64(offset);
  }
  Bytes& pad(std::size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(std::byte{0});
    return *this;
  }
  Bytes& zeros(std::size_t n) {
    bytes.resize(bytes.size() + n);
    return *this;
  }

  std::vector<std::byte> bytes;

 private:
  template <class T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
    return *this;
  }
  Bytes& str_raw(std::string_view s) {
    for (char c : s) bytes.push_back(static_cast<std::byte>(c));
    return *this;
  }
};

void expect_parse_error(const std::vector<std::byte>& bytes, const std::string& fragment) {
  auto file = gguf::parse(bytes, "bad.gguf");
  ASSERT_FALSE(file) << "parsed a file that should be refused (" << fragment << ")";
  EXPECT_EQ(file.error().code(), ErrorCode::format);
  EXPECT_NE(file.error().message().find("bad.gguf: "), std::string::npos) << file.error().message();
  EXPECT_NE(file.error().message().find(fragment), std::string::npos) << file.error().message();
}

// One F32 tensor of 8 values after one metadata key.
Bytes one_tensor_file(std::uint32_t type = 0, std::uint64_t offset = 0, std::vector<std::uint64_t> shape = {8}) {
  Bytes b;
  b.header(1, 1).kv_str("general.architecture", "llama").tensor("t", std::move(shape), type, offset).pad(32).zeros(32);
  return b;
}

TEST(GgufReader, ReadsAHandMadeFile) {
  auto file = gguf::parse(one_tensor_file().bytes, "ok.gguf");
  ASSERT_TRUE(file) << file.error().message();
  EXPECT_EQ(file->version, 3u);
  ASSERT_EQ(file->metadata.size(), 1u);
  EXPECT_EQ(*file->find("general.architecture")->as_string(), "llama");
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0].elements, 8u);
  EXPECT_EQ(file->tensors[0].bytes, 32u);
  EXPECT_EQ(file->tensors[0].offset, file->data_offset);
  EXPECT_EQ(file->data_offset % 32, 0u);
}

TEST(GgufReader, ReadsEveryValueTypeAndVersion2) {
  Bytes b;
  b.header(0, 13, 2);
  b.str("u8").u32(0).zeros(1).str("i8").u32(1).zeros(1).str("u16").u32(2).zeros(2).str("i16").u32(3).zeros(2);
  b.kv_u32("u32", 7).str("i32").u32(5).u32(static_cast<std::uint32_t>(-3)).str("f32").u32(6).f32(0.5f);
  b.str("bool").u32(7).zeros(1).kv_str("string", "text").str("u64").u32(10).u64(1ull << 40);
  b.str("i64").u32(11).u64(static_cast<std::uint64_t>(-5)).str("f64").u32(12).u64(0);
  b.str("array").u32(9).u32(9).u64(2);  // an array of two arrays of u8
  b.u32(0).u64(1).zeros(1).u32(0).u64(0);
  auto file = gguf::parse(b.bytes, "all.gguf");
  ASSERT_TRUE(file) << file.error().message();
  EXPECT_EQ(file->version, 2u);
  EXPECT_EQ(*file->find("u32")->as_int(), 7);
  EXPECT_EQ(*file->find("i32")->as_int(), -3);
  EXPECT_EQ(*file->find("u64")->as_int(), 1ll << 40);
  EXPECT_EQ(*file->find("i64")->as_int(), -5);
  EXPECT_EQ(*file->find("f32")->as_float(), 0.5);
  EXPECT_EQ(*file->find("bool")->as_bool(), false);
  EXPECT_EQ((*file->find("array")->as_array())->size(), 2u);
  EXPECT_FALSE(file->find("string")->as_int());
}

TEST(GgufReader, RefusesTruncatedFiles) {
  const auto whole = one_tensor_file().bytes;
  // Cut inside the header, the metadata, the tensor info and the data.
  for (std::size_t size : {std::size_t{0}, std::size_t{3}, std::size_t{10}, std::size_t{30}, std::size_t{60},
                           std::size_t{90}, whole.size() - 1}) {
    const std::vector<std::byte> cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(size));
    auto file = gguf::parse(cut, "cut.gguf");
    ASSERT_FALSE(file) << size;
    const std::string& m = file.error().message();
    EXPECT_TRUE(m.find("truncated") != std::string::npos || m.find("remain") != std::string::npos ||
                m.find("outside the file") != std::string::npos || m.find("bad magic") != std::string::npos)
        << size << ": " << m;
  }
}

TEST(GgufReader, RefusesBadMagicAndVersions) {
  auto bytes = one_tensor_file().bytes;
  bytes[0] = std::byte{'X'};
  expect_parse_error(bytes, "bad magic");
  expect_parse_error(Bytes().header(0, 0, 1).bytes, "version 1 is not supported");
  expect_parse_error(Bytes().header(0, 0, 0x03000000).bytes, "big-endian");
  expect_parse_error(Bytes().header(0, 0, 7).bytes, "unknown GGUF version 7");
}

TEST(GgufReader, RefusesLyingCounts) {
  expect_parse_error(Bytes().header(0, 1ull << 60).bytes, "metadata entries");
  expect_parse_error(Bytes().header(1ull << 60, 0).bytes, "tensors");
  expect_parse_error(Bytes().header(0, 1).str("k").u32(8).u64(1ull << 62).bytes, "claims 4611686018427387904 bytes");
  expect_parse_error(Bytes().header(0, 1).u64(~0ull).bytes, "claims");
  expect_parse_error(Bytes().header(0, 1).str("k").u32(9).u32(10).u64(1ull << 61).zeros(64).bytes,
                     "claims 2305843009213693952 elements");
  expect_parse_error(Bytes().header(0, 1).str("k").u32(9).u32(8).u64(1000).zeros(64).bytes, "remain");
}

TEST(GgufReader, RefusesUnknownTypes) {
  expect_parse_error(Bytes().header(0, 1).str("k").u32(13).zeros(8).bytes, "unknown value type 13");
  expect_parse_error(Bytes().header(0, 1).str("k").u32(9).u32(77).u64(1).zeros(8).bytes, "unknown element type 77");
  expect_parse_error(Bytes().header(0, 1).str("k").u32(7).u32(2).bytes, "expected 0 or 1");
  expect_parse_error(one_tensor_file(9).bytes,
                     "Q8_1, which accord does not read (it reads F32, F16, Q8_0, Q4_0, BF16, Q2_K, Q3_K, Q4_K, Q5_K, "
                     "Q6_K, IQ4_XS, Q4_1, Q5_0, Q5_1 and IQ4_NL)");
  expect_parse_error(one_tensor_file(99).bytes, "type 99");
}

// ggml's Q4_1, Q5_0, Q5_1 and IQ4_NL (ggml_type 3, 6, 7, 20): 32 values in
// 20, 22, 24 and 18 bytes (ggml-common.h's block_q4_1 ... block_iq4_nl).
TEST(GgufReader, ReadsTheOtherBlocksOf32) {
  const struct {
    std::uint32_t type;
    const char* name;
    std::uint64_t bytes;
  } types[] = {{3, "Q4_1", 20}, {6, "Q5_0", 22}, {7, "Q5_1", 24}, {20, "IQ4_NL", 18}};
  for (const auto& t : types) {
    auto file = gguf::parse(one_tensor_file(t.type, 0, {32}).bytes, "ok.gguf");
    ASSERT_TRUE(file) << t.name << ": " << file.error().message();
    EXPECT_EQ(gguf::to_string(file->tensors[0].type), t.name);
    EXPECT_EQ(file->tensors[0].bytes, t.bytes) << t.name;
    expect_parse_error(one_tensor_file(t.type, 0, {48}).bytes,
                       std::string("rows of 48 values, not a multiple of the ") + t.name + " block of 32");
  }
}

// A number ggml does not name was reported as "tensor type type 512".
TEST(GgufReader, NamesAnUnknownTensorTypeOnce) {
  const auto bytes = one_tensor_file(512).bytes;
  expect_parse_error(bytes, "tensor 't' has unknown type 512, which accord does not read");
  EXPECT_EQ(gguf::parse(bytes, "bad.gguf").error().message().find("type type"), std::string::npos);
  expect_parse_error(one_tensor_file(15).bytes, "tensor 't' has type Q8_K, which accord does not read");
}

TEST(GgufReader, RefusesBadTensorInfos) {
  expect_parse_error(one_tensor_file(0, 4).bytes, "misaligned");
  expect_parse_error(one_tensor_file(0, 64).bytes, "outside the file");
  expect_parse_error(one_tensor_file(0, 0, {8, 1ull << 40}).bytes, "outside the file");
  expect_parse_error(one_tensor_file(0, 0, {8, 0}).bytes, "dimension 1 of 0");
  expect_parse_error(one_tensor_file(0, 0, {1ull << 40, 1ull << 40}).bytes, "too many elements");
  expect_parse_error(one_tensor_file(0, 0, {1, 1, 1, 1, 1}).bytes, "5 dimensions");
  expect_parse_error(one_tensor_file(8, 0, {8}).bytes, "not a multiple of the Q8_0 block of 32");
  Bytes twice;
  twice.header(2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).pad(32).zeros(64);
  expect_parse_error(twice.bytes, "tensor 't' appears twice");
  Bytes keys;
  keys.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
  expect_parse_error(keys.bytes, "metadata key 'k' appears twice");
}

TEST(GgufReader, RefusesBadAlignment) {
  Bytes b;
  b.header(1, 1).kv_u32("general.alignment", 24).tensor("t", {8}, 0, 0).pad(32).zeros(32);
  expect_parse_error(b.bytes, "power of two");
  Bytes ok;
  ok.header(1, 1).kv_u32("general.alignment", 64).tensor("t", {8}, 0, 0).pad(64).zeros(32);
  auto file = gguf::parse(ok.bytes, "ok.gguf");
  ASSERT_TRUE(file) << file.error().message();
  EXPECT_EQ(file->alignment, 64u);
  EXPECT_EQ(file->data_offset % 64, 0u);
}

// A valid small llama GGUF written by accord, and damaged copies of it.
class GgufModelErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig c = test::small_config();
    c.dim = 64;
    c.hidden_dim = 96;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    const Model bin = test::synthetic_model(dir_, {c, 3, llama2c::Layout::legacy});
    ASSERT_TRUE(write_gguf_model(dir_.file("m.gguf"), bin, llama_metadata(c), gguf::TensorType::q8_0));
  }

  // Rewrites m.gguf with metadata changed by `edit` and loads it.
  Result<Model> load_with(const std::function<void(gguf::Metadata&)>& edit) {
    const auto bytes = test::read_bytes(dir_.file("m.gguf"));
    auto file = gguf::parse(bytes, "m.gguf");
    EXPECT_TRUE(file);
    edit(file->metadata);
    auto model = Model::load(dir_.file("m.gguf"));
    EXPECT_TRUE(model);
    EXPECT_TRUE(write_gguf_model(dir_.file("edited.gguf"), *model, file->metadata, gguf::TensorType::q8_0));
    return Model::load(dir_.file("edited.gguf"));
  }

  void expect_refused(const std::function<void(gguf::Metadata&)>& edit, ErrorCode code, const std::string& fragment) {
    auto model = load_with(edit);
    ASSERT_FALSE(model) << fragment;
    EXPECT_EQ(model.error().code(), code) << model.error().message();
    EXPECT_NE(model.error().message().find(fragment), std::string::npos) << model.error().message();
  }

  static void set(gguf::Metadata& metadata, const std::string& key, gguf::Value value) {
    for (auto& [k, v] : metadata) {
      if (k == key) v = std::move(value);
    }
  }

  test::TempDir dir_;
};

TEST_F(GgufModelErrors, LoadsTheUndamagedFile) {
  auto model = load_with([](gguf::Metadata&) {});
  ASSERT_TRUE(model) << model.error().message();
  EXPECT_EQ(model->config().dim, 64);
}

TEST_F(GgufModelErrors, RefusesWrongOrMissingArchitectureKeys) {
  using gguf::Value;
  expect_refused([](auto& m) { set(m, "general.architecture", Value::string("gpt2")); }, ErrorCode::architecture,
                 "architecture 'gpt2' is not supported");
  expect_refused([](auto& m) { std::erase_if(m, [](auto& kv) { return kv.first == "llama.block_count"; }); },
                 ErrorCode::format, "missing metadata key llama.block_count");
  expect_refused([](auto& m) { set(m, "llama.block_count", Value::string("five")); }, ErrorCode::format,
                 "llama.block_count: expected an integer");
  expect_refused([](auto& m) { set(m, "llama.attention.head_count", Value::unsigned_int(ValueType::u32, 7)); },
                 ErrorCode::format, "not a multiple of n_heads");
  expect_refused([](auto& m) { set(m, "llama.rope.dimension_count", Value::unsigned_int(ValueType::u32, 8)); },
                 ErrorCode::architecture, "RoPE over 8");
  expect_refused([](auto& m) { m.emplace_back("llama.expert_count", Value::unsigned_int(ValueType::u32, 8)); },
                 ErrorCode::format, "expert_used_count is 0, expected 1..8");
  expect_refused(
      [](auto& m) {
        m.emplace_back("llama.expert_count", Value::unsigned_int(ValueType::u32, 8));
        m.emplace_back("llama.expert_used_count", Value::unsigned_int(ValueType::u32, 2));
      },
      ErrorCode::format, "missing tensor blk.0.ffn_gate_inp.weight");
  expect_refused(
      [](auto& m) {
        set(m, "general.architecture", Value::string("qwen2"));
        for (auto& [key, value] : m) {
          if (key.starts_with("llama.")) key.replace(0, 5, "qwen2");
        }
        m.emplace_back("qwen2.expert_count", Value::unsigned_int(ValueType::u32, 8));
      },
      ErrorCode::architecture, "architecture 'qwen2' with 8 experts is not supported");
  expect_refused([](auto& m) { m.emplace_back("llama.rope.scaling.type", Value::string("yarn")); },
                 ErrorCode::architecture, "RoPE scaling 'yarn' is not supported");
  expect_refused([](auto& m) { set(m, "general.architecture", Value::string("qwen2moe")); }, ErrorCode::architecture,
                 "architecture 'qwen2moe' is a mixture of experts");
  expect_refused([](auto& m) { m.emplace_back("llama.final_logit_softcapping", Value::floating(ValueType::f32, 30)); },
                 ErrorCode::architecture, "metadata llama.final_logit_softcapping is not supported");
}

// attention.key_length sets the heads' width apart from dim / heads: Q's
// rows are heads x key_length, and values must be as wide.
TEST_F(GgufModelErrors, KeyLengthShapesTheHeads) {
  using gguf::Value;
  expect_refused(
      [](auto& m) {
        m.emplace_back("llama.attention.key_length", Value::unsigned_int(ValueType::u32, 32));
        set(m, "llama.rope.dimension_count", Value::unsigned_int(ValueType::u32, 32));
      },
      ErrorCode::format, "tensor blk.0.attn_q.weight has shape [64, 64], but the metadata implies [64, 128]");
  expect_refused(
      [](auto& m) {
        m.emplace_back("llama.attention.key_length", Value::unsigned_int(ValueType::u32, 16));
        m.emplace_back("llama.attention.value_length", Value::unsigned_int(ValueType::u32, 8));
      },
      ErrorCode::architecture, "value heads of 8 dimensions beside key heads of 16");
}

// Linear RoPE scaling (rope.scaling.factor, the older rope.scale_linear)
// divides the angles; type "none" ignores the factor.
TEST_F(GgufModelErrors, LinearRopeScalingIsReadAsLlamaCppReadsIt) {
  using gguf::Value;
  const auto factor = [](const char* key) {
    return [key](gguf::Metadata& m) { m.emplace_back(key, Value::floating(ValueType::f32, 4.0)); };
  };
  for (const char* key : {"llama.rope.scaling.factor", "llama.rope.scale_linear"}) {
    auto model = load_with(factor(key));
    ASSERT_TRUE(model) << model.error().message();
    EXPECT_EQ(model->config().rope_freq_scale, 0.25f) << key;
  }
  auto unscaled = load_with([&](gguf::Metadata& m) {
    factor("llama.rope.scaling.factor")(m);
    m.emplace_back("llama.rope.scaling.type", Value::string("none"));
  });
  ASSERT_TRUE(unscaled) << unscaled.error().message();
  EXPECT_EQ(unscaled->config().rope_freq_scale, 1.0f);
}

// An infinite epsilon divides every activation to zero and the model
// repeats one token; the key is named.
TEST_F(GgufModelErrors, RefusesNonFiniteOrNonPositiveConfigurationFloats) {
  using gguf::Value;
  for (const char* key : {"llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base"}) {
    for (double bad : {double(INFINITY), -double(INFINITY), double(NAN), 0.0, -1.0}) {
      expect_refused([&](auto& m) { set(m, key, Value::floating(ValueType::f32, bad)); }, ErrorCode::format,
                     std::string(key) + ": " + Value::floating(ValueType::f32, bad).describe() +
                         " is not a finite positive number");
    }
  }
  // An f64 too large for a float is infinite once read.
  expect_refused([](auto& m) { set(m, "llama.rope.freq_base", Value::floating(ValueType::f64, 1e300)); },
                 ErrorCode::format, "llama.rope.freq_base: ");
}

TEST_F(GgufModelErrors, RefusesTensorsThatDoNotFitTheMetadata) {
  using gguf::Value;
  // More blocks than tensors, then an embedding of another width.
  expect_refused([](auto& m) { set(m, "llama.block_count", Value::unsigned_int(ValueType::u32, 4)); },
                 ErrorCode::format, "missing tensor blk.3.attn_norm.weight");
  expect_refused([](auto& m) { set(m, "llama.block_count", Value::unsigned_int(ValueType::u32, 2)); },
                 ErrorCode::architecture, "tensor blk.2.attn_norm.weight is not part of the llama architecture");
  expect_refused([](auto& m) { set(m, "llama.feed_forward_length", Value::unsigned_int(ValueType::u32, 128)); },
                 ErrorCode::format, "has shape [64, 96], but the metadata implies [64, 128]");
}

TEST_F(GgufModelErrors, DamagedDataSectionIsCaughtByTheTensorBounds) {
  auto bytes = test::read_bytes(dir_.file("m.gguf"));
  bytes.resize(bytes.size() - 100);
  test::write_bytes(dir_.file("short.gguf"), bytes);
  auto model = Model::load(dir_.file("short.gguf"));
  ASSERT_FALSE(model);
  EXPECT_NE(model.error().message().find("outside the file"), std::string::npos) << model.error().message();
}

}  // namespace
}  // namespace accord
