// How much of a rank's weights stays in memory (docs/residency.md).
//
// By default a rank's weights are resident: the pages of its tensors stay
// mapped once read. With a budget (--max-resident-bytes), a
// WeightResidency keeps as many of the rank's segments (a block's tensors;
// the classifier's rows, in parts of about a block's size) resident as fit
// and streams the others each step, in the order the step uses them: a helper thread maps the next streamed segment
// into memory (madvise MADV_POPULATE_READ) while the current one computes,
// and a segment is unmapped from the process (MADV_DONTNEED) once used.
// The bytes are the file's either way, so the outputs are those of full
// residency, bit for bit; the page cache, not this process, keeps what it
// can of the file.
//
// The transformer calls before_/after_ around each part of a step, from the
// rank's one thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "messages/weights.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"

namespace accord {

// The parts of a rank's weights that come and go together.
struct WeightSegment {
  std::vector<ByteRange> ranges;  // in the model's file
  std::uint64_t bytes = 0;
  bool streamed = false;
};

// Rows [first, first + count) of the classifier.
struct RowSpan {
  int first = 0;
  int count = 0;
};

// Which segments stay resident under a budget.
struct ResidencyPlan {
  std::vector<WeightSegment> units;  // one per block of the scope, in order
  std::vector<WeightSegment> head;   // the classifier's rows, part by part; none without the head
  std::vector<RowSpan> head_rows;    // the rows of each head part
  std::uint64_t resident_bytes = 0;  // of the segments kept resident, and the final norm
  std::uint64_t budget_bytes = 0;
};

// Splits `scope`'s weights into segments and keeps resident the largest
// that fit `budget` beside two of the largest streamed ones (the one in use
// and the one being read). A contract error when not even that fits. The
// final norm, a few KiB, is always resident.
Result<ResidencyPlan> plan_residency(const Model& model, const WeightScope& scope, std::uint64_t budget);

class WeightResidency {
 public:
  WeightResidency(const Model& model, ResidencyPlan plan, int first_unit);
  ~WeightResidency();
  WeightResidency(const WeightResidency&) = delete;
  WeightResidency& operator=(const WeightResidency&) = delete;

  void before_unit(int unit);
  void after_unit(int unit);
  // The head reads the classifier in these parts, in order, each between
  // before_head_part(part) and after_head_part(part).
  const std::vector<RowSpan>& head_parts() const { return plan_.head_rows; }
  void before_head_part(int part);
  void after_head_part(int part);

  std::uint64_t budget_bytes() const { return plan_.budget_bytes; }
  std::uint64_t streamed_bytes_per_step() const;
  std::uint64_t streamed_bytes() const { return streamed_bytes_; }

 private:
  // Segments by index: the units in order, then the head's parts.
  WeightSegment& segment(std::size_t index);
  std::size_t segments() const { return plan_.units.size() + plan_.head.size(); }
  void use(std::size_t index);
  void release(std::size_t index);
  std::size_t next_streamed(std::size_t index);
  void request(std::size_t index);
  void prefetch_loop();

  const Model& model_;
  ResidencyPlan plan_;
  int first_unit_;
  std::uint64_t streamed_bytes_ = 0;

  // The helper thread's queue and what it has mapped.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::size_t> queue_;
  std::vector<bool> requested_;  // queued or mapped, until released
  std::vector<bool> mapped_;
  bool stopping_ = false;
  std::thread helper_;
};

}  // namespace accord
