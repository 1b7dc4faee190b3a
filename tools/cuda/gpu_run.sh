#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, with the bundle that
# tools/cuda/make_bundle.sh left in .gpu/ (binaries built here with -DTERN_CUDA=ON plus the
# non-system libraries they load). Stages (arguments, default all): tests, kernels, bench.
# Logs go to $OUT; a short table is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/tern-out}
mkdir -p "$OUT" /tmp/tern
stages=${*:-tests kernels bench}
tar -xJf .gpu/bundle.tar.xz -C /tmp/tern || exit 1
T=/tmp/tern
# cuBLAS from the machine's toolkit (or the pip wheel beside PyTorch).
libdirs=$T/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  "$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)"; do
  [ -n "$d" ] && [ -e "$d/libcublas.so.13" ] && libdirs="$libdirs:$d"
done
export LD_LIBRARY_PATH=$libdirs:${LD_LIBRARY_PATH:-}
# The tests find their fixtures under the absolute source path they were built with.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } >"$OUT/machine.txt" 2>&1
ldd $T/bin/tern | grep "not found" && echo "missing libraries" | tee -a "$OUT/summary.txt"
summary="$OUT/summary.txt"
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >>"$summary"

if [[ " $stages " == *" tests "* ]]; then
  timeout 240 $T/bin/cuda_device_test >"$OUT/ops.log" 2>&1
  echo "cuda_device_test rc=$?" >>"$summary"
  timeout 200 $T/bin/cuda_forward_test >"$OUT/forward.log" 2>&1
  echo "cuda_forward_test rc=$?" >>"$summary"
  grep -E "FAILED|Failure|error" "$OUT/ops.log" "$OUT/forward.log" | head -40 >>"$summary"
  grep "^\[cuda-forward\]" "$OUT/forward.log" >>"$summary"
fi
if [[ " $stages " == *" kernels "* ]]; then
  timeout 200 $T/bin/tern-cuda-bench >"$OUT/kernels.log" 2>&1
  echo "tern-cuda-bench rc=$?" >>"$summary"
fi
if [[ " $stages " == *" bench "* ]]; then
  SECONDS=0
  timeout 300 $T/bin/tern-synth --preset qwen3-8b --quant Q4_K_M --fast-k-quants -o /tmp/q4km.gguf >"$OUT/synth.log" 2>&1
  echo "tern-synth qwen3-8b Q4_K_M rc=$? in ${SECONDS} s on $(nproc) cores" >>"$summary"
  timeout 240 $T/bin/tern bench --device cuda -m /tmp/q4km.gguf -p 512 -n 128 -r 3 >"$OUT/bench.log" 2>&1
  echo "tern bench rc=$?" >>"$summary"
  TERN_CUDA_GRAPHS=0 timeout 120 $T/bin/tern bench --device cuda -m /tmp/q4km.gguf -p 512 -n 32 -r 1 \
    >"$OUT/bench-nographs.log" 2>&1
  echo "tern bench without graphs rc=$?" >>"$summary"
  cat "$OUT/bench.log" "$OUT/bench-nographs.log" >>"$summary"
fi
grep -A200 "^| case" "$OUT/kernels.log" 2>/dev/null
cat "$summary"
