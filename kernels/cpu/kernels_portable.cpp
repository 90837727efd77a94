// The portable path: the canonical order (kernel_table.hpp) in plain C++,
// lane by lane. It runs on any CPU and is the reference the vector paths
// must equal bit for bit.
#include <cstring>

#include "kernels/cpu/matmul_tiles.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu {

namespace {

struct Portable {
  struct Vec {
    float lane[kLanes];
  };
  struct Quants {
    std::int8_t value[2 * kBlock];
  };
  static constexpr int kRows = 4;
  static constexpr int kTokens = 2;
  static constexpr int kDecodeRows = 1;

  static Vec zero() { return Vec{}; }
  static Vec load(const std::byte* p) {
    Vec v;
    std::memcpy(v.lane, p, sizeof v.lane);
    return v;
  }
  static void store(float* p, const Vec& v) { std::memcpy(p, v.lane, sizeof v.lane); }
  static float half(std::uint16_t h) { return f16_to_f32(h); }
  static Vec load_half(const std::byte* p) {
    Vec v;
    for (int i = 0; i < kLanes; ++i) {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, sizeof h);
      v.lane[i] = half(h);
    }
    return v;
  }
  static Vec half_pair(std::uint16_t lo, std::uint16_t hi) { return pair(half(lo), half(hi)); }
  static Vec fma(const Vec& a, const Vec& b, const Vec& c) {
    Vec v;
    for (int i = 0; i < kLanes; ++i) v.lane[i] = __builtin_fmaf(a.lane[i], b.lane[i], c.lane[i]);
    return v;
  }
  static Vec mul(const Vec& a, const Vec& b) {
    Vec v;
    for (int i = 0; i < kLanes; ++i) v.lane[i] = a.lane[i] * b.lane[i];
    return v;
  }
  static float reduce(const Vec& v) {
    float s[kLanes];
    std::memcpy(s, v.lane, sizeof s);
    for (int width = kLanes / 2; width >= 1; width /= 2) {
      for (int i = 0; i < width; ++i) s[i] = s[i] + s[i + width];
    }
    return s[0];
  }
  static Vec pair(float lo, float hi) {
    Vec v;
    for (int i = 0; i < kLanes; ++i) v.lane[i] = i < kLanes / 2 ? lo : hi;
    return v;
  }
  static Quants quants(const std::int8_t* b0, const std::int8_t* b1) {
    Quants q{};
    std::memcpy(q.value, b0, kBlock);
    if (b1 != nullptr) std::memcpy(q.value + kBlock, b1, kBlock);
    return q;
  }
  static void unpack(const std::byte* nibbles, std::int8_t* out) {
    for (int j = 0; j < kBlock / 2; ++j) {
      const int packed = std::to_integer<int>(nibbles[j]);
      out[j] = static_cast<std::int8_t>(packed & 0x0F);
      out[j + kBlock / 2] = static_cast<std::int8_t>(packed >> 4);
    }
  }
  static Quants quant_pair(const std::int8_t* p) { return quants(p, p + kBlock); }
  static Quants nibbles(const std::byte* b0, const std::byte* b1) {
    Quants q{};
    unpack(b0, q.value);
    if (b1 != nullptr) unpack(b1, q.value + kBlock);
    return q;
  }
  // The operands as they come: partials() needs nothing prepared, nor
  // the token's byte offsets.
  using WeightSide = Quants;
  static Quants weight_side(const Quants& w) { return w; }
  // Lane l: start[l] plus the products of values 4l .. 4l + 3.
  static Vec sums_of_four(const Quants& w, const Quants& x, const std::int32_t* start) {
    Vec v;
    for (int lane = 0; lane < kLanes; ++lane) {
      int sum = start != nullptr ? start[lane] : 0;
      for (int j = 4 * lane; j < 4 * lane + 4; ++j) sum += w.value[j] * x.value[j];
      v.lane[lane] = static_cast<float>(sum);
    }
    return v;
  }
  struct Offsets {
    std::int32_t lane[kLanes];
  };
  static Vec partials(const Quants& w, const Quants& x, const Offsets&) { return sums_of_four(w, x, nullptr); }
  // Q4_0's nibbles are v + 8; the token's offsets (-8 sum x) start each sum.
  static Offsets load_offsets(const std::int32_t* p) {
    Offsets o;
    std::memcpy(o.lane, p, sizeof o.lane);
    return o;
  }
  static Vec nibble_partials(const Quants& w, const Quants& x, const Offsets& offsets) {
    return sums_of_four(w, x, offsets.lane);
  }
  static void super_block_lanes(const std::int8_t* q, const std::int16_t* scale, const std::int8_t* x, int c0, int c1,
                                std::int32_t* lanes) {
    for (int k = 0; k < 8; ++k) lanes[k] = 0;
    for (int i = 32 * c0; i < 32 * c1; ++i) lanes[i % 32 / 4] += scale[i / 16] * q[i] * x[i];
  }
  static std::int32_t group_sum(const std::int16_t* a, const std::int16_t* b) {
    std::int32_t total = 0;
    for (int g = 0; g < 16; ++g) total += a[g] * b[g];
    return total;
  }
};

}  // namespace

const KernelTable& portable_kernels() {
  static const KernelTable table = tiles::make_table<Portable>();
  return table;
}

}  // namespace accord::cpu
