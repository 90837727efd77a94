#include "kernels/cpu/matmul.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/aligned.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kquant.hpp"
#include "kernels/cpu/ops.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu {

namespace {

// Blocks of 32 meet the activations' 8-bit blocks (kernel_table.hpp).
bool is_block_type(WeightType type) { return traits(type).block_values == kQuantBlock; }
// Those with a minimum per block meet its sums too (Activations::sum_lanes).
bool has_minimums(WeightType type) { return type == WeightType::q4_1 || type == WeightType::q5_1; }
// The signed block types, whose products take Activations::byte_offsets
// (matmul_tiles.hpp, partials).
bool takes_byte_offsets(WeightType type) {
  return type == WeightType::q8_0 || type == WeightType::q5_0 || type == WeightType::iq4_nl;
}

// The activations' 8-bit form, reused across calls on the calling thread
// (the rank's own), so a decode step allocates nothing.
struct QuantizedBatch {
  AlignedVector<std::int8_t> quants;
  AlignedVector<float> scale_lanes;            // Activations::scale_lanes
  AlignedVector<std::int32_t> nibble_offsets;  // Activations::nibble_offsets
  AlignedVector<std::int32_t> byte_offsets;    // Activations::byte_offsets
  AlignedVector<float> sum_lanes;              // Activations::sum_lanes
};

// The activations' Q8_K form (Activations::k_quants, k_scales, k_sums).
struct SuperBlockBatch {
  AlignedVector<std::int8_t> quants;
  AlignedVector<float> scales;
  AlignedVector<std::int16_t> sums;
};

void quantize_super_blocks(ThreadPool& pool, const float* x, int tokens, int cols, SuperBlockBatch& batch) {
  const auto n = static_cast<std::size_t>(cols);
  batch.quants.resize(static_cast<std::size_t>(tokens) * n);
  batch.scales.resize(static_cast<std::size_t>(tokens) * (n / kSuperBlock));
  batch.sums.resize(static_cast<std::size_t>(tokens) * (n / 16));
  pool.parallel_for(static_cast<std::size_t>(tokens), [&](std::size_t begin, std::size_t end) {
    for (std::size_t t = begin; t < end; ++t) {
      quantize_q8_k(x + t * n, n, batch.quants.data() + t * n, batch.scales.data() + t * (n / kSuperBlock),
                    batch.sums.data() + t * (n / 16));
    }
  });
}

// Activations::nibble_offsets (factor -8) or byte_offsets (-128) of one
// token: lane l of pair p corrects partial l % 8 of block 2p + l / 8.
void four_sum_offsets(const std::int8_t* quants, int cols, int factor, std::int32_t* lanes) {
  const int blocks = cols / kBlock;
  for (int i = 0; i < block_pairs(cols) * kLanes; ++i) {
    const int block = i / kLanes * 2 + i % kLanes / (kLanes / 2);
    const std::int8_t* four = quants + block * kBlock + i % (kLanes / 2) * 4;
    lanes[i] = block < blocks ? factor * (four[0] + four[1] + four[2] + four[3]) : 0;
  }
}

// Activations::sum_lanes of one token: Q8_1's s = d * sum of the quants of
// block b, in lane 0 or 8 of its pair, from the token's scale lanes.
void sum_lanes(const std::int8_t* quants, const float* scale_lanes, int cols, float* lanes) {
  const int blocks = cols / kBlock;
  for (int i = 0; i < block_pairs(cols) * kLanes; ++i) {
    const int block = i / kLanes * 2 + i % kLanes / (kLanes / 2);
    const bool first = i % (kLanes / 2) == 0 && block < blocks;
    int sum = 0;
    for (int j = 0; first && j < kBlock; ++j) sum += quants[block * kBlock + j];
    lanes[i] = first ? static_cast<float>(sum) * scale_lanes[i] : 0.0f;
  }
}

// What a pass's block weights need beside the quants (Activations).
struct OffsetNeeds {
  bool nibbles = false;  // Q4_0's offsets
  bool bytes = false;    // Q8_0's offsets
  bool sums = false;     // Q8_1's sums: Q4_1, Q5_1
};

// Quantizes every token of x into `batch`, for a product with `cols`
// inputs, with the offsets and sums asked for; the pool's threads take
// tokens.
void quantize_batch(ThreadPool& pool, const float* x, int tokens, int cols, OffsetNeeds offsets,
                    QuantizedBatch& batch) {
  const auto lanes_per_token = static_cast<std::size_t>(block_pairs(cols)) * kLanes;
  batch.quants.resize(static_cast<std::size_t>(tokens) * cols);
  batch.scale_lanes.resize(static_cast<std::size_t>(tokens) * lanes_per_token);
  if (offsets.nibbles) batch.nibble_offsets.resize(static_cast<std::size_t>(tokens) * lanes_per_token);
  if (offsets.bytes) batch.byte_offsets.resize(static_cast<std::size_t>(tokens) * lanes_per_token);
  if (offsets.sums) batch.sum_lanes.resize(static_cast<std::size_t>(tokens) * lanes_per_token);
  pool.parallel_for(static_cast<std::size_t>(tokens), [&](std::size_t begin, std::size_t end) {
    for (std::size_t t = begin; t < end; ++t) {
      // The scales land at the start of the token's lanes, then spread
      // from the back (lane i takes scale i / 8, never ahead of i).
      float* lanes = batch.scale_lanes.data() + t * lanes_per_token;
      const auto blocks = static_cast<std::size_t>(cols / kBlock);
      std::int8_t* quants = batch.quants.data() + t * cols;
      quantize_activations(x + t * cols, cols, quants, lanes);
      for (std::size_t i = lanes_per_token; i-- > 0;) {
        const std::size_t block = i / (kLanes / 2);
        lanes[i] = block < blocks ? lanes[block] : 0.0f;
      }
      if (offsets.nibbles) four_sum_offsets(quants, cols, -8, batch.nibble_offsets.data() + t * lanes_per_token);
      if (offsets.bytes) four_sum_offsets(quants, cols, -128, batch.byte_offsets.data() + t * lanes_per_token);
      if (offsets.sums) sum_lanes(quants, lanes, cols, batch.sum_lanes.data() + t * lanes_per_token);
    }
  });
}

// What the weights of a pass need of its input.
struct InputNeeds {
  bool quantized = false;     // an 8-bit form: a block type is among them
  OffsetNeeds offsets;        // and the offsets and sums of some block types
  bool super_blocks = false;  // Q8_K: a K-quant is among them
  bool bf16 = false;          // the values rounded to BF16

