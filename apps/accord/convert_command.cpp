// accord convert: write a model as a GGUF file of F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL or one of the K-quants Q2_K to Q6_K or IQ4_XS, or
// as llama-quantize's mix of types for one of them.
#include <CLI/CLI.hpp>
#include <cctype>
#include <iostream>
#include <memory>
#include <optional>
#include <string_view>

#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "runtime/io/mapped_file.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/quant_mix.hpp"

namespace accord::cli {

namespace {

struct ConvertArgs {
  std::string in;
  std::string out;
  std::string tokenizer;
  std::string type = "f16";
};

// The tokenizer whose vocabulary a llama2.c input's GGUF file gets, found
// and checked against the header before the weights are read; none for a
// GGUF input, which keeps its own.
Result<std::optional<Tokenizer>> input_tokenizer(const ConvertArgs& args, const ModelHeader& header) {
  if (is_gguf(header.format)) {
    if (args.tokenizer.empty()) return std::optional<Tokenizer>();
    return Error(ErrorCode::contract, "--tokenizer applies to llama2.c inputs; a GGUF input keeps its own vocabulary");
  }
  auto found = find_tokenizer(args.tokenizer, args.in, header);
  if (!found) return found.error();
  return std::optional<Tokenizer>(std::move(*found));
}

// The metadata to write: a GGUF input's own (vocabulary included); for a
// llama2.c input, the llama keys and the vocabulary of its tokenizer.
Result<gguf::Metadata> output_metadata(const Model& model, const std::optional<Tokenizer>& tokenizer) {
  if (!tokenizer) {
    auto file = MappedFile::open(model.path());
    if (!file) return file.error();
    auto parsed = gguf::parse(file->bytes(), model.path());
    if (!parsed) return parsed.error();
    return std::move(parsed->metadata);
  }
  gguf::Metadata metadata = llama_metadata(model.config());
  for (auto& entry : tokenizer->gguf_metadata()) metadata.push_back(std::move(entry));
  return metadata;
}

// --type's names: one type for every matrix, or a llama-quantize mix.
std::vector<std::string> type_names() {
  std::vector<std::string> names = matrix_type_names();
  for (const char* mix :
       {"q2_k_mix", "q3_k_m", "q4_k_m", "q5_k_m", "iq4_xs_mix", "q4_1_mix", "q5_0_mix", "q5_1_mix", "iq4_nl_mix"}) {
    names.emplace_back(mix);
  }
  return names;
}

// "Q4_K", or for a mix "Q4_K_M".
std::string type_label(std::string name) {
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

Status write_converted(const ConvertArgs& args, const Model& model, gguf::Metadata metadata) {
  if (matrix_types().contains(args.type)) {
    return write_gguf_model(args.out, model, std::move(metadata), matrix_types().at(args.type));
  }
  // q2_k, iq4_xs, q4_1, ... name one type for every matrix; their mixes carry "_mix".
  const std::string_view name = std::string_view(args.type).substr(0, args.type.find("_mix"));
  const QuantMix mix = *quant_mix(name);
  const ModelConfig& c = model.config();
  const MixedModel shape{c.n_layers, c.n_heads, c.n_kv_heads, c.shared_classifier};
  return write_gguf_model(
      args.out, model, std::move(metadata),
      [mix, shape](const std::string& tensor) { return mix_type(mix, tensor, shape); }, file_type(mix));
}

int run_convert(const ConvertArgs& args) {
  auto header = Model::read_header(args.in);
  if (!header) return fail(header.error().message());
  auto tokenizer = input_tokenizer(args, *header);
  if (!tokenizer) return fail(tokenizer.error().message());
  auto model = Model::load(args.in);
  if (!model) return fail(model.error().message());
  auto metadata = output_metadata(*model, *tokenizer);
  if (!metadata) return fail(metadata.error().message());
  if (Status written = write_converted(args, *model, std::move(*metadata)); !written) {
    return fail(written.error().message());
  }
  std::cout << "wrote " << args.out << " (" << type_label(args.type) << ")" << std::endl;
  return 0;
}

}  // namespace

Command add_convert_command(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Write a model (GGUF or llama2.c) as a GGUF file with F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or "
      "K-quant matrices");
  cmd->add_option("--in", args->in, "model to read: GGUF or llama2.c checkpoint")->required();
  cmd->add_option("--out", args->out, "GGUF file to write")->required();
  cmd->add_option(
         "--type", args->type,
         "type of the matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k "
         "or iq4_xs, or a mix of types per tensor as llama-quantize makes it: q3_k_m, q4_k_m, q5_k_m, q2_k_mix "
         "(its Q2_K), iq4_xs_mix (its IQ4_XS), q4_1_mix, q5_0_mix, q5_1_mix or iq4_nl_mix (its Q4_1, ...; the "
         "output matrix in Q6_K); the K-quants and iq4_xs need rows of a multiple of 256 values; norms stay f32")
      ->check(CLI::IsMember(type_names()))
      ->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "for a llama2.c input: its tokenizer (default: found beside the model as for generate)");
  return [args] { return run_convert(*args); };
}

}  // namespace accord::cli
