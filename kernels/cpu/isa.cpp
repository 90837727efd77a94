#include "kernels/cpu/isa.hpp"

#include <atomic>

#include "kernels/cpu/kernel_table.hpp"

namespace accord::cpu {

namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && avx2_kernels() != nullptr;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  // libgcc checks the operating system saves the AVX-512 state (XCR0).
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && avx512_kernels() != nullptr;
#else
  return false;
#endif
}

bool supported(Isa isa) {
  switch (isa) {
    case Isa::portable: return true;
    case Isa::avx2: return cpu_has_avx2();
    case Isa::avx512: return cpu_has_avx512();
  }
  return false;
}

bool parse(std::string_view name, Isa& isa) {
  for (Isa candidate : {Isa::portable, Isa::avx2, Isa::avx512}) {
    if (name == to_string(candidate)) {
      isa = candidate;
      return true;
    }
  }
  return false;
}

std::atomic<Isa>& active() {
  static std::atomic<Isa> isa{best_isa()};
  return isa;
}

}  // namespace

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

Isa best_isa() {
  if (cpu_has_avx512()) return Isa::avx512;
  if (cpu_has_avx2()) return Isa::avx2;
  return Isa::portable;
}

Isa active_isa() { return active().load(std::memory_order_relaxed); }

std::string use_isa(std::string_view name) {
  Isa isa;
  if (!parse(name, isa)) return "unknown CPU path '" + std::string(name) + "' (paths: portable, avx2, avx512)";
  if (!supported(isa))
    return "this CPU cannot run the " + std::string(name) + " path (best: " + to_string(best_isa()) + ")";
  active().store(isa, std::memory_order_relaxed);
  return {};
}

const KernelTable& active_kernels() {
  switch (active_isa()) {
    case Isa::avx512: return *avx512_kernels();
    case Isa::avx2: return *avx2_kernels();
    case Isa::portable: break;
  }
  return portable_kernels();
}

}  // namespace accord::cpu
