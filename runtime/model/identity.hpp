// A model's identity: a digest of its configuration and every weight, in a
// canonical order that does not depend on the file layout, so the same
// model in two formats has one identity. Prompt caches record it and
// refuse to load into any other model.
#pragma once

#include <functional>
#include <string>

#include "runtime/error.hpp"
#include "runtime/model/model.hpp"

namespace accord {

// How a file names one of its weights, for errors.
using TensorNamer = std::function<std::string(WeightId id)>;

// Sets contents.identity, 32 hex digits (XXH3-128), in one pass over every
// weight that also refuses (format error) a weight that is NaN or infinite:
// the file is damaged, and the model would generate garbage. The readers
// call it last; it reads every weight once, about 25 ms per 100M
// parameters here. `name` (a path) and `tensor_name` make the error.
Status identify(ModelContents& contents, const std::string& name, const TensorNamer& tensor_name);

// The identity load computed; costs nothing.
std::string model_identity(const Model& model);

}  // namespace accord
