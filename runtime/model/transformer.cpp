#include "runtime/model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/ops.hpp"
#include "runtime/base/assert.hpp"
#include "runtime/model/feed_forward.hpp"
#include "runtime/model/residency.hpp"
#include "runtime/model/weights.hpp"

namespace accord {

namespace {

// llama2.c's arithmetic (RoPE tables, norms, SiLU) for a Llama model
// without factors or scaling, so that llama2.c files and their GGUF
// conversions keep the bits they always had; ggml's everywhere else, as
// llama.cpp computes the architectures accord checks against it.
bool llama2c_arithmetic(const ModelConfig& c) {
  return c.arch == Arch::llama && !c.rope_factors && c.rope_freq_scale == 1.0f && c.rope_scale == 1.0f && !c.routed();
}

// RoPE's tables of the global layers, or of the sliding-window ones, whose
// base is their own and whose angles are never scaled (llama.cpp's
// rope_freq_scale_train_swa), grown from `tables.positions` to `positions`.
void grow_rope_tables(const Model& model, bool sliding, int positions, RopeTables& tables) {
  const ModelConfig& c = model.config();
  const std::size_t size = static_cast<std::size_t>(positions) * (c.head_size() / 2);
  tables.cos.resize(size);
  tables.sin.resize(size);
  // A rank without units holds no factors (their pages may be confined
  // away) and uses no table.
  const bool held = model.scope().holds(c, {WeightKind::rope_factors});
  const cpu::RopeAngles angles{sliding ? c.rope_theta_sliding : c.rope_theta,
                               held ? model.weights().rope_factors : nullptr, sliding ? 1.0f : c.rope_freq_scale,
                               c.rope_scale};
  if (llama2c_arithmetic(c)) {
    cpu::rope_tables(tables.cos.data(), tables.sin.data(), positions, c.head_size(), angles.theta, tables.positions);
  } else {
    cpu::rope_tables_ggml(tables.cos.data(), tables.sin.data(), positions, c.head_size(), angles, tables.positions);
  }
  tables.positions = positions;
}

// The factor of the queries where the architecture scales them:
// 1/sqrt(head_size), except that llama.cpp gives Gemma 3 27B (its only
// 62-layer size) 1/sqrt(dim / n_heads), as Gemma's reference code does.
float query_scale(const ModelConfig& c) {
  const bool gemma3_27b = c.arch == Arch::gemma3 && c.n_layers == 62;
  return 1.0f / std::sqrt(static_cast<float>(gemma3_27b ? c.dim / c.n_heads : c.head_size()));
}

// rows[t] += bias for each of `batch` rows of `width`.
void add_bias(float* rows, const float* bias, int batch, int width) {
  for (std::size_t i = 0; i < static_cast<std::size_t>(batch) * width; ++i) rows[i] += bias[i % width];
}

// RMSNorm of each head of each row, in place (Q and K norms).
void norm_heads(float* rows, const float* weight, int batch, int heads, const ModelConfig& c, cpu::NormSum sum) {
  const int head = c.head_size();
  for (std::size_t h = 0; h < static_cast<std::size_t>(batch) * heads; ++h) {
    cpu::rmsnorm(rows + h * head, rows + h * head, weight, head, c.norm_eps, sum);
  }
}

}  // namespace

Transformer::Transformer(const Model& model, cpu::ThreadPool& pool) : model_(model), pool_(pool) {
  const ModelConfig& c = model_.config();
  const bool llama2c = llama2c_arithmetic(c);
  norm_sum_ = llama2c ? cpu::NormSum::in_float : cpu::NormSum::ggml;
  cpu::GateActivation activation = cpu::GateActivation::gelu_tanh;
  if (c.architecture().activation == Activation::silu) {
    activation = llama2c ? cpu::GateActivation::silu : cpu::GateActivation::silu_ggml;
  }
  feed_forward_ = make_feed_forward(c, pool_, activation);
  mixture_ = dynamic_cast<ExpertMixture*>(feed_forward_.get());
  for (int layer = 0; layer < c.n_layers; ++layer) slides_ = slides_ || c.slides(layer);
}

Transformer::~Transformer() = default;

void Transformer::cover_positions(int end) {
  if (end <= rope_.positions) return;
  // Grown by doubling, from a few hundred, up to the context.
  const int positions = std::min(model_.config().seq_len, std::max({end, 2 * rope_.positions, 256}));
  grow_rope_tables(model_, false, positions, rope_);
  if (slides_) grow_rope_tables(model_, true, positions, sliding_rope_);
}

Status check_tokens(const ModelConfig& c, std::span<const int> tokens, int pos) {
  if (tokens.empty()) return Error(ErrorCode::contract, "no tokens to run");
  for (int id : tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return Error(ErrorCode::contract, "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                            std::to_string(c.vocab_size - 1) + ")");
    }
  }
  if (pos < 0 || static_cast<long long>(pos) + static_cast<long long>(tokens.size()) > c.seq_len) {
    return Error(ErrorCode::contract, "positions " + std::to_string(pos) + ".." +
                                          std::to_string(pos + static_cast<long long>(tokens.size()) - 1) +
                                          " are past the model's context of " + std::to_string(c.seq_len) + " tokens");
  }
  return {};
}

