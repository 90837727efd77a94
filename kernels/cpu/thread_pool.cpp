#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace accord::cpu {

namespace {

// About 50 microseconds of polling before a thread goes to sleep.
constexpr int kSpinIterations = 20000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

int max_useful_threads() {
  return kThreadsPerCore * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw std::invalid_argument("ThreadPool needs at least one thread");
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
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

void ThreadPool::run_chunk(int chunk) {
  const auto chunks = static_cast<std::size_t>(job_chunks_);
  const std::size_t begin = job_size_ * static_cast<std::size_t>(chunk) / chunks;
  const std::size_t end = job_size_ * static_cast<std::size_t>(chunk + 1) / chunks;
  try {
    if (begin < end) (*job_)(begin, end);
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  unsigned long seen = 0;
  for (;;) {
    for (int spin = 0; spin < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++spin) {
      cpu_relax();
    }
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      if (stopping_) return;
      seen = generation_.load(std::memory_order_acquire);
      // A worker without a chunk is not waited for, so it must not look at
      // the job again once the lock is gone: the next job may replace it.
      if (index >= job_chunks_) continue;
    }
    run_chunk(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Taking the lock orders this notify after the caller's predicate check.
      std::lock_guard lock(mutex_);
      work_done_.notify_one();
    }
  }
}

void ThreadPool::wait_for_workers() {
  for (int spin = 0; spin < kSpinIterations && pending_.load(std::memory_order_acquire) != 0; ++spin) cpu_relax();
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::parallel_for(std::size_t n, const RangeFn& fn, std::size_t min_chunk) {
  if (n == 0) return;
  const std::size_t by_size = std::max<std::size_t>(1, n / std::max<std::size_t>(1, min_chunk));
  const int chunks = static_cast<int>(std::min<std::size_t>(by_size, static_cast<std::size_t>(size())));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard call_lock(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_size_ = n;
    job_chunks_ = chunks;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    failure_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  run_chunk(0);
  wait_for_workers();
  std::lock_guard lock(mutex_);
  job_ = nullptr;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

}  // namespace accord::cpu
