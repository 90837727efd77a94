#include "runtime/model/gguf.hpp"

#include <cstring>
#include <limits>
#include <unordered_set>

#include "kernels/cpu/matrix.hpp"
#include "runtime/io/durable_file.hpp"

namespace accord::gguf {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxArrayDepth = 4;
constexpr std::uint32_t kMaxDims = 4;
// Far above any real tensor; keeps every byte count below 2^64.
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 56;
constexpr std::uint64_t kMaxAlignment = std::uint64_t{1} << 20;

bool known(ValueType type) { return static_cast<std::uint32_t>(type) <= static_cast<std::uint32_t>(ValueType::f64); }

// The fewest bytes a value of `type` takes in a file.
std::uint64_t min_bytes(ValueType type) {
  switch (type) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean: return 1;
    case ValueType::u16:
    case ValueType::i16: return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32: return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64:
    case ValueType::string: return 8;
    case ValueType::array: return 12;
  }
  return 1;
}

// ggml's name of a tensor type; empty for a number ggml does not know.
std::string ggml_type_name(std::uint32_t type) {
  static const char* const names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                      "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  if (type < std::size(names)) return names[type];
  if (type == 30) return "BF16";
  return "";
}

bool supported(std::uint32_t type) {
  for (int i = 0; i < cpu::kWeightTypes; ++i) {
    if (cpu::traits(static_cast<cpu::WeightType>(i)).ggml_type == type) return true;
  }
  return false;
}

// "F32, F16, ... and Q6_K": the types accord reads, for an error message.
std::string supported_names() {
  std::string names;
  for (int i = 0; i < cpu::kWeightTypes; ++i) {
    names += (i == 0 ? "" : (i + 1 == cpu::kWeightTypes ? " and " : ", ")) +
             std::string(cpu::traits(static_cast<cpu::WeightType>(i)).name);
  }
  return names;
}

// A cursor over the file's bytes. The first failure sticks: later reads
// return zeros, so a parse can check once per entry instead of per field.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  std::uint64_t offset() const { return at_; }
  std::uint64_t remaining() const { return bytes_.size() - at_; }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }

  template <class T>
  T read(const std::string& what) {
    T value{};
    if (failed()) return value;
    if (remaining() < sizeof(T)) {
      fail("truncated: " + what + " needs " + std::to_string(sizeof(T)) + " bytes at offset " + std::to_string(at_) +
           " but the file ends at " + std::to_string(bytes_.size()));
      return value;
    }
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::string& what) {
    const auto length = read<std::uint64_t>("the length of " + what);
    if (failed()) return {};
    if (length > remaining()) {
      fail(what + " claims " + std::to_string(length) + " bytes at offset " + std::to_string(at_) + " but only " +
           std::to_string(remaining()) + " remain");
      return {};
    }
    std::string text(reinterpret_cast<const char*>(bytes_.data() + at_), static_cast<std::size_t>(length));
    at_ += length;
    return text;
  }

 private:
  std::span<const std::byte> bytes_;
  std::uint64_t at_ = 0;
  std::string error_;
};

Value read_value(Reader& r, ValueType type, const std::string& what, int depth);

Value read_array(Reader& r, const std::string& what, int depth) {
  const auto element = static_cast<ValueType>(r.read<std::uint32_t>("the element type of " + what));
  const auto count = r.read<std::uint64_t>("the length of " + what);
  if (r.failed()) return Value::boolean(false);
  if (!known(element)) {
    r.fail(what + " has unknown element type " + std::to_string(static_cast<std::uint32_t>(element)));
  } else if (element == ValueType::array && depth >= kMaxArrayDepth) {
    r.fail(what + " nests arrays deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  } else if (count > r.remaining() / min_bytes(element)) {
    r.fail(what + " claims " + std::to_string(count) + " elements of type " + std::string(to_string(element)) +
           " but only " + std::to_string(r.remaining()) + " bytes remain");
  }
  if (r.failed()) return Value::boolean(false);
  Value::Array items;
  items.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count && !r.failed(); ++i) items.push_back(read_value(r, element, what, depth + 1));
  return Value::array(element, std::move(items));
}

