#include "kernels/cpu/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace accord::cpu {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (std::size_t n : {1u, 2u, 7u, 100u, 1001u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) hits[i]++;
      });
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n;
    }
  }
}

TEST(ThreadPool, RespectsMinimumChunk) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.parallel_for(
      10, [&](std::size_t, std::size_t) { calls++; }, 8);
  EXPECT_EQ(calls.load(), 1);
}

TEST(ThreadPool, RethrowsAfterAllChunksFinish) {
  ThreadPool pool(3);
  std::atomic<int> finished{0};
  EXPECT_THROW(pool.parallel_for(3,
                                 [&](std::size_t begin, std::size_t) {
                                   finished++;
                                   if (begin == 1) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 3);
  // The pool still works after a failure.
  std::atomic<int> again{0};
  pool.parallel_for(3, [&](std::size_t, std::size_t) { again++; });
  EXPECT_EQ(again.load(), 3);
}

TEST(ThreadPool, RefusesZeroThreads) { EXPECT_THROW(ThreadPool(0), std::invalid_argument); }

}  // namespace
}  // namespace accord::cpu