void Transformer::resize_scratch(int batch) {
  const ModelConfig& c = model_.config();
  const std::size_t b = static_cast<std::size_t>(batch);
  for (auto* buffer : {&x_, &xb2_}) buffer->resize(b * c.dim);
  xb_.resize(b * std::max(c.dim, c.q_dim()));
  q_.resize(b * c.q_dim());
  for (auto* buffer : {&k_, &v_}) buffer->resize(b * c.kv_dim());
}

void Transformer::embed(std::span<const int> tokens) {
  batch_ = static_cast<int>(tokens.size());
  resize_scratch(batch_);
  const std::size_t dim = static_cast<std::size_t>(model_.config().dim);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    cpu::dequantize_row(model_.weights().token_embedding, tokens[t], x_.data() + t * dim);
  }
  if (model_.config().architecture().scaled_embedding) {
    const float scale = std::sqrt(static_cast<float>(dim));
    for (std::size_t i = 0; i < tokens.size() * dim; ++i) x_[i] *= scale;
  }
  // The pages of the rows read; without this they would pile up, and a
  // recent kernel maps a whole large folio (up to 2 MiB) per fault.
  if (embedding_is_lookup_only(model_.config(), model_.scope())) {
    const cpu::Matrix& embedding = model_.weights().token_embedding;
    release_mapped_pages(embedding.data, embedding.bytes());
  }
}

void Transformer::load_hidden(std::span<const float> rows) {
  batch_ = static_cast<int>(rows.size() / static_cast<std::size_t>(model_.config().dim));
  resize_scratch(batch_);
  std::copy(rows.begin(), rows.end(), x_.begin());
}

std::span<float> Transformer::hidden() { return {x_.data(), static_cast<std::size_t>(batch_) * model_.config().dim}; }

void Transformer::run_unit(int unit, int pos, KvCache& kv) {
  lanes_.assign(1, LaneRows{0, batch_, pos, &kv});
  run_lanes_unit(unit);
}

void Transformer::run_lanes_unit(int unit) {
  for (const LaneRows& lane : lanes_) cover_positions(lane.pos + lane.rows);
  if (residency_ != nullptr) residency_->before_unit(unit);
  compute_unit(unit);
  if (residency_ != nullptr) residency_->after_unit(unit);
}

void Transformer::compute_unit(int unit) {
  attend(unit);
  feed_forward(unit);
}

// Attention: queries, keys and values of every row at once; then each
// lane's keys and values go to its own cache, and its rows attend to it.
// Leaves the sublayer's output in xb2_.
void Transformer::attend(int unit) {
  const ModelConfig& c = model_.config();
  const Architecture& a = c.architecture();
  const LayerWeights& w = model_.weights().layers[static_cast<std::size_t>(unit)];
  const int batch = batch_;
  cpu::rmsnorm_rows(pool_, xb_.data(), x_.data(), w.rms_att, batch, c.dim, c.norm_eps, norm_sum_);
  const cpu::Product qkv[] = {{q_.data(), &w.wq}, {k_.data(), &w.wk}, {v_.data(), &w.wv}};
  cpu::matmul_group(pool_, xb_.data(), batch, c.dim, qkv);
  if (a.qkv_bias) {
    add_bias(q_.data(), w.bq, batch, c.q_dim());
    add_bias(k_.data(), w.bk, batch, c.kv_dim());
    add_bias(v_.data(), w.bv, batch, c.kv_dim());
  }
  if (a.qk_norm) {
    norm_heads(q_.data(), w.q_norm, batch, c.n_heads, c, norm_sum_);
    norm_heads(k_.data(), w.k_norm, batch, c.n_kv_heads, c, norm_sum_);
  }
  const cpu::AttentionHeads heads{c.n_heads,
                                  c.n_kv_heads,
                                  c.head_size(),
                                  a.scale_queries ? 1.0f : std::sqrt(static_cast<float>(c.head_size())),
                                  c.slides(unit) ? c.sliding_window : 0,
                                  norm_sum_ == cpu::NormSum::ggml};
  const std::size_t q_dim = static_cast<std::size_t>(c.q_dim()), kv_dim = static_cast<std::size_t>(c.kv_dim());
  for (const LaneRows& lane : lanes_) {
    const std::size_t first = static_cast<std::size_t>(lane.first_row);
    for (int t = 0; t < lane.rows; ++t) position_row(unit, first + static_cast<std::size_t>(t), lane.pos + t);
    lane.kv->write_rows(unit, lane.pos, lane.rows, &k_[first * kv_dim], &v_[first * kv_dim]);
    cpu::attention(pool_, &xb_[first * q_dim], &q_[first * q_dim], lane.kv->view(unit), lane.rows, lane.pos, heads);
  }
  cpu::matmul(pool_, xb2_.data(), xb_.data(), w.wo, batch);
  if (a.post_norms) {
    cpu::rmsnorm_rows(pool_, xb2_.data(), xb2_.data(), w.post_att_norm, batch, c.dim, c.norm_eps, norm_sum_);
  }
}

