// GGUF files (versions 2 and 3, little-endian): the container, read and
// written. Metadata values of every GGUF type, tensor infos, alignment.
//
// parse() reads a whole file held in memory and checks every count, length,
// offset and shape against the bytes that are really there before it
// allocates or reads: a malformed file gets a format error naming the file
// and the problem, never a read past the buffer or an allocation sized by a
// lying count. It does not interpret the metadata; gguf_model.hpp and the
// tokenizer do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/base/error.hpp"

// kernels/cpu/matrix.hpp's; declared here so that the public headers that
// reach this one do not include the kernels.
namespace accord::cpu {
enum class WeightType : std::uint8_t;
}  // namespace accord::cpu

namespace accord::gguf {

// Metadata value types, numbered as in the file.
enum class ValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
std::string_view to_string(ValueType type);

// One metadata value. Integers keep their declared width in `type` and are
// held as 64-bit; arrays hold values of one element type.
class Value {
 public:
  using Array = std::vector<Value>;

  static Value unsigned_int(ValueType type, std::uint64_t v) { return Value(type, v); }
  static Value signed_int(ValueType type, std::int64_t v) { return Value(type, v); }
  static Value floating(ValueType type, double v) { return Value(type, v); }
  static Value boolean(bool v) { return Value(ValueType::boolean, v); }
  static Value string(std::string v) { return Value(ValueType::string, std::move(v)); }
  static Value array(ValueType element_type, Array items);

  ValueType type() const { return type_; }
  ValueType element_type() const { return element_type_; }  // arrays only

  // The value as a signed integer: any integer type whose value fits.
  Result<std::int64_t> as_int() const;
  // The value as a float: f32 or f64.
  Result<double> as_float() const;
  Result<bool> as_bool() const;
  Result<std::string_view> as_string() const;
  Result<const Array*> as_array() const;

  // Raw access for writers and printers.
  const std::variant<std::uint64_t, std::int64_t, double, bool, std::string, Array>& data() const { return data_; }
  // A short human-readable rendering; long arrays are abbreviated.
  std::string describe() const;

 private:
  template <class T>
  Value(ValueType type, T v) : type_(type), data_(std::move(v)) {}

  ValueType type_;
  ValueType element_type_ = ValueType::u8;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, Array> data_;
};

// Tensor element types accord reads, numbered as ggml's `ggml_type`: the
// types of cpu::traits (kernels/cpu/matrix.hpp).
enum class TensorType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  iq4_nl = 20,
  iq4_xs = 23,
  bf16 = 30
};
std::string_view to_string(TensorType type);
// The kernels' name of the same type.
cpu::WeightType weight_type(TensorType type);
TensorType tensor_type(cpu::WeightType type);

// Bytes of `elements` values of `type` (elements a multiple of its block).
std::uint64_t tensor_bytes(TensorType type, std::uint64_t elements);
// Values per block: 1 for f32, f16 and bf16, 32 for q8_0, q4_0, q4_1, q5_0,
// q5_1 and iq4_nl, 256 for the K-quants and iq4_xs.
std::uint64_t block_size(TensorType type);

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> shape;  // ggml order: shape[0] varies fastest
  TensorType type = TensorType::f32;
  std::uint64_t offset = 0;  // from the start of the file (parse adds the data section's start)
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
};

using Metadata = std::vector<std::pair<std::string, Value>>;

struct File {
  std::uint32_t version = 3;
  Metadata metadata;                // in file order
  std::vector<TensorInfo> tensors;  // in file order
  std::uint64_t alignment = 32;
  std::uint64_t data_offset = 0;  // start of the tensor data section

  // nullptr when absent.
  const Value* find(std::string_view key) const;
  const TensorInfo* tensor(std::string_view name) const;
};

inline constexpr std::uint64_t kDefaultAlignment = 32;

// True when `bytes` starts with the GGUF magic.
bool has_magic(std::span<const std::byte> bytes);

// Parses the header, metadata and tensor infos of `bytes`. `name` (a path)
// prefixes every error message.
Result<File> parse(std::span<const std::byte> bytes, const std::string& name);

// A tensor to write: its stored bytes, already in `type`.
struct TensorData {
  std::string name;
  std::vector<std::uint64_t> shape;  // ggml order
  TensorType type = TensorType::f32;
  std::vector<std::byte> bytes;
};

// Writes a version 3 file (via a temporary name and a rename), with
// general.alignment taken from `metadata` when present (else 32).
Status write(const std::string& path, const Metadata& metadata, const std::vector<TensorData>& tensors);

}  // namespace accord::gguf