Value read_value(Reader& r, ValueType type, const std::string& what, int depth) {
  switch (type) {
    case ValueType::u8: return Value::unsigned_int(type, r.read<std::uint8_t>(what));
    case ValueType::u16: return Value::unsigned_int(type, r.read<std::uint16_t>(what));
    case ValueType::u32: return Value::unsigned_int(type, r.read<std::uint32_t>(what));
    case ValueType::u64: return Value::unsigned_int(type, r.read<std::uint64_t>(what));
    case ValueType::i8: return Value::signed_int(type, r.read<std::int8_t>(what));
    case ValueType::i16: return Value::signed_int(type, r.read<std::int16_t>(what));
    case ValueType::i32: return Value::signed_int(type, r.read<std::int32_t>(what));
    case ValueType::i64: return Value::signed_int(type, r.read<std::int64_t>(what));
    case ValueType::f32: return Value::floating(type, r.read<float>(what));
    case ValueType::f64: return Value::floating(type, r.read<double>(what));
    case ValueType::boolean: {
      const auto byte = r.read<std::uint8_t>(what);
      if (byte > 1) r.fail(what + " is a boolean of value " + std::to_string(byte) + ", expected 0 or 1");
      return Value::boolean(byte == 1);
    }
    case ValueType::string: return Value::string(r.read_string(what));
    case ValueType::array: return read_array(r, what, depth);
  }
  return Value::boolean(false);
}

void read_header(Reader& r, File& file, std::uint64_t& tensor_count, std::uint64_t& kv_count) {
  const auto magic = r.read<std::uint32_t>("the magic");
  if (!r.failed() && std::memcmp(&magic, kMagic, 4) != 0) r.fail("not a GGUF file (bad magic)");
  file.version = r.read<std::uint32_t>("the version");
  if (r.failed()) return;
  if (file.version == 1) {
    r.fail("GGUF version 1 is not supported; accord reads versions 2 and 3");
  } else if (file.version != 0 && (file.version & 0xFFFFu) == 0) {
    r.fail("big-endian GGUF files are not supported (version field " + std::to_string(file.version) + ")");
  } else if (file.version != 2 && file.version != 3) {
    r.fail("unknown GGUF version " + std::to_string(file.version) + "; accord reads versions 2 and 3");
  }
  tensor_count = r.read<std::uint64_t>("the tensor count");
  kv_count = r.read<std::uint64_t>("the metadata count");
  // Every entry takes some bytes, so a count the file cannot hold is a lie.
  if (!r.failed() && kv_count > r.remaining() / 13) {
    r.fail("the header claims " + std::to_string(kv_count) + " metadata entries, more than the remaining " +
           std::to_string(r.remaining()) + " bytes can hold");
  }
  if (!r.failed() && tensor_count > r.remaining() / 24) {
    r.fail("the header claims " + std::to_string(tensor_count) + " tensors, more than the remaining " +
           std::to_string(r.remaining()) + " bytes can hold");
  }
}

void read_metadata(Reader& r, File& file, std::uint64_t count) {
  std::unordered_set<std::string> seen;
  for (std::uint64_t i = 0; i < count && !r.failed(); ++i) {
    std::string key = r.read_string("the key of metadata entry " + std::to_string(i));
    const std::string what = "metadata key '" + key + "'";
    const auto type = static_cast<ValueType>(r.read<std::uint32_t>("the type of " + what));
    if (r.failed()) return;
    if (!known(type)) {
      r.fail(what + " has unknown value type " + std::to_string(static_cast<std::uint32_t>(type)));
      return;
    }
    Value value = read_value(r, type, what, 0);
    if (!seen.insert(key).second) r.fail(what + " appears twice");
    if (!r.failed()) file.metadata.emplace_back(std::move(key), std::move(value));
  }
}

