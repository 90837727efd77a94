#include "runtime/model/residency.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <numeric>

namespace accord {

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels refuse it, and pages are touched instead
#endif

std::uintptr_t page_size() { return static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE)); }

// The file ranges of `scope`'s tensors, and their bytes; a norm the Model
// owns has none (it is always resident).
WeightSegment segment_of(const Model& model, const WeightScope& scope) {
  WeightSegment segment;
  for (const WeightTensor& tensor : weight_tensors(model.config(), model.weights(), scope)) {
    if (auto range = model.file_range(tensor)) {
      segment.ranges.push_back(*range);
      segment.bytes += range->length;
    }
  }
  // Sorted and merged, so that dropping a segment keeps no page inside it.
  std::sort(segment.ranges.begin(), segment.ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : segment.ranges) {
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().length) {
      const std::size_t end = std::max(merged.back().offset + merged.back().length, r.offset + r.length);
      merged.back().length = end - merged.back().offset;
    } else {
      merged.push_back(r);
    }
  }
  segment.ranges = std::move(merged);
  return segment;
}

// Maps every page `segment` touches into this process.
void populate(const MappedFile& file, const WeightSegment& segment) {
  const std::uintptr_t page = page_size();
  for (const ByteRange& range : segment.ranges) {
    const auto begin = reinterpret_cast<std::uintptr_t>(file.bytes().data() + range.offset);
    const auto end = reinterpret_cast<std::uintptr_t>(file.bytes().data() + std::min(file.size(), range.offset + range.length));
    auto* first = reinterpret_cast<std::byte*>(begin / page * page);
    const std::size_t length = (end + page - 1) / page * page - begin / page * page;
    if (length == 0 || ::madvise(first, length, MADV_POPULATE_READ) == 0) continue;
    // A kernel without MADV_POPULATE_READ: fault each page in by reading it
    // (a volatile read is never optimized away).
    for (std::size_t at = 0; at < length; at += page) {
      (void)*reinterpret_cast<volatile const unsigned char*>(first + at);
    }
  }
}

void drop(const MappedFile& file, const ByteRange& range) {
  release_mapped_pages(file.bytes().data() + range.offset, std::min(range.length, file.size() - range.offset));
}

}  // namespace

Result<ResidencyPlan> plan_residency(const Model& model, const WeightScope& scope, std::uint64_t budget) {
  const ModelConfig& c = model.config();
  ResidencyPlan plan;
  plan.budget_bytes = budget;
  const int end = static_cast<int>(std::min<long long>(c.n_layers, static_cast<long long>(scope.first_unit) + scope.units));
  for (int unit = scope.first_unit; unit < end; ++unit) {
    plan.units.push_back(segment_of(model, WeightScope{false, unit, 1, false}));
  }
  if (scope.head) plan.head = segment_of(model, WeightScope{false, 0, 0, true});
  std::vector<WeightSegment*> all;
  for (WeightSegment& s : plan.units) all.push_back(&s);
  if (plan.head.bytes > 0) all.push_back(&plan.head);
  std::stable_sort(all.begin(), all.end(), [](const WeightSegment* a, const WeightSegment* b) { return a->bytes > b->bytes; });
  const std::uint64_t total =
      std::accumulate(all.begin(), all.end(), std::uint64_t{0}, [](std::uint64_t sum, const WeightSegment* s) { return sum + s->bytes; });
  if (total <= budget) {
    plan.resident_bytes = total;
    return plan;
  }
  // Keep the k largest resident, k as large as fits, with at least two
  // segments streamed (one streamed segment would never leave memory).
  std::uint64_t kept = total;
  for (std::size_t k = all.size(); k-- > 0;) {
    kept -= all[k]->bytes;
    if (all.size() - k < 2) continue;
    if (kept + 2 * all[k]->bytes <= budget) {
      for (std::size_t i = k; i < all.size(); ++i) all[i]->streamed = true;
      plan.resident_bytes = kept;
      return plan;
    }
  }
  const std::uint64_t least = all.empty() ? 0 : 2 * all.front()->bytes;
  return Error(ErrorCode::contract, "--max-resident-bytes " + std::to_string(budget) +
                                        " is too small for this rank: a step needs two of its largest layers "
                                        "resident at once, " + std::to_string(least) + " bytes");
}

WeightResidency::WeightResidency(const Model& model, ResidencyPlan plan, int first_unit)
    : model_(model),
      plan_(std::move(plan)),
      first_unit_(first_unit),
      requested_(plan_.units.size() + 1, false),
      mapped_(plan_.units.size() + 1, false),
      helper_([this] { prefetch_loop(); }) {}

WeightResidency::~WeightResidency() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  helper_.join();
}

WeightSegment& WeightResidency::segment(std::size_t index) {
  return index == head_index() ? plan_.head : plan_.units[index];
}

std::uint64_t WeightResidency::streamed_bytes_per_step() const {
  std::uint64_t bytes = plan_.head.streamed ? plan_.head.bytes : 0;
  for (const WeightSegment& s : plan_.units) bytes += s.streamed ? s.bytes : 0;
  return bytes;
}

void WeightResidency::before_unit(int unit) { use(static_cast<std::size_t>(unit - first_unit_)); }
void WeightResidency::after_unit(int unit) { release(static_cast<std::size_t>(unit - first_unit_)); }
void WeightResidency::before_head() { use(head_index()); }
void WeightResidency::after_head() { release(head_index()); }

void WeightResidency::after_embedding() {
  if (plan_.head.bytes > 0 && !plan_.head.streamed && model_.config().shared_classifier) return;
  for (const WeightTensor& tensor : weight_tensors(model_.config(), model_.weights(), WeightScope{true, 0, 0, false})) {
    if (auto range = model_.file_range(tensor)) drop(model_.file(), *range);
  }
}

// The segment after `index` in the order of a step, wrapping to the next.
std::size_t WeightResidency::next_streamed(std::size_t index) const {
  const std::size_t count = plan_.units.size() + 1;
  for (std::size_t step = 1; step <= count; ++step) {
    const std::size_t next = (index + step) % count;
    const WeightSegment& s = next == head_index() ? plan_.head : plan_.units[next];
    if (s.streamed) return next;
  }
  return index;
}

void WeightResidency::use(std::size_t index) {
  if (!segment(index).streamed) return;
  request(index);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return mapped_[index]; });
  }
  request(next_streamed(index));
  streamed_bytes_ += segment(index).bytes;
}

void WeightResidency::release(std::size_t index) {
  WeightSegment& s = segment(index);
  if (!s.streamed) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!mapped_[index]) return;
  for (const ByteRange& range : s.ranges) drop(model_.file(), range);
  mapped_[index] = false;
  requested_[index] = false;
}

void WeightResidency::request(std::size_t index) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (requested_[index]) return;
    requested_[index] = true;
    queue_.push_back(index);
  }
  changed_.notify_all();
}

void WeightResidency::prefetch_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const std::size_t index = queue_.front();
    queue_.erase(queue_.begin());
    lock.unlock();
    populate(model_.file(), segment(index));
    lock.lock();
    mapped_[index] = true;
    changed_.notify_all();
  }
}

}  // namespace accord
