// The backend seam (runtime/model/stage_backend.hpp): the session's state
// reaches a stage's keys and values only through its KvStore, and a backend
// that cannot run is a clear error, never a crash or a silent CPU run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "runtime/model/stage_backend.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/rank_stage.hpp"
#include "runtime/rank/state.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

// Keys and values that live apart from the host pointers the CPU kernels
// use, as a device's do: every row crosses by copy, and the store counts the
// crossings.
class CopyingKvStore final : public KvStore {
 public:
  CopyingKvStore(const ModelConfig& config, int units)
      : KvStore(config, 0, units), keys_(capacity_bytes() / sizeof(float) / 2), values_(keys_.size()) {}

  Status reserve(int) override { return {}; }
  int reserved() const override { return capacity(); }
  void shrink_to(int) override {}
  std::uint64_t held_bytes() const override { return capacity_bytes(); }

  void view_rows(int unit, int first, int count, const RowsView& see) const override {
    ++views;
    const auto from = keys_.begin() + offset(unit, first), to = keys_.begin() + offset(unit, first + count);
    const std::vector<float> keys(from, to);
    const std::vector<float> values(values_.begin() + (from - keys_.begin()), values_.begin() + (to - keys_.begin()));
    see(keys, values);
  }
  void write_rows(int unit, int first, int count, const float* keys, const float* values) override {
    ++writes;
    const auto floats = static_cast<std::ptrdiff_t>(count) * kv_dim();
    std::copy(keys, keys + floats, keys_.begin() + offset(unit, first));
    std::copy(values, values + floats, values_.begin() + offset(unit, first));
  }

  mutable int views = 0;
  int writes = 0;

 private:
  std::ptrdiff_t offset(int unit, int row) const {
    return (static_cast<std::ptrdiff_t>(unit - first_unit()) * capacity() + row) * kv_dim();
  }
  std::vector<float> keys_, values_;
};

// Writes rows [first, first + count) of every unit with values from `seed`.
void fill_rows(KvStore& kv, int first, int count, unsigned seed) {
  ASSERT_TRUE(kv.reserve(first + count));
  const auto floats = static_cast<std::size_t>(count) * kv.kv_dim();
  for (int u = kv.first_unit(); u < kv.first_unit() + kv.unit_count(); ++u) {
    const std::vector<float> keys = test::random_floats(floats, seed + 2 * static_cast<unsigned>(u));
    const std::vector<float> values = test::random_floats(floats, seed + 2 * static_cast<unsigned>(u) + 1);
    kv.write_rows(u, first, count, keys.data(), values.data());
  }
}

TEST(StageBackend, StateRollsBackAndDigestsAStoreItReachesOnlyByCopies) {
  const ModelConfig config = test::small_config();
  CopyingKvStore apart(config, 2);
  KvCache host(config, 0, 2);
  SessionState state(apart), host_state(host);
  const std::vector<int> ids = {3, 4, 5, 6};
  for (KvStore* kv : {static_cast<KvStore*>(&apart), static_cast<KvStore*>(&host)}) fill_rows(*kv, 0, 4, 7);
  state.commit_rows(0, ids, 1);
  host_state.commit_rows(0, ids, 1);
  // Equal rows give equal digests wherever they live.
  const std::string committed = state.digest();
  EXPECT_EQ(committed, host_state.digest());
  EXPECT_GT(apart.views, 0);

  // A step overwrites rows 2..5, then aborts: the rows and digest come back.
  const SessionState::Undo undo = state.capture_rows(2, 4);
  fill_rows(apart, 2, 4, 99);
  state.commit_rows(2, std::vector<int>{8, 9, 10, 11}, 2);
  EXPECT_NE(state.digest(), committed);
  const int writes_before = apart.writes;
  state.restore(undo);
  EXPECT_GT(apart.writes, writes_before);
  EXPECT_EQ(state.position(), 4);
  EXPECT_EQ(state.digest(), committed);
}

TEST(StageBackend, TheCpuTakesNoDevicesAndNamesItself) {
  EXPECT_TRUE(check_backend({}));
  const Status devices_on_cpu = check_backend({BackendChoice::Kind::cpu, {0}});
  ASSERT_FALSE(devices_on_cpu);
  EXPECT_EQ(devices_on_cpu.error().code(), ErrorCode::contract);
  EXPECT_EQ(to_string(BackendChoice{}), "cpu");
  EXPECT_EQ(to_string(BackendChoice{BackendChoice::Kind::cuda, {}}), "cuda:0");
  EXPECT_EQ(to_string(BackendChoice{BackendChoice::Kind::cuda, {0, 1}}), "cuda:0,1");
  EXPECT_EQ((BackendChoice{BackendChoice::Kind::cuda, {2, 5}}).device_for(3), 5);
}

// Hides every CUDA device from this process while it lives.
class NoCudaDevices {
 public:
  NoCudaDevices() { ::setenv("CUDA_VISIBLE_DEVICES", "", 1); }
  ~NoCudaDevices() { ::unsetenv("CUDA_VISIBLE_DEVICES"); }
  NoCudaDevices(const NoCudaDevices&) = delete;
  NoCudaDevices& operator=(const NoCudaDevices&) = delete;
};

TEST(StageBackend, CudaWithoutADeviceFailsEveryStepWithTheReason) {
  const NoCudaDevices hidden;
  const BackendChoice cuda{BackendChoice::Kind::cuda, {}};
  const Status checked = check_backend(cuda);
  ASSERT_FALSE(checked);
  const std::string reason = checked.error().message();
  EXPECT_TRUE(reason.find("CUDA device") != std::string::npos || reason.find("without CUDA") != std::string::npos)
      << reason;

  const Model model = test::load_stories_model();
  cpu::ThreadPool pool(1);
  const Partition partition = Partition::balanced(model.config().n_layers, 2).value();
  RankStage stage(model, pool, partition, 1, StageOptions{cuda, 0, KvType::f32, nullptr});
  const Status step = stage.check_step(std::vector<int>{1}, std::vector<float>(model.config().dim));
  ASSERT_FALSE(step);
  EXPECT_NE(step.error().message().find("rank 1: " + reason), std::string::npos) << step.error().message();
  EXPECT_EQ(stage.state().position(), 0);
  EXPECT_EQ(stage.state().kv().unit_count(), partition.range(1).count);
}

}  // namespace
}  // namespace accord
