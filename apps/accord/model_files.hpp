// Where the command line looks for the files that belong to a model.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/model.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::cli {

// The tokenizer written beside a synthetic model: "dir/name.bin" gives
// "dir/name.tokenizer.bin".
std::string companion_tokenizer_path(const std::string& model_path);

// Places to look for a model's tokenizer when none is given, in order: the
// companion path, then "tokenizer.bin" and "tok<vocab>.bin" beside it.
std::vector<std::string> tokenizer_candidates(const std::string& model_path, int vocab_size);

// The tokenizer to use with the model at `model_path`, whose header
// (Model::read_header) is `header`: the file `explicit_path` names (GGUF or
// llama2.c) when not empty, else the vocabulary inside a GGUF model, else
// the first of tokenizer_candidates() that exists. Its vocabulary must be
// the model's size; the header is enough to check that, so a tokenizer
// that does not fit is refused before the weights are read.
Result<Tokenizer> find_tokenizer(const std::string& explicit_path, const std::string& model_path,
                                 const ModelHeader& header);

// True for a model read from a GGUF file, given its format name.
bool is_gguf(std::string_view format);

// The types a GGUF file's matrices can be written as, by the names the
// command line gives them (`convert --type`, `bench --precision`): f32,
// f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, the K-quants q2_k to q6_k
// and iq4_xs.
const std::map<std::string, gguf::TensorType>& matrix_types();
// Their names, for the command line's check.
std::vector<std::string> matrix_type_names();

}  // namespace accord::cli
