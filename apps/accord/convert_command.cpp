// accord convert: write a model as a GGUF file of F32, F16, Q8_0 or Q4_0.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <optional>

#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "runtime/io/mapped_file.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/model.hpp"

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

int run_convert(const ConvertArgs& args) {
  auto header = Model::read_header(args.in);
  if (!header) return fail(header.error().message());
  auto tokenizer = input_tokenizer(args, *header);
  if (!tokenizer) return fail(tokenizer.error().message());
  auto model = Model::load(args.in);
  if (!model) return fail(model.error().message());
  auto metadata = output_metadata(*model, *tokenizer);
  if (!metadata) return fail(metadata.error().message());
  const gguf::TensorType type = matrix_types().at(args.type);
  if (Status written = write_gguf_model(args.out, *model, std::move(*metadata), type); !written) {
    return fail(written.error().message());
  }
  std::cout << "wrote " << args.out << " (" << gguf::to_string(type) << ")" << std::endl;
  return 0;
}

}  // namespace

Command add_convert_command(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Write a model (GGUF or llama2.c) as a GGUF file with F32, F16, Q8_0 or Q4_0 matrices");
  cmd->add_option("--in", args->in, "model to read: GGUF or llama2.c checkpoint")->required();
  cmd->add_option("--out", args->out, "GGUF file to write")->required();
  cmd->add_option("--type", args->type, "type of the matrices: f32, f16, q8_0 or q4_0; norms stay f32")
      ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}))
      ->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "for a llama2.c input: its tokenizer (default: found beside the model as for generate)");
  return [args] { return run_convert(*args); };
}

}  // namespace accord::cli
