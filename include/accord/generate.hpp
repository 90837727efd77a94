// Generation over a session: the Generator tokenizes, prefills, samples,
// streams and stops (GenerationOptions, GenerationResult, log-probabilities),
// over any GenerationTarget; SessionTarget makes one of a Session. A Drafter
// makes it speculative.
#pragma once

#include "accord/error.hpp"
#include "accord/session.hpp"
#include "accord/text.hpp"
#include "runtime/generate/drafter.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/generate/target.hpp"
