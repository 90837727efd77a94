// A model's identity: a digest of its configuration and every weight, in a
// canonical order that does not depend on the file layout, so the same
// model in two formats has one identity. Prompt caches record it and
// refuse to load into any other model.
#pragma once

#include <string>

#include "runtime/model/model.hpp"

namespace accord {

// 32 hex digits (XXH3-128). Reads every weight once: about 25 ms per
// 100M parameters here; callers keep the result.
std::string model_identity(const Model& model);

}  // namespace accord
