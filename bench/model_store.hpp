// Synthetic model shapes for the benchmarks, and the store that writes
// and loads them once per process.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/model/synthetic.hpp"

namespace accord::bench {

struct Shape {
  std::string name;
  ModelConfig config;
};

inline Shape make_shape(std::string name, int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads,
                        int vocab_size, int seq_len) {
  ModelConfig c;
  c.dim = dim;
  c.hidden_dim = hidden_dim;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.vocab_size = vocab_size;
  c.seq_len = seq_len;
  return {std::move(name), c};
}

// The synthetic shapes by name: "15M" (dim 288) and "110M" (dim 768).
inline std::optional<Shape> shape_named(std::string_view name) {
  if (name == "15M") return make_shape("15M", 288, 768, 6, 6, 6, 32000, 256);
  if (name == "110M") return make_shape("110M", 768, 2048, 12, 12, 12, 32000, 1024);
  return std::nullopt;
}

// "15M", and "110M" when ACCORD_BENCH_110M=1.
inline std::vector<Shape> bench_shapes() {
  std::vector<Shape> shapes = {*shape_named("15M")};
  if (const char* v = std::getenv("ACCORD_BENCH_110M"); v != nullptr && std::string_view(v) == "1") {
    shapes.push_back(*shape_named("110M"));
  }
  return shapes;
}

// Loaded synthetic models by shape name; their files live in one temporary
// directory that the destructor (at process exit) removes.
class ModelStore {
 public:
  static ModelStore& instance() {
    static ModelStore store;
    return store;
  }

  ~ModelStore() {
    models_.clear();  // unmap before removing the files
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // The model of `shape`, written and loaded on first use; nullptr and a
  // message in `error` on failure.
  const Model* get(const Shape& shape, std::string& error) {
    if (auto it = models_.find(shape.name); it != models_.end()) return &it->second;
    if (dir_.empty() && !make_dir(error)) return nullptr;

    const std::string path = (dir_ / (shape.name + ".bin")).string();
    SyntheticModelOptions options;
    options.config = shape.config;
    if (Status written = write_synthetic_model(path, options); !written) {
      error = "write_synthetic_model: " + written.error().message();
      return nullptr;
    }
    Result<Model> model = Model::load(path);
    if (!model) {
      error = "Model::load: " + model.error().message();
      return nullptr;
    }
    return &models_.emplace(shape.name, std::move(model).value()).first->second;
  }

  // A folder for files beside the models (after the first get()).
  const std::filesystem::path& dir() const { return dir_; }

 private:
  bool make_dir(std::string& error) {
    std::string pattern = (std::filesystem::temp_directory_path() / "accord-bench-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      error = "cannot create a temporary directory";
      return false;
    }
    dir_ = pattern;
    return true;
  }

  std::filesystem::path dir_;
  std::map<std::string, Model> models_;
};

// The model of `shape`, or nullptr after marking the benchmark skipped.
inline const Model* model_or_skip(benchmark::State& state, const Shape& shape) {
  std::string error;
  const Model* model = ModelStore::instance().get(shape, error);
  if (model == nullptr) state.SkipWithError(error.c_str());
  return model;
}

}  // namespace accord::bench
