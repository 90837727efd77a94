// accord synth: write a synthetic llama2.c model and its tokenizer.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "apps/accord/options.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/text/synthetic_tokenizer.hpp"

namespace accord::cli {

namespace {

struct SynthArgs {
  SyntheticModelOptions options;
  bool separate_classifier = false;
  std::string out;
};

int run_synth(SynthArgs args) {
  ModelConfig& config = args.options.config;
  config.shared_classifier = !args.separate_classifier;
  if (Status valid = validate(config); !valid) return fail("invalid shape: " + valid.error().message());
  auto tokenizer = synthetic_tokenizer(config.vocab_size);
  if (!tokenizer) return fail(tokenizer.error().message());
  if (Status written = write_synthetic_model(args.out, args.options); !written) return fail(written.error().message());
  const std::string tokenizer_path = companion_tokenizer_path(args.out);
  if (Status written = tokenizer->write_llama2c(tokenizer_path); !written) return fail(written.error().message());
  std::cout << "wrote " << args.out << " and " << tokenizer_path << std::endl;
  return 0;
}

}  // namespace

Command add_synth_command(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  ModelConfig& c = args->options.config;
  c = {288, 768, 6, 6, 6, 512, 256};
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a llama2.c model with deterministic random weights, and a tokenizer beside it");
  cmd->add_option("--dim", c.dim, "residual width")->capture_default_str();
  cmd->add_option("--hidden", c.hidden_dim, "feed-forward width")->capture_default_str();
  cmd->add_option("--layers", c.n_layers, "transformer blocks")->capture_default_str();
  cmd->add_option("--heads", c.n_heads, "query heads")->capture_default_str();
  cmd->add_option("--kv-heads", c.n_kv_heads, "key/value heads (divides --heads)")->capture_default_str();
  cmd->add_option("--vocab", c.vocab_size, "vocabulary size (at least 259)")->capture_default_str();
  cmd->add_option("--seq", c.seq_len, "context length")->capture_default_str();
  cmd->add_option("--seed", args->options.seed, "weight seed, 0 to 2^64-1")
      ->check(whole_number_range())
      ->capture_default_str();
  cmd->add_flag("--separate-classifier", args->separate_classifier,
                "store a classifier of its own instead of sharing the embedding");
  cmd->add_option("--out", args->out, "model file to write; the tokenizer goes to NAME.tokenizer.bin")->required();
  return [args] { return run_synth(*args); };
}

}  // namespace accord::cli
