// Where the command line looks for the files that belong to a model.
#pragma once

#include <string>
#include <vector>

namespace accord::cli {

// The tokenizer written beside a synthetic model: "dir/name.bin" gives
// "dir/name.tokenizer.bin".
std::string companion_tokenizer_path(const std::string& model_path);

// Places to look for a model's tokenizer when none is given, in order: the
// companion path, then "tokenizer.bin" and "tok<vocab>.bin" beside it.
std::vector<std::string> tokenizer_candidates(const std::string& model_path, int vocab_size);

}  // namespace accord::cli