// RoPE on row `t`'s queries and keys at position `pos`, and the queries'
// scale where the architecture scales them rather than the scores.
void Transformer::position_row(int unit, std::size_t t, int pos) {
  const ModelConfig& c = model_.config();
  const Architecture& a = c.architecture();
  const RopeTables& tables = c.slides(unit) ? sliding_rope_ : rope_;
  const std::size_t angle = static_cast<std::size_t>(pos) * static_cast<std::size_t>(c.head_size() / 2);
  float* q = &q_[t * static_cast<std::size_t>(c.q_dim())];
  float* k = &k_[t * static_cast<std::size_t>(c.kv_dim())];
  const auto rope = a.rope == RopeStyle::adjacent_pairs ? cpu::rope : cpu::rope_neox;
  const bool fused = norm_sum_ == cpu::NormSum::ggml;
  rope(q, c.n_heads, c.head_size(), &tables.cos[angle], &tables.sin[angle], fused);
  rope(k, c.n_kv_heads, c.head_size(), &tables.cos[angle], &tables.sin[angle], fused);
  if (a.scale_queries) {
    const float scale = query_scale(c);
    for (int i = 0; i < c.q_dim(); ++i) q[i] *= scale;
  }
}

// The feed-forward after the residual of attention's output, dense or
// routed (feed_forward.hpp), added to the residual stream.
void Transformer::feed_forward(int unit) {
  normalize_for_feed_forward(unit);
  feed_forward_->run(model_.weights().layers[static_cast<std::size_t>(unit)], xb_.data(), xb_.data(), batch_);
  add_feed_forward(unit);
}

void Transformer::normalize_for_feed_forward(int unit) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[static_cast<std::size_t>(unit)];
  cpu::add_rmsnorm_rows(pool_, x_.data(), xb2_.data(), xb_.data(), w.rms_ffn, batch_, c.dim, c.norm_eps, norm_sum_);
}

void Transformer::add_feed_forward(int unit) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[static_cast<std::size_t>(unit)];
  if (c.architecture().post_norms) {
    cpu::rmsnorm_rows(pool_, xb_.data(), xb_.data(), w.post_ffn_norm, batch_, c.dim, c.norm_eps, norm_sum_);
  }
  cpu::add_rows(pool_, x_.data(), xb_.data(), batch_, c.dim);
}

std::map<int, ExpertRequest> Transformer::begin_unit(int unit, int pos, KvCache& kv,
                                                     const std::function<int(int)>& holder, int self) {
  ACCORD_ASSERT(mixture_ != nullptr, "only a routed unit's experts are spread over ranks");
  lanes_.assign(1, LaneRows{0, batch_, pos, &kv});
  cover_positions(pos + batch_);
  attend(unit);
  normalize_for_feed_forward(unit);
  const LayerWeights& w = model_.weights().layers[static_cast<std::size_t>(unit)];
  mixture_->route(w, xb_.data(), batch_);
  mixture_->run_held(w, xb_.data(), holder, self);
  return mixture_->requests(xb_.data(), holder, self);
}

Status Transformer::accept_experts(const std::function<int(int)>& holder, int rank, std::span<const float> outputs) {
  return mixture_->accept(holder, rank, outputs);
}

void Transformer::finish_unit(int unit) {
  mixture_->combine(xb_.data());
  add_feed_forward(unit);
}

