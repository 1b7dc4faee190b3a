#!/usr/bin/env bash
# Compiles the CUDA backend (-DTERN_CUDA=ON) into build-cuda/ when nvcc is installed, without
# running anything (CI machines have no GPU). Only the CUDA targets and what they need are
# built, to keep the time down on small machines. Extra arguments go to cmake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$nvcc" ]; then
  echo "build-cuda: no nvcc at $nvcc; skipping the CUDA build"
  exit 0
fi
cmake -S "$root" -B "$root/build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DTERN_BUILD_BENCH=OFF -DTERN_WERROR=ON "$@" >/dev/null
ninja -C "$root/build-cuda" ${TERN_JOBS:+-j"$TERN_JOBS"} tern_cuda_device tern_engine \
  tern-cuda-bench cuda_device_test cuda_forward_test cuda_greedy_test
