#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

namespace accord::cpu {

namespace {

// How long a thread polls for work (or for its chunks to finish) before
// it sleeps. A forward pass submits its jobs microseconds apart, so this
// bridges them; it is a time, not a count of pause instructions, because a
// pause takes 10 cycles on some cores and 140 on others, and a pool that
// polls for a millisecond after its rank's last job takes a core from the
// process that computes next (a node of a remote cluster).
constexpr auto kSpinTime = std::chrono::microseconds(50);
// Pause instructions between two looks at the clock.
constexpr int kPausesPerClockRead = 64;

// A field of ThreadPool::claim_: 16 bits. The chunk count is at most
// kChunksPerThread * kThreadsPerCore * cores, far below it.
constexpr std::uint64_t kClaimFieldMask = 0xffff;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls `done` for up to kSpinTime; true once it holds.
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < kPausesPerClockRead; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

int max_useful_threads() {
  return kThreadsPerCore * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw std::invalid_argument("ThreadPool needs at least one thread");
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunk(std::size_t chunk) {
  const std::size_t begin = job_size_ * chunk / job_chunks_;
  const std::size_t end = job_size_ * (chunk + 1) / job_chunks_;
  try {
    if (begin < end) (*job_)(begin, end);
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::current_exception();
  }
  if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == job_chunks_) {
    // Taking the lock orders this notify after the caller's predicate check.
    std::lock_guard lock(mutex_);
    work_done_.notify_one();
  }
}

void ThreadPool::run_chunks(unsigned long generation) {
  std::uint64_t claim = claim_.load(std::memory_order_acquire);
  for (;;) {
    const auto chunks = (claim >> 32) & kClaimFieldMask;
    const auto next = (claim >> 48) & kClaimFieldMask;
    if ((claim & 0xffffffffu) != (generation & 0xffffffffu) || next >= chunks) return;
    if (claim_.compare_exchange_weak(claim, claim + (std::uint64_t{1} << 48), std::memory_order_acq_rel)) {
      run_chunk(next);
      claim = claim_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::worker_loop() {
  unsigned long seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      if (stopping_) return;
      seen = generation_.load(std::memory_order_acquire);
    }
    run_chunks(seen);
  }
}

void ThreadPool::wait_for_chunks() {
  const auto all_done = [&] { return chunks_done_.load(std::memory_order_acquire) == job_chunks_; };
  if (spin_until(all_done)) return;
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, all_done);
}

void ThreadPool::parallel_for(std::size_t n, const RangeFn& fn, std::size_t min_chunk) {
  if (n == 0) return;
  const std::size_t by_size = std::max<std::size_t>(1, n / std::max<std::size_t>(1, min_chunk));
  const std::size_t chunks = std::min<std::size_t>(
      {by_size, static_cast<std::size_t>(size()) * kChunksPerThread, static_cast<std::size_t>(kClaimFieldMask)});
  if (chunks == 1 || size() == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard call_lock(call_mutex_);
  unsigned long generation = 0;
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_size_ = n;
    job_chunks_ = chunks;
    failure_ = nullptr;
    chunks_done_.store(0, std::memory_order_relaxed);
    generation = generation_.load(std::memory_order_relaxed) + 1;
    claim_.store((generation & 0xffffffffu) | (std::uint64_t{chunks} << 32), std::memory_order_release);
    generation_.store(generation, std::memory_order_release);
  }
  work_ready_.notify_all();
  run_chunks(generation);
  wait_for_chunks();
  std::lock_guard lock(mutex_);
  job_ = nullptr;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

}  // namespace accord::cpu
