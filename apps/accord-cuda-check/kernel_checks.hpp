// Each CUDA kernel against the CPU kernel it mirrors, on random inputs.
#pragma once

namespace accord::cuda {

// Runs every check on device 0 and prints one line per check; the number
// that failed. Throws CudaFailure when the device cannot run them.
int run_kernel_checks();

}  // namespace accord::cuda
