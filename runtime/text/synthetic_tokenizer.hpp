// A synthetic vocabulary to go with the synthetic models of
// runtime/model/synthetic.hpp: demos, tests and benchmarks that need text
// without a real tokenizer file.
#pragma once

#include "runtime/base/error.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord {

// The smallest vocabulary a synthetic tokenizer supports: <unk>, <s>, </s>
// and the 256 byte pieces, so that every text can be encoded.
inline constexpr int kMinSyntheticVocab = 3 + 256;

// A deterministic SentencePiece-style vocabulary of `vocab_size` pieces:
// the specials, the byte pieces, the printable ASCII characters, then
// concatenations of earlier pieces, with scores that favour longer ones.
Result<Tokenizer> synthetic_tokenizer(int vocab_size);

}  // namespace accord