void Transformer::serve_experts(int unit, std::span<const int> experts, std::span<const float> rows,
                                std::vector<float>& out) {
  ACCORD_ASSERT(mixture_ != nullptr, "only a routed unit's experts are spread over ranks");
  out.resize(rows.size());
  mixture_->run_slots(model_.weights().layers[static_cast<std::size_t>(unit)], experts, rows.data(), out.data());
}

std::vector<std::uint64_t> Transformer::expert_rows() const {
  if (mixture_ == nullptr) return {};
  const auto rows = mixture_->rows_by_expert();
  return {rows.begin(), rows.end()};
}

std::span<float> Transformer::head(Rows rows) {
  head_rows_.clear();
  for (int t = rows == Rows::all ? 0 : batch_ - 1; t < batch_; ++t) head_rows_.push_back(t);
  return classify(head_rows_);
}

std::span<float> Transformer::classify(std::span<const int> rows) {
  const ModelConfig& c = model_.config();
  const int count = static_cast<int>(rows.size());
  const auto dim = static_cast<std::size_t>(c.dim);
  for (std::size_t t = 0; t < rows.size(); ++t) {
    cpu::rmsnorm(&xb_[t * dim], &x_[static_cast<std::size_t>(rows[t]) * dim], model_.weights().rms_final, c.dim,
                 c.norm_eps, norm_sum_);
  }
  logits_.resize(static_cast<std::size_t>(count) * c.vocab_size);
  if (residency_ == nullptr) {
    cpu::matmul(pool_, logits_.data(), xb_.data(), model_.weights().classifier, count);
    return logits_;
  }
  const auto& parts = residency_->head_parts();
  for (std::size_t part = 0; part < parts.size(); ++part) {
    residency_->before_head_part(static_cast<int>(part));
    classify_rows(parts[part], count);
    residency_->after_head_part(static_cast<int>(part));
  }
  return logits_;
}

void Transformer::classify_rows(RowSpan rows, int count) {
  const cpu::Matrix& w = model_.weights().classifier;
  const cpu::Matrix part{w.type, w.row(rows.first), rows.count, w.cols};
  const auto vocab = static_cast<std::size_t>(model_.config().vocab_size);
  if (count == 1) {
    cpu::matmul(pool_, logits_.data() + rows.first, xb_.data(), part, 1);
    return;
  }
  // Each row of logits is (vocab) wide; the part's rows land in its columns.
  part_logits_.resize(static_cast<std::size_t>(count) * rows.count);
  cpu::matmul(pool_, part_logits_.data(), xb_.data(), part, count);
  for (std::size_t t = 0; t < static_cast<std::size_t>(count); ++t) {
    std::copy_n(part_logits_.begin() + static_cast<std::ptrdiff_t>(t * rows.count), rows.count,
                logits_.begin() + static_cast<std::ptrdiff_t>(t * vocab + rows.first));
  }
}

Result<std::span<const float>> Transformer::forward(std::span<const int> tokens, int pos, KvCache& kv) {
  if (Status ok = check_input(tokens, pos); !ok) return ok.error();
  if (kv.first_unit() != 0 || kv.unit_count() != model_.config().n_layers) {
    return Error(ErrorCode::contract, "the KV cache must hold every unit of the model for a full forward pass");
  }
  if (Status room = kv.prepare_write(pos, pos + static_cast<int>(tokens.size())); !room) return room.error();
  const Lane lane{tokens, pos, &kv, false};
  return std::span<const float>(forward_lanes({&lane, 1}));
}

std::span<float> Transformer::forward_lanes(std::span<const Lane> lanes,
                                            const std::function<void(int units_done)>& after_unit) {
  std::vector<int> tokens;
  std::vector<LaneRows> placed;
  head_rows_.clear();
  for (const Lane& lane : lanes) {
    const int first = static_cast<int>(tokens.size()), count = static_cast<int>(lane.tokens.size());
    placed.push_back({first, count, lane.pos, lane.kv});
    for (int t = lane.all_rows ? 0 : count - 1; t < count; ++t) head_rows_.push_back(first + t);
    tokens.insert(tokens.end(), lane.tokens.begin(), lane.tokens.end());
  }
  embed(tokens);
  lanes_ = std::move(placed);
  for (int unit = 0; unit < model_.config().n_layers; ++unit) {
    run_lanes_unit(unit);
    if (after_unit) after_unit(unit + 1);
  }
  return classify(head_rows_);
}

}  // namespace accord
