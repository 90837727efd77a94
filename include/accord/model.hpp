// A model file, loaded once and shared by every session on it: Model::load
// (GGUF or llama2.c, told by its bytes), its ModelConfig and identity, and
// where sessions compute (BackendChoice, StageOptions).
#pragma once

#include "accord/error.hpp"
#include "runtime/model/backend.hpp"
#include "runtime/model/model.hpp"