  void add(const Matrix& w) {
    bf16 = bf16 || w.type == WeightType::bf16;
    quantized = quantized || is_block_type(w.type);
    offsets.nibbles = offsets.nibbles || w.type == WeightType::q4_0;
    offsets.bytes = offsets.bytes || takes_byte_offsets(w.type);
    offsets.sums = offsets.sums || has_minimums(w.type);
    super_blocks = super_blocks || is_k_quant(w.type);
    if (w.cols % static_cast<int>(traits(w.type).block_values) != 0) {
      throw std::invalid_argument(std::string("matmul: a ") + to_string(w.type) + " matrix of " +
                                  std::to_string(w.cols) + " columns, not whole blocks");
    }
  }
};

// The input of a pass: x, with what its weights need.
Activations prepare(ThreadPool& pool, const float* x, int batch, int cols, InputNeeds needs) {
  Activations activations;
  activations.values = x;
  activations.batch = batch;
  activations.cols = cols;
  if (needs.super_blocks) {
    thread_local SuperBlockBatch super_blocks;
    quantize_super_blocks(pool, x, batch, cols, super_blocks);
    activations.k_quants = super_blocks.quants.data();
    activations.k_scales = super_blocks.scales.data();
    activations.k_sums = super_blocks.sums.data();
  }
  if (needs.bf16) {
    thread_local AlignedVector<float> rounded;
    rounded.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(cols));
    for (std::size_t i = 0; i < rounded.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
    activations.bf16_values = rounded.data();
  }
  if (needs.quantized) {
    thread_local QuantizedBatch quantized;
    quantize_batch(pool, x, batch, cols, needs.offsets, quantized);
    activations.quants = quantized.quants.data();
    activations.scale_lanes = quantized.scale_lanes.data();
    if (needs.offsets.nibbles) activations.nibble_offsets = quantized.nibble_offsets.data();
    if (needs.offsets.bytes) activations.byte_offsets = quantized.byte_offsets.data();
    if (needs.offsets.sums) activations.sum_lanes = quantized.sum_lanes.data();
  }
  return activations;
}

MatmulRows kernel_for(WeightType type) { return active_kernels().by_type[static_cast<int>(type)]; }

// The activations of `slice`'s tokens: each form's rows from the slice's
// first token on (every form lays out its tokens one after another).
Activations tokens_of(const Activations& x, TokenSlice slice) {
  const auto first = static_cast<std::size_t>(slice.first_token);
  const auto cols = static_cast<std::size_t>(x.cols);
  const std::size_t lanes = static_cast<std::size_t>(block_pairs(x.cols)) * kLanes;
  auto offset = [](auto* p, std::size_t by) { return p != nullptr ? p + by : p; };
  Activations part = x;
  part.values = offset(x.values, first * cols);
  part.bf16_values = offset(x.bf16_values, first * cols);
  part.quants = offset(x.quants, first * cols);
  part.scale_lanes = offset(x.scale_lanes, first * lanes);
  part.nibble_offsets = offset(x.nibble_offsets, first * lanes);
  part.byte_offsets = offset(x.byte_offsets, first * lanes);
  part.sum_lanes = offset(x.sum_lanes, first * lanes);
  part.k_quants = offset(x.k_quants, first * cols);
  part.k_scales = offset(x.k_scales, first * (cols / kSuperBlock));
  part.k_sums = offset(x.k_sums, first * (cols / 16));
  part.batch = slice.tokens;
  return part;
}

// The gate function of `tokens` rows of hidden [begin, end), each row
// `width` wide, with their up rows.
void gate_rows(GateActivation activation, float* hidden, const float* up, int tokens, std::size_t width,
               std::size_t begin, std::size_t end) {
  const int n = static_cast<int>(end - begin);
  for (std::size_t t = 0; t < static_cast<std::size_t>(tokens); ++t) {
    float* row = hidden + t * width + begin;
    const float* up_row = up + t * width + begin;
    if (activation == GateActivation::silu) {
      silu_mul(row, up_row, n);
    } else if (activation == GateActivation::silu_ggml) {
      silu_mul_ggml(row, up_row, n);
    } else {
      gelu_tanh_mul(row, up_row, n);
    }
  }
}

// Runs fn(product, from, to) for the rows [from, to) of each product that
// [begin, end) of all their rows, one product after another, covers.
template <class Products, class Rows, class Fn>
void for_rows_of(const Products& products, Rows rows_of, std::size_t begin, std::size_t end, Fn fn) {
  std::size_t first = 0;
  for (const auto& p : products) {
    const std::size_t last = first + rows_of(p);
    const std::size_t from = std::max(begin, first), to = std::min(end, last);
    if (from < to) fn(p, from - first, to - first);
    first = last;
  }
}

// Threads take this many weight rows at least: a few register tiles.
constexpr std::size_t kMinRowsPerChunk = 16;

}  // namespace

