// What the fuzz targets do with a successfully read model or tokenizer, so
// that AddressSanitizer sees every pointer the readers hand out used.
#pragma once

#include <string>
#include <string_view>

#include "runtime/model/model.hpp"
#include "runtime/model/weights.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::fuzz {

// Keeps a value alive so the compiler cannot drop the work that made it.
inline void consume(std::string_view text) {
  static volatile std::size_t sink;
  sink = sink + text.size();
}

inline void consume(float value) {
  static volatile float sink;
  sink = sink + value;
}

// Reads the first and last float of every piece of every weight tensor.
inline void touch_weights(const ModelContents& model) {
  for_each_weight(model.config, model.weights,
                  [](const WeightPiece& piece) { consume(piece.data[0] + piece.data[piece.count - 1]); });
}

// Encodes a few texts and decodes every token of the result.
inline void exercise(const Tokenizer& tokenizer) {
  for (const char* text : {"Hello world", " a  b\n\t'll 123 \xE4\xB8\xAD\xFF", "", "<s>x</s> <|im_end|>\n\n"}) {
    for (const bool parse_special : {false, true}) {
      auto ids = tokenizer.encode(text, EncodeOptions{.bos = true, .eos = true, .parse_special = parse_special});
      if (!ids) continue;
      int previous = tokenizer.bos_id();
      for (int id : *ids) {
        if (id < 0 || id >= tokenizer.vocab_size()) continue;
        consume(tokenizer.decode(previous, id));
        consume(tokenizer.token_text(id));
        previous = id;
      }
    }
  }
}

}  // namespace accord::fuzz
