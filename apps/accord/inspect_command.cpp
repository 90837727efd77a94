// accord inspect: a model's configuration, its tensor table and a digest.
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <memory>

#include "apps/accord/commands.hpp"
#include "runtime/model/model.hpp"

namespace accord::cli {

namespace {

// XXH64 over the configuration (as int32 and float32 fields) and every
// weight as the float32 the forward pass reads, in one fixed order. A
// stand-in for the model identity of DESIGN.md: the same weights give the
// same digest whatever file format or quantization they were loaded from.
class Digest {
 public:
  Digest() : state_(XXH64_createState()) { XXH64_reset(state_, 0); }
  ~Digest() { XXH64_freeState(state_); }
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  template <class T>
  void add(const T* data, std::size_t count) {
    XXH64_update(state_, data, count * sizeof(T));
  }
  std::uint64_t value() const { return XXH64_digest(state_); }

 private:
  XXH64_state_t* state_;
};

std::uint64_t model_digest(const Model& model) {
  const ModelConfig& c = model.config();
  const std::int32_t shape[] = {c.dim,        c.hidden_dim, c.n_layers, c.n_heads,
                                c.n_kv_heads, c.vocab_size, c.seq_len,  c.shared_classifier ? 1 : 0};
  const float reals[] = {c.rope_theta, c.norm_eps};
  Digest digest;
  digest.add(shape, std::size(shape));
  digest.add(reals, std::size(reals));
  const ModelWeights& w = model.weights();
  const std::size_t D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), V = c.vocab_size;
  digest.add(w.token_embedding, V * D);
  for (const LayerWeights& l : w.layers) {
    digest.add(l.rms_att, D);
    digest.add(l.wq, D * D);
    digest.add(l.wk, KV * D);
    digest.add(l.wv, KV * D);
    digest.add(l.wo, D * D);
    digest.add(l.rms_ffn, D);
    digest.add(l.w1, H * D);
    digest.add(l.w2, D * H);
    digest.add(l.w3, H * D);
  }
  digest.add(w.rms_final, D);
  if (!c.shared_classifier) digest.add(w.classifier, V * D);
  return digest.value();
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? " x " : "") + std::to_string(shape[i]);
  return text;
}

void print_config(const Model& model) {
  const ModelConfig& c = model.config();
  std::printf("model        %s\nformat       %s (%zu bytes)\n", model.path().c_str(), model.format().c_str(),
              model.file_bytes());
  std::printf("dim          %d\nhidden_dim   %d\nn_layers     %d\nn_heads      %d\nn_kv_heads   %d\n", c.dim,
              c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads);
  std::printf("vocab_size   %d\nseq_len      %d\nclassifier   %s\nrope_theta   %g\nnorm_eps     %g\n", c.vocab_size,
              c.seq_len, c.shared_classifier ? "shared with the embedding" : "separate", c.rope_theta, c.norm_eps);
  std::printf("dequantized  %zu floats held in memory\n", model.owned_floats());
}

void print_tensors(const Model& model) {
  std::printf("\n%zu tensors:\n%-28s %-5s %-18s %12s %12s\n", model.tensors().size(), "name", "type", "shape",
              "offset", "bytes");
  for (const StoredTensor& t : model.tensors()) {
    std::printf("%-28s %-5s %-18s %12" PRIu64 " %12" PRIu64 "\n", t.name.c_str(), t.type.c_str(),
                shape_text(t.shape).c_str(), t.offset, t.bytes);
  }
}

int run_inspect(const std::string& path) {
  auto model = Model::load(path);
  if (!model) return fail(model.error().message());
  print_config(*model);
  print_tensors(*model);
  std::printf("\nidentity     xxh64:%016" PRIx64 " (configuration and float32 weights)\n", model_digest(*model));
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print a model's configuration, tensor table and identity");
  cmd->add_option("model", *path, "GGUF model or llama2.c checkpoint")->required();
  return [path] { return run_inspect(*path); };
}

}  // namespace accord::cli