void quantize_activations(const float* x, int n, std::int8_t* quants, float* scales) {
  active_kernels().quantize(x, n, quants, scales);
}

void matmul(ThreadPool& pool, float* out, const float* x, const Matrix& w, int batch) {
  const Product product{out, &w};
  matmul_group(pool, x, batch, w.cols, {&product, 1});
}

void matmul_group(ThreadPool& pool, const float* x, int batch, int cols, std::span<const Product> products) {
  InputNeeds needs;
  std::size_t total_rows = 0;
  for (const Product& p : products) {
    if (p.w->cols != cols) throw std::invalid_argument("matmul_group: a weight's columns differ from the input's");
    needs.add(*p.w);
    total_rows += static_cast<std::size_t>(p.w->rows);
  }
  const Activations activations = prepare(pool, x, batch, cols, needs);
  // The products' rows, one after another, are split among threads; each
  // weight row is read once per batch.
  auto rows = [](const Product& p) { return static_cast<std::size_t>(p.w->rows); };
  pool.parallel_for(
      total_rows,
      [&](std::size_t begin, std::size_t end) {
        for_rows_of(products, rows, begin, end, [&](const Product& p, std::size_t from, std::size_t to) {
          kernel_for(p.w->type)(*p.w, activations, p.out, static_cast<int>(from), static_cast<int>(to));
        });
      },
      kMinRowsPerChunk);
}

