// wgmma: Hopper's warpgroup matrix products (sm_90a only), the pieces the prefill attention takes:
// D (f32) [64 x N] += A (f16, registers) . B (f16, shared memory through a matrix descriptor),
// issued by the 4 warps of a warpgroup together and completed asynchronously (commit, then wait).
// Register layouts (PTX ISA, wgmma .m64nNk16): warp w of the group holds rows 16w..16w + 15; its
// A fragment is mma.sync m16n8k16's (a0 row g, k 2t, 2t + 1; a1 row g + 8; a2, a3 the k + 8
// ones) and D is m16n8's C fragment repeated for each 8 columns (d[4j..4j + 3] for columns 8j..).
// Shared memory: no swizzle; "core matrices" of 8 rows x 16 bytes stored as 128 contiguous bytes,
// the descriptor giving the byte stride between core matrices along K (leading) and along M or N
// (stride). B K-major: each row of 8 is an N index, its 16 bytes 8 K values; B MN-major
// (transposed, kTransB = 1): each row of 8 is a K index, its 16 bytes 8 N values.
// The compute_90 PTX pass (for GPUs past Hopper) has none of this: the bodies trap there and the
// host never picks them (cuda_device checks for compute capability 9.0, where the sm_90a code
// runs).
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TERN_HAS_WGMMA 1
#else
#define TERN_HAS_WGMMA 0
#endif

namespace tern::cuda {

// A shared-memory matrix descriptor (no swizzle): start address, the byte stride between core
// matrices along K (leading) and along M / N (stride); each field in 16-byte units.
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t shared_address, uint32_t k_stride,
                                                     uint32_t mn_stride) {
  return static_cast<uint64_t>((shared_address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((k_stride >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((mn_stride >> 4) & 0x3FFF) << 32);
}

// Orders the warpgroup's register writes (accumulators, A fragments) before the products that read
// them; every warp of the group, before the first product of a batch.
__device__ __forceinline__ void wgmma_fence() {
#if TERN_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if TERN_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Waits until at most N committed batches are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if TERN_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}
// Shared memory written by the generic proxy (stores, cp.async) that the tensor cores read next:
// in each writing thread, after its writes land and before the barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if TERN_HAS_WGMMA
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// Keeps the compiler from moving reads or writes of accumulators across the asynchronous products
// (an empty asm that "changes" each register, placed after the wait and before the issue).
// (The products also read their A fragments from registers until the wait: fenced the same way.)
template <int N>
__device__ __forceinline__ void wgmma_fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N, int M>
__device__ __forceinline__ void wgmma_fence_registers(uint32_t (&a)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
  }
}

#define TERN_WGMMA_ACC8(i)                                                                    \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// D [64 x 64] (+)= A [64 x 16] . B [16 x 64]: A from registers, B in shared memory (desc).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t desc, bool accumulate) {
#if TERN_HAS_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %36, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %37, p, 1, 1, %38;\n}"
      : TERN_WGMMA_ACC8(0), TERN_WGMMA_ACC8(8), TERN_WGMMA_ACC8(16), TERN_WGMMA_ACC8(24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(static_cast<uint32_t>(accumulate)),
        "l"(desc), "n"(kTransB)
      : "memory");
#else
  __trap();
#endif
}

// D [64 x 128] (+)= A [64 x 16] . B [16 x 128]: A from registers, B in shared memory (desc).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4],
                                                 uint64_t desc, bool accumulate) {
#if TERN_HAS_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, "
      "%40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %69, p, 1, 1, %70;\n}"
      : TERN_WGMMA_ACC8(0), TERN_WGMMA_ACC8(8), TERN_WGMMA_ACC8(16), TERN_WGMMA_ACC8(24),
        TERN_WGMMA_ACC8(32), TERN_WGMMA_ACC8(40), TERN_WGMMA_ACC8(48), TERN_WGMMA_ACC8(56)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(static_cast<uint32_t>(accumulate)),
        "l"(desc), "n"(kTransB)
      : "memory");
#else
  __trap();
#endif
}

// D [64 x 64] (+)= A [64 x 16] . B [16 x 64]: both from shared memory (A K-major: a_desc as
// a K-major B's, rows being M indices).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t a_desc, uint64_t b_desc,
                                                   bool accumulate) {
#if TERN_HAS_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, %35;\n}"
      : TERN_WGMMA_ACC8(0), TERN_WGMMA_ACC8(8), TERN_WGMMA_ACC8(16), TERN_WGMMA_ACC8(24)
      : "l"(a_desc), "l"(b_desc), "r"(static_cast<uint32_t>(accumulate)), "n"(kTransB)
      : "memory");
#else
  __trap();
#endif
}

#undef TERN_WGMMA_ACC8

}  // namespace tern::cuda
