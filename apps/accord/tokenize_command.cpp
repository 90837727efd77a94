// accord tokenize: a text's token ids and pieces, as llama-tokenize prints
// them (BOS and EOS as the vocabulary says, special tokens parsed).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "runtime/base/error.hpp"

namespace accord::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  bool json = false;
};

bool has_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

// A GGUF file's vocabulary (a vocabulary-only file will do), or the
// tokenizer beside a llama2.c checkpoint.
Result<Tokenizer> model_tokenizer(const std::string& path) {
  if (has_gguf_magic(path)) return Tokenizer::load(path);
  auto header = Model::read_header(path);
  if (!header) return header.error();
  return find_tokenizer("", path, *header);
}

// A piece on one line: newlines as \n, other unprintable bytes as \xNN.
std::string one_line(const std::string& piece) {
  std::string out;
  for (char c : printable(piece)) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

int run_tokenize(const TokenizeArgs& args) {
  auto tokenizer = model_tokenizer(args.model);
  if (!tokenizer) return fail(tokenizer.error().message());
  const EncodeOptions options{.bos = tokenizer->add_bos(), .eos = tokenizer->add_eos(), .parse_special = true};
  auto ids = tokenizer->encode(args.text, options);
  if (!ids) return fail(ids.error().message());
  std::vector<std::string> pieces;
  for (int id : *ids) pieces.push_back(tokenizer->token_text(id));
  if (args.json) {
    const nlohmann::json report = {{"ids", *ids}, {"pieces", pieces}};
    std::printf("%s\n", report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (std::size_t i = 0; i < ids->size(); ++i) std::printf("%6d -> '%s'\n", (*ids)[i], one_line(pieces[i]).c_str());
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize",
                                     "Print a text's token ids and pieces, as llama-tokenize does (BOS as the "
                                     "vocabulary says, special tokens such as <|im_start|> parsed)");
  cmd->add_option("--model", args->model,
                  "GGUF file (a vocabulary-only one will do) or llama2.c checkpoint with its tokenizer beside it")
      ->required();
  cmd->add_option("--text", args->text, "text to tokenize")->required();
  cmd->add_flag("--json", args->json, "print {\"ids\": [...], \"pieces\": [...]} instead of one token a line");
  return [args] { return run_tokenize(*args); };
}

}  // namespace accord::cli
