// Text in and out: a model's Tokenizer (SentencePiece, byte-level BPE with
// its tokenizer.ggml.pre pre-tokenizer, or Gemma 4's, from a GGUF file or
// a tokenizer.bin; special tokens, add_bos and the tokens that end
// generation as llama.cpp reads them) and the Sampler that picks a token
// from logits (argmax, temperature, top-p).
#pragma once

#include "accord/error.hpp"
#include "runtime/text/sampler.hpp"
#include "runtime/text/tokenizer.hpp"
