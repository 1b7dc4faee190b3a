// mbarrier: shared-memory barriers that count arrivals in phases (sm_90), for kernels whose
// warps hand tiles to each other (a copying warp fills a stage, the math warps wait for it, then
// free it) without a barrier of the whole block. A wait names the parity of the phase it waits
// for: (round & 1) for the round's fill; a freshly initialized barrier counts its phase before
// the first as done, so a producer's first wait on "stage empty" (parity 1) passes at once.
#pragma once

#include <cstdint>

namespace tern::cuda {

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Spins until the phase of `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "wait:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait;\n"
      "}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One of the barrier's expected arrivals, made when every cp.async this thread issued before it
// has landed (.noinc: the arrival is counted in the init count, not added to it).
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}
// The math warps of one warpgroup only (ids 1.. ; 0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace tern::cuda