void matmul_slices(ThreadPool& pool, const float* x, int batch, int cols, std::span<const SliceProduct> products) {
  InputNeeds needs;
  std::size_t total_rows = 0;
  for (const SliceProduct& p : products) {
    if (p.w->cols != cols) throw std::invalid_argument("matmul_slices: a weight's columns differ from the input's");
    needs.add(*p.w);
    total_rows += static_cast<std::size_t>(p.w->rows);
  }
  const Activations activations = prepare(pool, x, batch, cols, needs);
  auto rows = [](const SliceProduct& p) { return static_cast<std::size_t>(p.w->rows); };
  pool.parallel_for(
      total_rows,
      [&](std::size_t begin, std::size_t end) {
        for_rows_of(products, rows, begin, end, [&](const SliceProduct& p, std::size_t from, std::size_t to) {
          kernel_for(p.w->type)(*p.w, tokens_of(activations, p.slice), p.out, static_cast<int>(from),
                                static_cast<int>(to));
        });
      },
      kMinRowsPerChunk);
}

void gated_matmul(ThreadPool& pool, float* hidden, float* up_scratch, const float* x, int batch, const Matrix& gate,
                  const Matrix& up, GateActivation activation) {
  const GatedSlice whole{{0, batch}, &gate, &up, hidden, up_scratch};
  gated_matmul_slices(pool, x, batch, gate.cols, {&whole, 1}, activation);
}

void gated_matmul_slices(ThreadPool& pool, const float* x, int batch, int cols, std::span<const GatedSlice> products,
                         GateActivation activation) {
  InputNeeds needs;
  std::size_t total_rows = 0;
  for (const GatedSlice& p : products) {
    if (p.gate->rows != p.up->rows || p.gate->cols != p.up->cols || p.gate->cols != cols) {
      throw std::invalid_argument("gated_matmul: the gate and up matrices differ in shape, or from the input");
    }
    needs.add(*p.gate);
    needs.add(*p.up);
    total_rows += static_cast<std::size_t>(p.gate->rows);
  }
  const Activations activations = prepare(pool, x, batch, cols, needs);
  // A thread gates the rows it computed at once.
  auto rows = [](const GatedSlice& p) { return static_cast<std::size_t>(p.gate->rows); };
  pool.parallel_for(total_rows, [&](std::size_t begin, std::size_t end) {
    for_rows_of(products, rows, begin, end, [&](const GatedSlice& p, std::size_t from, std::size_t to) {
      const Activations part = tokens_of(activations, p.slice);
      kernel_for(p.gate->type)(*p.gate, part, p.hidden, static_cast<int>(from), static_cast<int>(to));
      kernel_for(p.up->type)(*p.up, part, p.up_scratch, static_cast<int>(from), static_cast<int>(to));
      gate_rows(activation, p.hidden, p.up_scratch, p.slice.tokens, rows(p), from, to);
    });
  });
}

float dot(const float* a, const float* b, int n) { return active_kernels().dot(a, b, n); }

void dequantize_row(const Matrix& w, int row, float* out) {
  dequantize_values(w.type, out, w.row(row), static_cast<std::size_t>(w.cols));
}

void dequantize(const Matrix& w, float* out) {
  for (int r = 0; r < w.rows; ++r) dequantize_row(w, r, out + static_cast<std::size_t>(r) * w.cols);
}

}  // namespace accord::cpu
