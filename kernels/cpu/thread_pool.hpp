// A fixed pool of worker threads owned by one rank.
//
// parallel_for splits [0, n) into contiguous chunks, one per thread, and
// blocks until all are done. The caller's thread runs the first chunk, so a
// pool of size 1 starts no thread at all. Work is split by index only: a
// kernel whose per-index computation does not depend on the chunk bounds
// gives bit-identical results for every pool size.
//
// Thread safety: one parallel_for at a time per pool (the rank's execution
// path owns it); calls from several threads at once are serialised.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace accord::cpu {

// The most threads worth giving a pool on this machine: kThreadsPerCore per
// core (one core when the count is unknown). Past that the threads only
// take turns on the cores, and since workers spin before they sleep each
// turn is slow: 1000 threads on 2 cores take seconds per token. The command
// line and a node cap what they are asked for at this.
inline constexpr int kThreadsPerCore = 4;
int max_useful_threads();

class ThreadPool {
 public:
  // threads >= 1: the number of threads that share the work, caller included.
  explicit ThreadPool(int threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  using RangeFn = std::function<void(std::size_t begin, std::size_t end)>;

  // Runs fn over [0, n) in at most size() chunks of at least min_chunk
  // indices each (fewer chunks when n is small), and returns when all ran.
  // An exception thrown by fn is rethrown here after every chunk finished.
  void parallel_for(std::size_t n, const RangeFn& fn, std::size_t min_chunk = 1);

 private:
  void worker_loop(int index);
  void run_chunk(int chunk);
  void wait_for_workers();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // serialises parallel_for callers

  // A job is published by bumping generation_ under mutex_; workers spin on
  // it briefly (a decode step issues dozens of small jobs back to back, and
  // a sleeping thread takes tens of microseconds to wake) and then sleep on
  // work_ready_. pending_ counts the workers still running the job.
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::atomic<unsigned long> generation_{0};
  std::atomic<int> pending_{0};
  bool stopping_ = false;             // guarded by mutex_
  const RangeFn* job_ = nullptr;      // written before generation_ is bumped
  std::size_t job_size_ = 0;          // likewise
  int job_chunks_ = 0;                // likewise
  std::exception_ptr failure_;        // guarded by mutex_
};

}  // namespace accord::cpu
