// Counts the program's C++ heap allocations (every operator new without an
// alignment argument, on every thread), for benchmarks that report how
// many a step makes: a figure that, unlike a time, the host's noise does not
// move. Linking allocation_count.cpp replaces the global operator new and
// delete; only a benchmark program links it.
#pragma once

#include <cstdint>

namespace accord::bench {

// Allocations so far; differences between two calls count a stretch of work.
std::uint64_t allocations();

}  // namespace accord::bench
