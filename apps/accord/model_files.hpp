// Where the command line looks for the files that belong to a model.
#pragma once

#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/tokenizer.hpp"

namespace accord::cli {

// The tokenizer written beside a synthetic model: "dir/name.bin" gives
// "dir/name.tokenizer.bin".
std::string companion_tokenizer_path(const std::string& model_path);

// Places to look for a model's tokenizer when none is given, in order: the
// companion path, then "tokenizer.bin" and "tok<vocab>.bin" beside it.
std::vector<std::string> tokenizer_candidates(const std::string& model_path, int vocab_size);

// The tokenizer to use with `model`: the file `explicit_path` names (GGUF
// or llama2.c) when not empty, else the vocabulary inside a GGUF model,
// else the first of tokenizer_candidates() that exists.
Result<Tokenizer> find_tokenizer(const std::string& explicit_path, const Model& model);

// True for a model read from a GGUF file.
bool is_gguf(const Model& model);

}  // namespace accord::cli