TensorInfo read_tensor_info(Reader& r, std::uint64_t index) {
  TensorInfo info;
  info.name = r.read_string("the name of tensor " + std::to_string(index));
  const std::string what = "tensor '" + info.name + "'";
  const auto dims = r.read<std::uint32_t>("the dimension count of " + what);
  if (!r.failed() && (dims < 1 || dims > kMaxDims)) {
    r.fail(what + " has " + std::to_string(dims) + " dimensions, expected 1 to " + std::to_string(kMaxDims));
  }
  info.elements = 1;
  for (std::uint32_t d = 0; d < dims && !r.failed(); ++d) {
    const auto extent = r.read<std::uint64_t>("a dimension of " + what);
    if (!r.failed() && (extent == 0 || extent > kMaxElements / info.elements)) {
      r.fail(what + " has dimension " + std::to_string(d) + " of " + std::to_string(extent) +
             (extent == 0 ? "" : ", too many elements in all"));
    }
    info.shape.push_back(extent);
    info.elements *= extent;
  }
  const auto type = r.read<std::uint32_t>("the type of " + what);
  info.offset = r.read<std::uint64_t>("the offset of " + what);
  if (r.failed()) return info;
  if (!supported(type)) {
    const std::string known = ggml_type_name(type);
    r.fail(what + (known.empty() ? " has unknown type " + std::to_string(type) : " has type " + known) +
           ", which accord does not read (it reads " + supported_names() + ")");
    return info;
  }
  info.type = static_cast<TensorType>(type);
  if (info.shape[0] % block_size(info.type) != 0) {
    r.fail(what + " has rows of " + std::to_string(info.shape[0]) + " values, not a multiple of the " +
           std::string(to_string(info.type)) + " block of " + std::to_string(block_size(info.type)));
  }
  info.bytes = tensor_bytes(info.type, info.elements);
  return info;
}

std::uint64_t read_alignment(Reader& r, const File& file) {
  const Value* value = file.find("general.alignment");
  if (value == nullptr) return kDefaultAlignment;
  const auto alignment = value->as_int();
  if (!alignment || *alignment < 1 || static_cast<std::uint64_t>(*alignment) > kMaxAlignment ||
      (*alignment & (*alignment - 1)) != 0) {
    r.fail("general.alignment must be a power of two up to " + std::to_string(kMaxAlignment) + ", found " +
           value->describe());
    return kDefaultAlignment;
  }
  return static_cast<std::uint64_t>(*alignment);
}

// Checks each tensor's place in the data section and makes offsets absolute.
void place_tensors(Reader& r, File& file, std::uint64_t file_size) {
  for (TensorInfo& t : file.tensors) {
    const std::string what = "tensor '" + t.name + "'";
    if (t.offset % file.alignment != 0) {
      r.fail(what + " is misaligned: offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(file.alignment));
      return;
    }
    const std::uint64_t available = file_size - file.data_offset;
    if (t.offset > available || t.bytes > available - t.offset) {
      r.fail(what + " lies outside the file: " + std::to_string(t.bytes) + " bytes at data offset " +
             std::to_string(t.offset) + ", but the data section holds " + std::to_string(available));
      return;
    }
    t.offset += file.data_offset;
  }
}

void read_tensor_infos(Reader& r, File& file, std::uint64_t count, std::uint64_t file_size) {
  std::unordered_set<std::string> names;
  for (std::uint64_t i = 0; i < count && !r.failed(); ++i) {
    TensorInfo info = read_tensor_info(r, i);
    if (!r.failed() && !names.insert(info.name).second) r.fail("tensor '" + info.name + "' appears twice");
    if (!r.failed()) file.tensors.push_back(std::move(info));
  }
  if (r.failed()) return;
  file.alignment = read_alignment(r, file);
  const std::uint64_t misalignment = r.offset() % file.alignment;
  file.data_offset = r.offset() + (misalignment == 0 ? 0 : file.alignment - misalignment);
  if (file.tensors.empty()) return;  // vocabulary-only files may end here
  if (file.data_offset > file_size) {
    r.fail("truncated: the tensor data would start at offset " + std::to_string(file.data_offset) +
           " but the file ends at " + std::to_string(file_size));
    return;
  }
  place_tensors(r, file, file_size);
}

}  // namespace

