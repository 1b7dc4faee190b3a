// Turning CUDA and cuBLAS status codes into tern::Error values. Every runtime and library call of
// the CUDA backend goes through one of these; nothing aborts.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "base/error.h"

namespace tern::cuda {

inline Error cuda_error(cudaError_t status, const char* what) {
  return make_error("CUDA error in {}: {} ({})", what, cudaGetErrorString(status),
                    cudaGetErrorName(status));
}

inline Error cublas_error(cublasStatus_t status, const char* what) {
  return make_error("cuBLAS error in {}: {} ({})", what, cublasGetStatusString(status),
                    cublasGetStatusName(status));
}

}  // namespace tern::cuda

// Returns the Error from the enclosing function (whose type is Result<...>) when a call fails.
#define TERN_CUDA_TRY(call)                                                                \
  do {                                                                                     \
    const cudaError_t tern_status_ = (call);                                               \
    if (tern_status_ != cudaSuccess) return ::tern::cuda::cuda_error(tern_status_, #call); \
  } while (0)

#define TERN_CUBLAS_TRY(call)                                 \
  do {                                                        \
    const cublasStatus_t tern_status_ = (call);               \
    if (tern_status_ != CUBLAS_STATUS_SUCCESS)                \
      return ::tern::cuda::cublas_error(tern_status_, #call); \
  } while (0)
