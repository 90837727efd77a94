// accord inspect: a model's configuration, its tensor table and a digest.
#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>

#include "apps/accord/commands.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/model/model.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::cli {

namespace {

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? " x " : "") + std::to_string(shape[i]);
  return text;
}

void print_config(const Model& model) {
  const ModelConfig& c = model.config();
  std::printf("model        %s\nformat       %s (%zu bytes)\n", model.path().c_str(), model.format().c_str(),
              model.file_bytes());
  std::printf("architecture %s\n", std::string(c.architecture().name).c_str());
  std::printf("dim          %d\nhidden_dim   %d\nn_layers     %d\nn_heads      %d\nn_kv_heads   %d\nhead_dim     %d\n",
              c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_size());
  if (c.sliding_window > 0) {
    std::printf("sliding      %d positions, RoPE base %g\n", c.sliding_window, c.rope_theta_sliding);
  }
  if (c.routed()) std::printf("experts      %d, %d per token\n", c.n_experts, c.n_experts_used);
  if (c.rope_factors) std::printf("rope_factors yes\n");
  std::printf("vocab_size   %d\nseq_len      %d\nclassifier   %s\nrope_theta   %g\nnorm_eps     %g\n", c.vocab_size,
              c.seq_len, c.shared_classifier ? "shared with the embedding" : "separate", c.rope_theta, c.norm_eps);
  std::printf("weights     ");
  for (const auto& [type, bytes] : model.weight_bytes_by_type())
    std::printf(" %s %" PRIu64 " bytes", type.c_str(), bytes);
  std::printf(" (in place; %zu norm floats converted)\n", model.owned_floats());
  std::map<std::string, int> counts;
  for (const StoredTensor& t : model.tensors()) ++counts[t.type];
  std::printf("types       ");
  for (const auto& [type, count] : counts) std::printf(" %s x%d", type.c_str(), count);
  std::printf("\n");
}

const char* kind_name(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::llama2c: return "llama2.c";
    case TokenizerKind::sentencepiece: return "SentencePiece (llama)";
    case TokenizerKind::byte_bpe: return "byte-level BPE (gpt2)";
    case TokenizerKind::piece_bpe: return "Gemma 4 (gemma4)";
  }
  return "unknown";
}

// A GGUF file's vocabulary; a llama2.c checkpoint has none of its own.
void print_tokenizer(const Model& model) {
  if (!model.format().starts_with("gguf")) {
    std::printf("tokenizer    none in the file (a llama2.c tokenizer.bin beside it)\n");
    return;
  }
  auto tokenizer = Tokenizer::load(model.path());
  if (!tokenizer) {
    std::printf("tokenizer    unreadable: %s\n", tokenizer.error().message().c_str());
    return;
  }
  const std::string pre = tokenizer->pre_tokenizer().empty() ? "" : ", pre-tokenizer " + tokenizer->pre_tokenizer();
  std::printf("tokenizer    %s%s, %d tokens, BOS %s, %zu end-of-generation tokens\n", kind_name(tokenizer->kind()),
              pre.c_str(), tokenizer->vocab_size(), tokenizer->add_bos() ? "added" : "not added",
              tokenizer->end_of_generation().size());
}

void print_tensors(const Model& model) {
  std::printf("\n%zu tensors:\n%-28s %-5s %-18s %12s %12s\n", model.tensors().size(), "name", "type", "shape", "offset",
              "bytes");
  for (const StoredTensor& t : model.tensors()) {
    std::printf("%-28s %-5s %-18s %12" PRIu64 " %12" PRIu64 "\n", t.name.c_str(), t.type.c_str(),
                shape_text(t.shape).c_str(), t.offset, t.bytes);
  }
}

int run_inspect(const std::string& path) {
  auto model = Model::load(path);
  if (!model) return fail(model.error().message());
  print_config(*model);
  print_tokenizer(*model);
  print_tensors(*model);
  // The identity a prompt cache records: the same weights give the same
  // identity whatever file format they were loaded from.
  std::printf("\nidentity     %s (XXH3-128 of the configuration and float32 weights)\n",
              model_identity(*model).c_str());
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
