// Text in and out: a model's Tokenizer (SentencePiece or byte-level BPE,
// from a GGUF file or a tokenizer.bin) and the Sampler that picks a token
// from logits (argmax, temperature, top-p).
#pragma once

#include "accord/error.hpp"
#include "runtime/text/sampler.hpp"
#include "runtime/text/tokenizer.hpp"
