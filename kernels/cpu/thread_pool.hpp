// A fixed pool of worker threads owned by one rank (or shared by the ranks
// of one process, which compute one at a time).
//
// parallel_for splits [0, n) into contiguous chunks, a few per thread, and
// blocks until all are done. The threads, the caller's included, take the
// chunks as they come, so a worker that wakes late (it sleeps after a
// short spin without work, as between the ranks of a pipeline) costs the
// caller no waiting: the caller takes the chunks the worker did not get
// to. A pool of size 1 starts no thread at all. Work is split by index
// only: a kernel whose per-index computation does not depend on the chunk
// bounds gives bit-identical results for every pool size and every split.
//
// Thread safety: one parallel_for at a time per pool; calls from several
// threads at once are serialised.
#pragma once

#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
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

  // What parallel_for runs on each chunk: a reference to the caller's
  // callable, which parallel_for does not outlive (it returns when every
  // chunk ran). A std::function would copy a lambda that captures more than
  // two references to the heap, at every call of every kernel.
  class RangeFn {
   public:
    template <class Fn>
    requires(std::invocable<const Fn&, std::size_t, std::size_t> && !std::same_as<Fn, RangeFn>)
        RangeFn(const Fn& fn)  // implicit: a lambda converts, as it would to std::function
        : callable_(&fn), call_([](const void* callable, std::size_t begin, std::size_t end) {
            (*static_cast<const Fn*>(callable))(begin, end);
          }) {}
    void operator()(std::size_t begin, std::size_t end) const { call_(callable_, begin, end); }

   private:
    const void* callable_;
    void (*call_)(const void* callable, std::size_t begin, std::size_t end);
  };

  // Runs fn over [0, n) in at most kChunksPerThread * size() chunks of at
  // least min_chunk indices each (fewer when n is small), and returns when
  // all ran. An exception thrown by fn is rethrown here after every chunk
  // finished.
  void parallel_for(std::size_t n, const RangeFn& fn, std::size_t min_chunk = 1);

  static constexpr int kChunksPerThread = 4;

 private:
  void worker_loop();
  // Takes and runs chunks of job `generation` until none is left.
  void run_chunks(unsigned long generation);
  void run_chunk(std::size_t chunk);
  void wait_for_chunks();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // serialises parallel_for callers

  // A job is published by bumping generation_ under mutex_; workers spin on
  // it briefly (a decode step issues dozens of small jobs back to back, and
  // a sleeping thread takes tens of microseconds to wake) and then sleep on
  // work_ready_. claim_ packs the job's generation (low 32 bits), its chunk
  // count and the next chunk to take (16 bits each): one compare-and-swap
  // takes a chunk of that job and no other, so a worker that wakes after
  // its job ended takes nothing of the next. chunks_done_ counts the chunks
  // finished; the caller returns when it reaches the count.
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::atomic<unsigned long> generation_{0};
  std::atomic<std::uint64_t> claim_{0};
  std::atomic<std::size_t> chunks_done_{0};
  bool stopping_ = false;         // guarded by mutex_
  const RangeFn* job_ = nullptr;  // written before claim_ names the job
  std::size_t job_size_ = 0;      // likewise
  std::size_t job_chunks_ = 0;    // likewise
  std::exception_ptr failure_;    // guarded by mutex_
};

}  // namespace accord::cpu
