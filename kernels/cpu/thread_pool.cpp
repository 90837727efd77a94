#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace accord::cpu {

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw std::invalid_argument("ThreadPool needs at least one thread");
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunk(int chunk) {
  const std::size_t begin = job_size_ * static_cast<std::size_t>(chunk) / static_cast<std::size_t>(job_chunks_);
  const std::size_t end = job_size_ * static_cast<std::size_t>(chunk + 1) / static_cast<std::size_t>(job_chunks_);
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
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (index >= job_chunks_) continue;
    }
    run_chunk(index);
    std::lock_guard lock(mutex_);
    if (--pending_ == 0) work_done_.notify_one();
  }
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
    pending_ = chunks - 1;
    failure_ = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();
  run_chunk(0);
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

}  // namespace accord::cpu