std::string_view to_string(ValueType type) {
  static const char* const names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  const auto index = static_cast<std::uint32_t>(type);
  return index < std::size(names) ? names[index] : "unknown";
}

cpu::WeightType weight_type(TensorType type) {
  for (int i = 0; i < cpu::kWeightTypes; ++i) {
    const auto candidate = static_cast<cpu::WeightType>(i);
    if (cpu::traits(candidate).ggml_type == static_cast<std::uint32_t>(type)) return candidate;
  }
  return cpu::WeightType::f32;  // not reached: parse admits only the table's types
}

TensorType tensor_type(cpu::WeightType type) { return static_cast<TensorType>(cpu::traits(type).ggml_type); }

std::string_view to_string(TensorType type) {
  return supported(static_cast<std::uint32_t>(type)) ? cpu::to_string(weight_type(type)) : "unknown";
}

std::uint64_t block_size(TensorType type) { return cpu::traits(weight_type(type)).block_values; }

std::uint64_t tensor_bytes(TensorType type, std::uint64_t elements) {
  const cpu::TypeTraits t = cpu::traits(weight_type(type));
  return elements / t.block_values * t.block_bytes;
}

Value Value::array(ValueType element_type, Array items) {
  Value v(ValueType::array, std::move(items));
  v.element_type_ = element_type;
  return v;
}

Result<std::int64_t> Value::as_int() const {
  if (const auto* u = std::get_if<std::uint64_t>(&data_)) {
    if (*u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(*u);
    return Error(ErrorCode::format, "the integer " + std::to_string(*u) + " is too large");
  }
  if (const auto* i = std::get_if<std::int64_t>(&data_)) return *i;
  return Error(ErrorCode::format, "expected an integer, found " + std::string(to_string(type_)));
}

Result<double> Value::as_float() const {
  if (const auto* d = std::get_if<double>(&data_)) return *d;
  return Error(ErrorCode::format, "expected a float, found " + std::string(to_string(type_)));
}

Result<bool> Value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&data_)) return *b;
  return Error(ErrorCode::format, "expected a bool, found " + std::string(to_string(type_)));
}

Result<std::string_view> Value::as_string() const {
  if (const auto* s = std::get_if<std::string>(&data_)) return std::string_view(*s);
  return Error(ErrorCode::format, "expected a string, found " + std::string(to_string(type_)));
}

Result<const Value::Array*> Value::as_array() const {
  if (const auto* a = std::get_if<Array>(&data_)) return a;
  return Error(ErrorCode::format, "expected an array, found " + std::string(to_string(type_)));
}

std::string Value::describe() const {
  constexpr std::size_t kShown = 40;
  if (const auto* u = std::get_if<std::uint64_t>(&data_)) return std::to_string(*u);
  if (const auto* i = std::get_if<std::int64_t>(&data_)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&data_)) return std::to_string(*d);
  if (const auto* b = std::get_if<bool>(&data_)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&data_)) {
    return "\"" + (s->size() > kShown ? s->substr(0, kShown) + "..." : *s) + "\"";
  }
  const auto& items = std::get<Array>(data_);
  std::string text = "[" + std::to_string(items.size()) + " x " + std::string(to_string(element_type_)) + "]";
  for (std::size_t i = 0; i < items.size() && i < 3; ++i) text += (i == 0 ? " " : ", ") + items[i].describe();
  if (items.size() > 3) text += ", ...";
  return text;
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

const TensorInfo* File::tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool has_magic(std::span<const std::byte> bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) == 0;
}

