// A model's identity: a digest over the digests of its tensors, in a
// canonical order that does not depend on the file layout, so the same
// model in two formats has one identity (docs/residency.md). Prompt caches
// record it and refuse to load into any other model; nodes check it.
//
// Each tensor's digest covers its values as floats; an expert stack has a
// digest per expert. The identity covers the configuration and the list
// of digests, so a rank that reads only its own tensors (and experts) can
// check them against the list without reading the rest, and the list of a
// whole model can be put together from the shards of its ranks.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weights.hpp"

namespace accord {

// How a file names one of its weights, for errors.
using TensorNamer = std::function<std::string(WeightId id)>;

// How many digests a model shaped like `config` has: one per tensor, but
// one per expert of a routed block's expert stack, so that ranks holding
// different experts of a block each digest only theirs (docs/residency.md).
std::size_t digest_count(const ModelConfig& config);

// How errors name digest `index` < digest_count: "wq of layer 3", "expert
// 5 of w1 of layer 2".
std::string digest_name(const ModelConfig& config, std::size_t index);

// Sets contents.tensor_digests (32 hex digits, XXH3-128, per digest the
// scope holds, digest_count in all; empty for the others) and, when the scope holds every
// tensor, contents.identity, in one pass over the weights read that also
// refuses (format error) a weight that is NaN or infinite: the file is
// damaged, and the model would generate garbage. The scope and the number
// of tensors digested at once are `load`'s. The readers call it last; it
// reads each weight of the scope once, about 25 ms per 100M parameters and
// thread here. `name` (a path) and `tensor_name` make the error.
// When load.mapped and the scope holds less than everything, the rest of
// the mapping `bytes` is confined first (confine_mapping), so the pass maps
// only the shard into the process.
Status identify(ModelContents& contents, std::span<const std::byte> bytes, const std::string& name,
                const TensorNamer& tensor_name, const ModelLoad& load);

// The identity of a model shaped like `config` whose tensors have
// `digests`, in canonical order; a contract error when one is missing.
Result<std::string> combine_identity(const ModelConfig& config, const std::vector<std::string>& digests);

// Adds the digests `shard` holds (empty elsewhere) to `into`, a list of
// the same length. Where both hold a tensor's digest and they differ,
// changes nothing and returns that tensor's index.
std::optional<std::size_t> merge_digests(std::vector<std::string>& into, const std::vector<std::string>& shard);

// The identity load computed; costs nothing.
std::string model_identity(const Model& model);

}  // namespace accord
