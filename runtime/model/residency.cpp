#include "runtime/model/residency.hpp"
#include "runtime/model/weights.hpp"

#include <algorithm>

namespace accord {

namespace {

// The file ranges of `scope`'s tensors, merged, so that dropping a segment
// keeps no page inside it; a norm the Model owns has none (it is always
// resident).
WeightSegment segment_of(const Model& model, const WeightScope& scope) {
  WeightSegment segment;
  segment.ranges = model.file_ranges(scope);
  for (const ByteRange& range : segment.ranges) segment.bytes += range.length;
  return segment;
}

// Maps every page `segment` touches into this process.
void populate(const MappedFile& file, const WeightSegment& segment) {
  for (const ByteRange& range : segment.ranges) {
    map_pages_in(file.bytes().data() + range.offset, std::min(range.length, file.size() - range.offset));
  }
}

void drop(const MappedFile& file, const ByteRange& range) {
  release_mapped_pages(file.bytes().data() + range.offset, std::min(range.length, file.size() - range.offset));
}

// The head's parts: the classifier's rows (the embedding's, when shared),
// in parts of at most `part_bytes`.
void plan_head(const Model& model, std::uint64_t part_bytes, ResidencyPlan& plan) {
  const cpu::Matrix& m = model.weights().classifier;
  const auto row_bytes = static_cast<std::uint64_t>(m.row_bytes());
  const int rows_per_part = static_cast<int>(std::clamp<std::uint64_t>(part_bytes / row_bytes, 1, m.rows));
  const auto start = static_cast<std::size_t>(m.data - model.file().bytes().data());
  for (int first = 0; first < m.rows; first += rows_per_part) {
    const int count = std::min(rows_per_part, m.rows - first);
    WeightSegment part;
    part.ranges.push_back({start + static_cast<std::size_t>(first) * row_bytes, count * row_bytes});
    part.bytes = count * row_bytes;
    plan.head.push_back(part);
    plan.head_rows.push_back({first, count});
  }
}

// Keeps the largest segments resident as long as they and two of the
// largest streamed ones fit `budget`, with at least two streamed (one
// streamed segment would never leave memory). False when nothing fits.
bool choose_streamed(std::vector<WeightSegment*> all, std::uint64_t budget, std::uint64_t& resident) {
  std::stable_sort(all.begin(), all.end(),
                   [](const WeightSegment* a, const WeightSegment* b) { return a->bytes > b->bytes; });
  std::uint64_t kept = 0;
  for (const WeightSegment* s : all) kept += s->bytes;
  if (kept <= budget) {
    resident += kept;
    return true;
  }
  for (std::size_t k = all.size(); k-- > 0;) {
    kept -= all[k]->bytes;
    if (all.size() - k < 2 || kept + 2 * all[k]->bytes > budget) continue;
    for (std::size_t i = k; i < all.size(); ++i) all[i]->streamed = true;
    resident += kept;
    return true;
  }
  return false;
}

}  // namespace

Result<ResidencyPlan> plan_residency(const Model& model, const WeightScope& scope, std::uint64_t budget) {
  const ModelConfig& c = model.config();
  ResidencyPlan plan;
  plan.budget_bytes = budget;
  const int end =
      static_cast<int>(std::min<long long>(c.n_layers, static_cast<long long>(scope.first_unit) + scope.units));
  std::uint64_t largest_unit = 0;
  for (int unit = scope.first_unit; unit < end; ++unit) {
    plan.units.push_back(segment_of(model, WeightScope{false, unit, 1, false}));
    largest_unit = std::max(largest_unit, plan.units.back().bytes);
  }
  if (scope.head) {
    plan_head(model, largest_unit, plan);
    plan.resident_bytes = static_cast<std::uint64_t>(c.dim) * sizeof(float);  // the final norm
  }
  std::vector<WeightSegment*> all;
  for (WeightSegment& s : plan.units) all.push_back(&s);
  for (WeightSegment& s : plan.head) all.push_back(&s);
  if (choose_streamed(all, budget > plan.resident_bytes ? budget - plan.resident_bytes : 0, plan.resident_bytes)) {
    return plan;
  }
  return Error(ErrorCode::contract, "--max-resident-bytes " + std::to_string(budget) +
                                        " is too small for this rank: a step needs two of its largest layers "
                                        "resident at once, " +
                                        std::to_string(2 * largest_unit) + " bytes");
}

WeightResidency::WeightResidency(const Model& model, ResidencyPlan plan, int first_unit)
    : model_(model),
      plan_(std::move(plan)),
      first_unit_(first_unit),
      requested_(segments(), false),
      mapped_(segments(), false),
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
  return index < plan_.units.size() ? plan_.units[index] : plan_.head[index - plan_.units.size()];
}

std::uint64_t WeightResidency::streamed_bytes_per_step() const {
  std::uint64_t bytes = 0;
  for (const auto* list : {&plan_.units, &plan_.head}) {
    for (const WeightSegment& s : *list) bytes += s.streamed ? s.bytes : 0;
  }
  return bytes;
}

void WeightResidency::before_unit(int unit) { use(static_cast<std::size_t>(unit - first_unit_)); }
void WeightResidency::after_unit(int unit) { release(static_cast<std::size_t>(unit - first_unit_)); }
void WeightResidency::before_head_part(int part) { use(plan_.units.size() + static_cast<std::size_t>(part)); }
void WeightResidency::after_head_part(int part) { release(plan_.units.size() + static_cast<std::size_t>(part)); }

// The streamed segment after `index` in the order of a step, wrapping to
// the next step's.
std::size_t WeightResidency::next_streamed(std::size_t index) {
  for (std::size_t step = 1; step <= segments(); ++step) {
    const std::size_t next = (index + step) % segments();
    if (segment(next).streamed) return next;
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