Result<File> parse(std::span<const std::byte> bytes, const std::string& name) {
  Reader r(bytes);
  File file;
  std::uint64_t tensor_count = 0;
  std::uint64_t kv_count = 0;
  read_header(r, file, tensor_count, kv_count);
  if (!r.failed()) read_metadata(r, file, kv_count);
  if (!r.failed()) read_tensor_infos(r, file, tensor_count, bytes.size());
  if (r.failed()) return Error(ErrorCode::format, name + ": " + r.error());
  return file;
}

// ---------------------------------------------------------------------------
// Writing

namespace {

class Writer {
 public:
  template <class T>
  void put(T value) {
    const auto* p = reinterpret_cast<const char*>(&value);
    out_.append(p, sizeof value);
  }
  void put_string(std::string_view text) {
    put<std::uint64_t>(text.size());
    out_.append(text);
  }
  void put_value(const Value& value) {
    std::visit([&](const auto& v) { put_payload(value, v); }, value.data());
  }
  void pad_to(std::uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back('\0');
  }
  std::string& bytes() { return out_; }

 private:
  void put_payload(const Value& value, std::uint64_t v) { put_integer(value.type(), v); }
  void put_payload(const Value& value, std::int64_t v) { put_integer(value.type(), static_cast<std::uint64_t>(v)); }
  void put_payload(const Value& value, double v) {
    if (value.type() == ValueType::f32) {
      put(static_cast<float>(v));
    } else {
      put(v);
    }
  }
  void put_payload(const Value&, bool v) { put<std::uint8_t>(v ? 1 : 0); }
  void put_payload(const Value&, const std::string& v) { put_string(v); }
  void put_payload(const Value& value, const Value::Array& items) {
    put(static_cast<std::uint32_t>(value.element_type()));
    put<std::uint64_t>(items.size());
    for (const Value& item : items) put_value(item);
  }
  // Integers are stored two's complement, so the low bytes are the value.
  void put_integer(ValueType type, std::uint64_t v) {
    const std::size_t width = static_cast<std::size_t>(min_bytes(type));
    const auto* p = reinterpret_cast<const char*>(&v);
    out_.append(p, width);
  }

  std::string out_;
};

}  // namespace

Status write(const std::string& path, const Metadata& metadata, const std::vector<TensorData>& tensors) {
  std::uint64_t alignment = kDefaultAlignment;
  for (const auto& [key, value] : metadata) {
    if (key == "general.alignment" && value.as_int()) alignment = static_cast<std::uint64_t>(*value.as_int());
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return Error(ErrorCode::contract, "general.alignment must be a power of two");
  }
  Writer w;
  w.bytes().append(kMagic, 4);
  w.put<std::uint32_t>(3);
  w.put<std::uint64_t>(tensors.size());
  w.put<std::uint64_t>(metadata.size());
  for (const auto& [key, value] : metadata) {
    w.put_string(key);
    w.put(static_cast<std::uint32_t>(value.type()));
    w.put_value(value);
  }
  std::uint64_t offset = 0;
  for (const TensorData& t : tensors) {
    w.put_string(t.name);
    w.put(static_cast<std::uint32_t>(t.shape.size()));
    for (std::uint64_t extent : t.shape) w.put(extent);
    w.put(static_cast<std::uint32_t>(t.type));
    w.put(offset);
    offset += (t.bytes.size() + alignment - 1) / alignment * alignment;
  }
  w.pad_to(alignment);
  return write_atomically(path, [&](std::ostream& out) {
    out.write(w.bytes().data(), static_cast<std::streamsize>(w.bytes().size()));
    const std::string padding(static_cast<std::size_t>(alignment), '\0');
    for (const TensorData& t : tensors) {
      out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
      const std::uint64_t tail = t.bytes.size() % alignment;
      if (tail != 0) out.write(padding.data(), static_cast<std::streamsize>(alignment - tail));
    }
  });
}

}  // namespace accord::gguf
