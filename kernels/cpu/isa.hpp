// Which instruction set the CPU kernels use, chosen once per process.
//
// Every path computes the same numbers: the order of every reduction is
// defined once (kernel_table.hpp) and each path carries it out with fused
// multiply-adds, which round identically on every CPU. So the choice
// changes speed, never a logit, and a path can be forced to show it.
#pragma once

#include <string>
#include <string_view>

namespace accord::cpu {

enum class Isa { portable, avx2, avx512 };

// "portable", "avx2", "avx512".
const char* to_string(Isa isa);

// The fastest path this CPU and its operating system support. avx2 needs
// AVX2, FMA and F16C; avx512 needs AVX-512 F, BW, VL and VNNI besides.
Isa best_isa();

// The path in use: best_isa() until use_isa() names another.
Isa active_isa();

// Switches to the path `name`, for tests and for the command line's
// ACCORD_CPU_PATH. Returns an empty string, or why the path was refused
// (an unknown name, or one this CPU lacks). Not to be called while kernels
// run on other threads.
std::string use_isa(std::string_view name);

}  // namespace accord::cpu
