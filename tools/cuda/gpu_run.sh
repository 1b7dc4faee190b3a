#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, with the bundle that
# tools/cuda/make_bundle.sh left in .gpu/ (binaries built here with -DTERN_CUDA=ON plus the
# non-system libraries they load). Stages (arguments, default tests kernels bench): tests,
# kernels, bench, ab (tern configurations and llama-bench, interleaved), prev (an earlier build's
# tern against this one, .gpu/tern-prev.xz), skips (what each kernel costs inside the decode step:
# TERN_CUDA_SKIP_KERNELS), model (write the Qwen3-8B-shaped Q4_K_M file only), profile (Nsight Compute:
# cold-L2 time of every kernel of a decode step, tools/cuda/ncu_summary.py), compare (tern bench
# and llama.cpp's llama-bench on the same file, interleaved), files (the Q8_0 and BF16 files),
# long (prefill 4096, decode after 16K, 8 sequences batched; MODEL), parallel (8 sequences
# against one under PARALLEL_CONFIGS), prefill (pp512 / pp4096 under PREFILL_CONFIGS, sampled
# decode, llama-bench's prefill), shapes (the GPU against the CPU on tiny shape variants under
# SHAPE_CONFIGS), cpu (the CPU backend's tests on this machine's AVX-512 CPU, and the GPU against
# its AVX2 path), attn (decode attention kernels under ATTN_CONFIGS), decode16k (decode after
# 16K tokens under ATTN_CONFIGS), pending (the defaults not yet timed in the decode step:
# their tests with the old path, then A/B), attnab (this bundle's attention kernels against
# an earlier build's, .gpu/tern-cuda-bench-REV.xz), stalls (ncu's full sections for the decode products:
# memory-, latency- or issue-bound), steps (decode after 1K / 16K on every file under
# STEP_CONFIGS), matrix (BENCHMARKS.md's prefill / decode table on every file
# against llama-bench), greedy (REAL_MODELS on the GPU against the CPU, with the
# default prefill and the int8 one), llama (start the developer's llama.cpp build in the
# background, where .peer/build-llama.sh was carried: later stages and calls wait for it), stash
# and join (a file
# carried in parts over calls made back to back: tools/cuda/carry_parts.sh; llama-bench is looked for in
# /tmp/llama/bin, where the `llama` stage builds it from the sources tools/compare/pack_llama_peer.sh
# packed into .peer/ (PyPI's llama-cpp-python sdist, trimmed; carry ".peer")). Logs go to $OUT; a
# short table is printed
# last.
set -uo pipefail
OUT=${OUT:-/tmp/tern-out}
mkdir -p "$OUT" /tmp/tern
stages=${*:-tests kernels bench}
# A call that carries no bundle (one carrying parts of a file, say) uses the one an earlier call
# of this warm machine unpacked.
if [ -f .gpu/bundle.tar.xz ]; then
  tar -xJf .gpu/bundle.tar.xz -C /tmp/tern || exit 1
elif [ ! -x /tmp/tern/bin/tern ]; then
  echo "no .gpu/bundle.tar.xz carried and none unpacked here" && exit 1
fi
T=/tmp/tern
# cuBLAS from the machine's toolkit (or the pip wheel beside PyTorch).
libdirs=$T/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  "$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)"; do
  [ -n "$d" ] && [ -e "$d/libcublas.so.13" ] && libdirs="$libdirs:$d"
done
export LD_LIBRARY_PATH=$libdirs:${LD_LIBRARY_PATH:-}
# The tests find their fixtures under the absolute source path they were built with.
# (make_bundle.sh records that path in the bundle's srcdir file; /work/main before it did.)
src=$(cat $T/srcdir 2>/dev/null || echo /work/main)
[ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; }
{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } >"$OUT/machine.txt" 2>&1
ldd $T/bin/tern | grep "not found" && echo "missing libraries" | tee -a "$OUT/summary.txt"
summary="$OUT/summary.txt"
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >>"$summary"

# llama-bench: an earlier call may have started its build in the background (setsid); the
# stages that use it wait for it, at most LLAMA_WAIT seconds.
wait_llama() {
  local waited=0
  while [ ! -x /tmp/llama/bin/llama-bench ] && pgrep -f build-llama.sh >/dev/null &&
    [ $waited -lt "${LLAMA_WAIT:-180}" ]; do
    sleep 5 && waited=$((waited + 5))
  done
  [ $waited -gt 0 ] && echo "waited $waited s for the llama.cpp build" >>"$summary"
  return 0
}
if [[ " $stages " == *" llama "* ]] && [ ! -x /tmp/llama/bin/llama-bench ] && [ -f .peer/build-llama.sh ] &&
  ! pgrep -f build-llama.sh >/dev/null; then
  setsid nohup bash .peer/build-llama.sh >/tmp/llama-build.log 2>&1 </dev/null &
  echo "llama.cpp build started in the background" >>"$summary"
fi
if [[ " $stages " == *" stash "* ]]; then
  # Parts of a file too big for one call (tools/cuda/carry_parts.sh), one per call back to back:
  # kept in /tmp/parts; `join` rebuilds /tmp/NAME and checks its sha256 once all have come.
  mkdir -p /tmp/parts
  # Several files may be in flight: each keeps its manifest as NAME.manifest.
  for d in .carry*; do
    [ -f "$d/manifest" ] || continue
    name=$(cut -d' ' -f1 "$d/manifest")
    cp "$d"/"$name".part* /tmp/parts/ && cp "$d/manifest" "/tmp/parts/$name.manifest"
  done
  echo "parts kept: $(ls /tmp/parts | grep -c part)" >>"$summary"
fi
if [[ " $stages " == *" join "* ]]; then
  for manifest in /tmp/parts/*.manifest; do
    [ -f "$manifest" ] || continue
    read -r name count sum <"$manifest"
    [ -e "/tmp/$name" ] && continue
    if [ "$(ls /tmp/parts | grep -c "^$name.part")" = "$count" ]; then
      cat /tmp/parts/"$name".part* >/tmp/"$name"
      [ "$(sha256sum /tmp/"$name" | cut -d' ' -f1)" = "$sum" ] && echo "joined /tmp/$name" >>"$summary" ||
        { echo "join: /tmp/$name does not match its sha256" >>"$summary"; rm -f "/tmp/$name"; }
    else
      echo "join: $(ls /tmp/parts | grep -c "^$name.part") of $count parts of $name here" >>"$summary"
    fi
  done
fi
if [[ " $stages " == *" tests "* ]]; then
  timeout 240 $T/bin/cuda_device_test >"$OUT/ops.log" 2>&1
  echo "cuda_device_test rc=$?" >>"$summary"
  timeout 200 $T/bin/cuda_forward_test >"$OUT/forward.log" 2>&1
  echo "cuda_forward_test rc=$?" >>"$summary"
  grep -E "FAILED|Failure|error" "$OUT/ops.log" "$OUT/forward.log" | head -40 >>"$summary"
  if grep -q FAILED "$OUT/ops.log" "$OUT/forward.log"; then  # which change: PDL or the fusions?
    TERN_CUDA_PDL=0 timeout 240 $T/bin/cuda_device_test >"$OUT/ops-nopdl.log" 2>&1
    echo "cuda_device_test TERN_CUDA_PDL=0 rc=$?" >>"$summary"
    TERN_CUDA_PDL=0 timeout 200 $T/bin/cuda_forward_test >"$OUT/forward-nopdl.log" 2>&1
    echo "cuda_forward_test TERN_CUDA_PDL=0 rc=$?" >>"$summary"
  fi
  # TESTS_QUICK=1: the default configuration and the attention ones only (a short device budget).
  if [ -z "${TESTS_QUICK:-}" ]; then
  # The v2 GEMV for 2 <= n <= 8 (the batched row pairs are the default): the matmul cases with it.
  TERN_CUDA_GEMV_BATCH=0 timeout 120 $T/bin/cuda_device_test --gtest_filter='*Matmul*' \
    >"$OUT/ops-batch.log" 2>&1
  echo "cuda_device_test Matmul with TERN_CUDA_GEMV_BATCH=0 rc=$?" >>"$summary"
  grep -E "Failure|FAILED" "$OUT/ops-batch.log" | head -10 >>"$summary"
  # The int8 tensor-core products behind their flags: gemv_mma.cu for 2 <= n <= 8 and gemm_q8.cu
  # for prefill, against the float64 reference and against the CPU backend's own products.
  grep -E "Int8ProductsEqualTheCpuBackend|int8 matmul vs cpu .* n(9|130) " "$OUT/ops.log" |
    head -20 >>"$summary"
  TERN_CUDA_GEMV_MMA=1 TERN_CUDA_MMQ=1 timeout 150 $T/bin/cuda_device_test \
    --gtest_filter='*Matmul*:*Fused*:*Int8*' >"$OUT/ops-mma.log" 2>&1
  echo "cuda_device_test Matmul/Fused/Int8 with TERN_CUDA_GEMV_MMA=1 TERN_CUDA_MMQ=1 rc=$?" >>"$summary"
  grep -E "Failure|FAILED|int8 matmul vs cpu .* n(3|8) " "$OUT/ops-mma.log" | head -20 >>"$summary"
  TERN_CUDA_MMQ=1 timeout 200 $T/bin/cuda_forward_test >"$OUT/forward-mmq.log" 2>&1
  echo "cuda_forward_test TERN_CUDA_MMQ=1 rc=$?" >>"$summary"
  grep -E "Failure|FAILED" "$OUT/forward-mmq.log" | head -10 >>"$summary"
  # The CUDA-core prefill attention (the tensor-core kernel, attention_prefill.cu, is the default).
  TERN_CUDA_ATTN_PREFILL=0 timeout 150 $T/bin/cuda_device_test --gtest_filter='*Attention*' \
    >"$OUT/ops-attn-cores.log" 2>&1
  echo "cuda_device_test Attention with TERN_CUDA_ATTN_PREFILL=0 rc=$?" >>"$summary"
  grep -E "Failure|FAILED" "$OUT/ops-attn-cores.log" | head -10 >>"$summary"
  fi
  # The decode attention kernels at every length (the default takes v4 below 8K keys and the
  # tensor-core kernel, attention_decode_mma.cu, from there; its early tiles off too) and the
  # prefill kernels other than the default warp-specialized one (attention_prefill_ws.cu; =12 it
  # with Q in shared memory): attention_prefill.cu's plain tiles (=1), cp.async tiles (=2, the fallback for
  # odd GQA groups and GPUs past Hopper) and one chain a score fragment (=7), the one-warpgroup
  # wgmma kernel (=9), each through the attention cases and the forward passes (token trees,
  # chunks, decode). ATTN_TEST_CONFIGS (';'-separated) picks fewer.
  IFS=';' read -ra attn_configs <<<"${ATTN_TEST_CONFIGS:-TERN_CUDA_ATTN=mma;TERN_CUDA_ATTN=mma TERN_CUDA_MMA_EARLY=0;TERN_CUDA_ATTN=4;TERN_CUDA_ATTN_PREFILL=2;TERN_CUDA_ATTN_PREFILL=12}"
  for c in "${attn_configs[@]}"; do
    env $c timeout 150 $T/bin/cuda_device_test --gtest_filter='*Attention*' \
      >"$OUT/ops-attn-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log" 2>&1
    echo "cuda_device_test Attention with $c rc=$?" >>"$summary"
    env $c timeout 200 $T/bin/cuda_forward_test >"$OUT/forward-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log" 2>&1
    echo "cuda_forward_test with $c rc=$?" >>"$summary"
  done
  # The fused decode ops (attention over 777 keys) with the tensor-core decode kernel forced (it
  # takes no q/k norm + RoPE fold: the separate launch runs).
  TERN_CUDA_ATTN=mma timeout 120 $T/bin/cuda_device_test \
    --gtest_filter='*FusedDecode*' >"$OUT/ops-mma-fused.log" 2>&1
  echo "cuda_device_test FusedDecode with TERN_CUDA_ATTN=mma rc=$?" >>"$summary"
  grep -E "Failure|FAILED" "$OUT/ops-mma-fused.log" | head -10 >>"$summary"
  if [ -z "${TESTS_QUICK:-}" ]; then
  # The Q4_K gate/up pair with one warp a pair, at 128 registers (the default) and at ptxas's
  # choice (gemv_q8.cu's TERN_CUDA_GEMV_GLU_REGS=0), forced since the tests' shapes give four.
  # The other pairs (single matrices, q/k/v) with one warp a pair at 128 registers.
  TERN_CUDA_GEMV_PAIR=w1 TERN_CUDA_GEMV_PAIR_REGS=128 timeout 120 $T/bin/cuda_device_test \
    --gtest_filter='*Matmul*:*Fused*' >"$OUT/ops-pair-regs128.log" 2>&1
  echo "cuda_device_test Matmul/Fused with TERN_CUDA_GEMV_PAIR=w1 TERN_CUDA_GEMV_PAIR_REGS=128 rc=$?" >>"$summary"
  grep -E "Failure|FAILED" "$OUT/ops-pair-regs128.log" | head -10 >>"$summary"
  for regs in 128 0; do
    TERN_CUDA_GEMV_PAIR=w1 TERN_CUDA_GEMV_GLU_REGS=$regs timeout 120 $T/bin/cuda_device_test \
      --gtest_filter='*Fused*' >"$OUT/ops-glu-regs$regs.log" 2>&1
    echo "cuda_device_test Fused with TERN_CUDA_GEMV_PAIR=w1 TERN_CUDA_GEMV_GLU_REGS=$regs rc=$?" >>"$summary"
    grep -E "Failure|FAILED" "$OUT/ops-glu-regs$regs.log" | head -10 >>"$summary"
  done
  # The gate/up launch quantizing the down product's input (TERN_CUDA_Q8_OUTPUT=1, default off
  # until measured): the forward passes with it (its own exact test is among the Fused cases).
  TERN_CUDA_Q8_OUTPUT=1 timeout 200 $T/bin/cuda_forward_test >"$OUT/forward-glu-quant.log" 2>&1
  echo "cuda_forward_test with TERN_CUDA_Q8_OUTPUT=1 rc=$?" >>"$summary"
  TERN_CUDA_Q8_OUTPUT=attention timeout 200 $T/bin/cuda_forward_test \
    >"$OUT/forward-attention-quant.log" 2>&1
  echo "cuda_forward_test with TERN_CUDA_Q8_OUTPUT=attention rc=$?" >>"$summary"
  fi
  grep "fused decode ops" "$OUT/ops.log" >>"$summary"
  grep "^\[cuda-forward\]" "$OUT/forward.log" >>"$summary"
fi
if [[ " $stages " == *" greedy "* ]] && [ -n "${REAL_MODELS:-}" ]; then
  # Real model files (REAL_MODELS, ':'-separated), GPU against CPU: greedy continuations and
  # logits, with the default prefill and with every product through the int8 kernels (prefill,
  # decode and the CPU then share their integer arithmetic), then that with the tensor-core
  # prefill attention.
  for c in ${GREEDY_CONFIGS:-- TERN_CUDA_MMQ=1}; do
    envs=()
    [ "$c" != "-" ] && read -ra envs <<<"$c"
    log="$OUT/greedy-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
    env "${envs[@]}" TERN_REAL_MODELS=$REAL_MODELS timeout ${GREEDY_TIMEOUT:-200} $T/bin/cuda_greedy_test >"$log" 2>&1
    echo "cuda_greedy_test [$c] rc=$?" >>"$summary"
    grep -E "^\[cuda-greedy\]|Failure|FAILED" "$log" | head -30 >>"$summary"
  done
fi
if [[ " $stages " == *" shapes "* ]]; then
  # cuda_forward_test's shape variants (tiny llama/qwen3 with each other's widths, one layer, Q4_1)
  # under SHAPE_CONFIGS (';'-separated env lists, '-' the defaults): the GPU's kernel choices and
  # the CPU reference's own paths.
  IFS=';' read -ra sconfigs <<<"${SHAPE_CONFIGS:--;TERN_CUDA_GEMV_PAIR=0;TERN_CPU_PATH=avx2;TERN_PACKED_WEIGHTS=0;TERN_CUDA_MMQ=1;TERN_CUDA_GRAPHS=0}"
  for c in "${sconfigs[@]}"; do
    envs=()
    [ "$c" != "-" ] && read -ra envs <<<"$c"
    log="$OUT/shapes-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
    env "${envs[@]}" timeout 120 $T/bin/cuda_forward_test --gtest_filter='*Shape*' >"$log" 2>&1
    echo "shape variants [$c] rc=$?" >>"$summary"
    grep "^\[cuda-shapes\]" "$log" >>"$summary"
  done
fi
if [[ " $stages " == *" cpu "* ]]; then
  # The CPU reference on this machine's CPU (AVX-512, which CI's lacks): its kernel tests on every
  # path it has, and its own prefill / chunks / decode agreement on the architecture fixtures.
  lscpu | grep -E "Model name|^CPU\(s\)" >>"$summary"
  grep -o -w 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' >>"$summary"
  echo >>"$summary"
  for t in backend_matmul_test cpu_attention_test forward_test; do
    [ -x $T/bin/$t ] || continue
    timeout 200 $T/bin/$t >"$OUT/cpu-$t.log" 2>&1
    echo "$t rc=$?" >>"$summary"
    grep -E "FAILED|Failure|^\[forward\]" "$OUT/cpu-$t.log" | head -20 >>"$summary"
  done
  if [ -x $T/bin/forward_test ]; then
    TERN_CPU_PATH=avx2 timeout 200 $T/bin/forward_test --gtest_filter='*Chunked*' \
      >"$OUT/cpu-forward-avx2.log" 2>&1
    echo "forward_test TERN_CPU_PATH=avx2 rc=$?" >>"$summary"
    grep -E "FAILED|^\[forward\]" "$OUT/cpu-forward-avx2.log" | head -10 >>"$summary"
  fi
  # The GPU against the CPU's AVX2 path on the random quantized models of every architecture.
  TERN_CPU_PATH=avx2 timeout 200 $T/bin/cuda_forward_test --gtest_filter='*QuantizedRandom*' \
    >"$OUT/forward-cpu-avx2.log" 2>&1
  echo "cuda_forward_test QuantizedRandom* with TERN_CPU_PATH=avx2 rc=$?" >>"$summary"
  grep -E "FAILED|^\[cuda-(forward|shapes)\]" "$OUT/forward-cpu-avx2.log" | head -40 >>"$summary"
fi
if [[ " $stages " == *" attn "* ]]; then
  # Decode attention (tern-cuda-bench --attention: one token over 512 to 32K keys) under
  # ATTN_CONFIGS, A B A B, after the attention cases of cuda_device_test with each.
  IFS=';' read -ra aconfigs <<<"${ATTN_CONFIGS:--;TERN_CUDA_ATTN=mma}"
  for c in "${aconfigs[@]}"; do
    envs=()
    [ "$c" != "-" ] && read -ra envs <<<"$c"
    env "${envs[@]}" timeout 120 $T/bin/cuda_device_test --gtest_filter='*Attention*' \
      >"$OUT/attn-test-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log" 2>&1
    echo "cuda_device_test Attention [$c] rc=$?" >>"$summary"
  done
  for round in 1 2; do
    for c in "${aconfigs[@]}"; do
      envs=()
      [ "$c" != "-" ] && read -ra envs <<<"$c"
      log="$OUT/attn-$round-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
      env "${envs[@]}" timeout 120 $T/bin/tern-cuda-bench --attention >"$log" 2>&1
      echo "attention [$c] round $round rc=$?" >>"$summary"
      grep -E "^\| (device|attention)" "$log" >>"$summary"
    done
  done
fi
if [[ " $stages " == *" attnab "* ]]; then
  # The attention kernels of this bundle against an earlier build's (.gpu/tern-cuda-bench-REV.xz,
  # kept by the session that changed them), A B A B on the same machine: tern-cuda-bench
  # --attention (decode over 512 to 32K keys, prefill of 512 tokens after 1K and 16K keys).
  for f in .gpu/tern-cuda-bench-*.xz; do
    [ -f "$f" ] || continue
    prev=/tmp/$(basename "$f" .xz)
    xz -dc "$f" >"$prev" && chmod +x "$prev"
    for round in 1 2; do
      for b in "$prev" $T/bin/tern-cuda-bench; do
        log="$OUT/attnab-$round-$(basename "$b").log"
        timeout 120 "$b" --attention >"$log" 2>&1
        echo "attention [$(basename "$b")] round $round rc=$?" >>"$summary"
        grep -E "^\| attention" "$log" >>"$summary"
      done
    done
  done
fi
if [[ " $stages " == *" kernels "* ]]; then
  # KERNELS_ARGS (--quick, --decode) and KERNEL_CONFIGS (as AB_CONFIGS below: one run each).
  IFS=';' read -ra kconfigs <<<"${KERNEL_CONFIGS:--}"
  for c in "${kconfigs[@]}"; do
    envs=()
    [ "$c" != "-" ] && read -ra envs <<<"$c"
    log="$OUT/kernels$( [ "$c" = "-" ] || echo "-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_')").log"
    env "${envs[@]}" timeout 200 $T/bin/tern-cuda-bench ${KERNELS_ARGS:-} >"$log" 2>&1
    echo "tern-cuda-bench [$c] rc=$?" >>"$summary"
  done
fi
if [[ " $stages " == *" bench "* || " $stages " == *" model "* || " $stages " == *" profile "* ||
  " $stages " == *" compare "* || " $stages " == *" ab "* || " $stages " == *" matrix "* ]] &&
  [ ! -e /tmp/q4km.gguf ]; then
  SECONDS=0
  timeout 300 $T/bin/tern-synth --preset qwen3-8b --quant Q4_K_M --fast-k-quants -o /tmp/q4km.gguf >"$OUT/synth.log" 2>&1
  echo "tern-synth qwen3-8b Q4_K_M rc=$? in ${SECONDS} s on $(nproc) cores" >>"$summary"
  echo "model sha256 $(sha256sum /tmp/q4km.gguf | cut -c1-16), $(stat -c %s /tmp/q4km.gguf) bytes" >>"$summary"
fi
if [[ " $stages " == *" files "* ]]; then
  # The other Qwen3-8B-shaped files of BENCHMARKS.md: Q8_0 and BF16.
  for q in ${FILES:-Q8_0 BF16}; do
    f=/tmp/$(echo $q | tr 'A-Z' 'a-z').gguf
    [ -e "$f" ] && continue
    SECONDS=0
    timeout 300 $T/bin/tern-synth --preset qwen3-8b --quant $q -o "$f" >>"$OUT/synth.log" 2>&1
    echo "tern-synth qwen3-8b $q rc=$? in ${SECONDS} s: sha256 $(sha256sum "$f" | cut -c1-16), $(stat -c %s "$f") bytes" >>"$summary"
  done
fi
if [[ " $stages " == *" long "* ]]; then
  # One file (MODEL): prefill of 4,096 tokens, decode after 16K tokens of context, and 8
  # sequences batched against one; llama-bench's pp4096 and tg128 at depth 16384.
  model=${MODEL:-/tmp/q4km.gguf}
  L=/tmp/llama/bin
  timeout 200 $T/bin/tern bench --device cuda -m "$model" -p 4096 -n 128 -r 3 >"$OUT/long-tern-4096.log" 2>&1
  echo "tern 4096 rc=$?: $(grep -E '^ +4096 ' "$OUT/long-tern-4096.log")" >>"$summary"
  timeout 200 $T/bin/tern bench --device cuda -m "$model" -p 16384 -n 128 -r 2 >"$OUT/long-tern-16k.log" 2>&1
  echo "tern 16384 rc=$?: $(grep -E '^ +16384 ' "$OUT/long-tern-16k.log")" >>"$summary"
  timeout 200 $T/bin/tern bench --device cuda -m "$model" -p 512 -n 128 -r 2 --parallel 1 --parallel 8 \
    >"$OUT/parallel.log" 2>&1
  echo "tern --parallel 1 / 8 rc=$?" >>"$summary"
  grep -E '^ +512 ' "$OUT/parallel.log" >>"$summary"
  TERN_CUDA_GEMV_BATCH=0 timeout 200 $T/bin/tern bench --device cuda -m "$model" -p 512 -n 128 -r 2 \
    --parallel 1 --parallel 8 >"$OUT/parallel-batch.log" 2>&1
  echo "tern --parallel 1 / 8 with TERN_CUDA_GEMV_BATCH=0 (v2) rc=$?" >>"$summary"
  grep -E '^ +512 ' "$OUT/parallel-batch.log" >>"$summary"
  wait_llama
  if [ -x $L/llama-bench ]; then
    LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 200 $L/llama-bench -m "$model" -fa 1 -ngl 99 \
      -p 4096 -n 0 -r 3 >"$OUT/long-llama-4096.log" 2>&1
    echo "llama-bench pp4096 rc=$?: $(grep '^| [a-z]' "$OUT/long-llama-4096.log" | grep -v model)" >>"$summary"
    LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 200 $L/llama-bench -m "$model" -fa 1 -ngl 99 \
      -p 0 -n 128 -d 16384 -r 2 >"$OUT/long-llama-16k.log" 2>&1
    echo "llama-bench tg128@d16384 rc=$?: $(grep '^| [a-z]' "$OUT/long-llama-16k.log" | grep -v model)" >>"$summary"
  fi
fi
if [[ " $stages " == *" matrix "* ]]; then
  # BENCHMARKS.md's table, file by file (MATRIX_FILES; default the Qwen3-8B-shaped files that
  # `model` and `files` write, then REAL_MODELS): tern bench's prefill of 512 and 4,096 tokens
  # after 1K and 16K tokens of context (-d) and decode of 128 and 512 tokens after 1K and 16K
  # tokens, then llama-bench's same tests on the same file (pp512 / pp4096, tg128 / tg512 at
  # depth 1024 and 16384). MATRIX_DECODE_ONLY=1: the decode tests only; MATRIX_PREFILL_ONLY=1: the
  # prefill ones only. MATRIX_DEPTHS: the context depths (default "1024 16384"; SmolLM2's
  # context is 8,192 tokens: "1024 4000" there, as 4,096 prompt tokens after 4,096 overflow it).
  L=/tmp/llama/bin
  # A llama.cpp build still running on this machine's CPUs slows Tern's host side (2026-12-06:
  # Q4_K_M decode repetitions spread 262-332 tok/s beside it): wait for it first.
  wait_llama
  files=${MATRIX_FILES:-/tmp/q4km.gguf /tmp/q8_0.gguf /tmp/bf16.gguf}
  read -ra depths <<<"${MATRIX_DEPTHS:-1024 16384}"
  depth_pattern="^ +($(IFS='|'; echo "${depths[*]}")) "
  after=() prompts=()
  for d in "${depths[@]}"; do after+=(-d "$d") && prompts+=(-p "$d"); done
  [ -n "${REAL_MODELS:-}" ] && files="$files ${REAL_MODELS//:/ }"
  for f in $files; do
    [ -e "$f" ] || { echo "matrix: no $f" >>"$summary"; continue; }
    name=$(basename "$f" .gguf)
    if [ -z "${MATRIX_DECODE_ONLY:-}" ]; then
      timeout 240 $T/bin/tern bench --device cuda -m "$f" "${after[@]}" -p 512 -p 4096 -n 1 -r 2 \
        >"$OUT/matrix-$name-prefill.log" 2>&1
      echo "matrix $name: tern prefill after ${depths[*]} tokens rc=$?" >>"$summary"
      grep -E "$depth_pattern" "$OUT/matrix-$name-prefill.log" >>"$summary"
    fi
    if [ -z "${MATRIX_PREFILL_ONLY:-}" ]; then
      timeout 240 $T/bin/tern bench --device cuda -m "$f" "${prompts[@]}" -n 128 -n 512 -r 2 \
        >"$OUT/matrix-$name-decode.log" 2>&1
      echo "matrix $name: tern decode rc=$?" >>"$summary"
      grep -E "$depth_pattern" "$OUT/matrix-$name-decode.log" >>"$summary"
    fi
    wait_llama
    if [ -x $L/llama-bench ]; then
      prefill=512,4096 decode=128,512
      [ -n "${MATRIX_DECODE_ONLY:-}" ] && prefill=0
      [ -n "${MATRIX_PREFILL_ONLY:-}" ] && decode=0
      LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 300 $L/llama-bench -m "$f" -fa 1 -ngl 99 \
        -p $prefill -n $decode -d "$(IFS=,; echo "${depths[*]}")" -r 2 >"$OUT/matrix-$name-llama.log" 2>&1
      echo "matrix $name: llama-bench rc=$?" >>"$summary"
      grep '^| [a-z]' "$OUT/matrix-$name-llama.log" | grep -v model >>"$summary"
    fi
  done
fi
if [[ " $stages " == *" decode16k "* ]]; then
  # Decode after 16K tokens of context (MODEL) under ATTN_CONFIGS, A B.
  model=${MODEL:-/tmp/q4km.gguf}
  IFS=';' read -ra aconfigs <<<"${ATTN_CONFIGS:--;TERN_CUDA_ATTN=mma}"
  for c in "${aconfigs[@]}"; do
    envs=()
    [ "$c" != "-" ] && read -ra envs <<<"$c"
    log="$OUT/decode16k-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
    env "${envs[@]}" timeout 150 $T/bin/tern bench --device cuda -m "$model" -p 16384 -n 128 -r 2 \
      >"$log" 2>&1
    echo "tern -p 16384 -n 128 [$c] rc=$?: $(grep -E '^ +16384 ' "$log")" >>"$summary"
  done
  wait_llama
  if [ -x /tmp/llama/bin/llama-bench ]; then  # the same file, in the same call
    timeout 200 /tmp/llama/bin/llama-bench -m "$model" -fa 1 -ngl 99 -p 0 -n 128 -d 16384 -r 2 \
      >"$OUT/decode16k-llama.log" 2>&1
    echo "llama-bench tg128@d16384 rc=$?: $(grep '^| [a-z]' "$OUT/decode16k-llama.log" | grep -v model)" \
      >>"$summary"
  fi
fi
if [[ " $stages " == *" pending "* ]]; then
  # The defaults not yet timed inside the decode step (bench/README.md's "Open (CUDA)"
  # says why and predicts): the wide Q8_0 loads (gemv_q8.cu's q8_wide, default since 2026-12-07
  # on a kernel-alone figure): `CudaOps.*` with the old loads (TERN_CUDA_GEMV_Q8_WIDE=0), then
  # Q8_0 decode after 512 tokens, the default against the old loads, interleaved
  # (PENDING_ROUNDS, default 2). Needs the `files` stage's /tmp/q8_0.gguf (FILES=Q8_0).
  TERN_CUDA_GEMV_Q8_WIDE=0 timeout 120 $T/bin/cuda_device_test --gtest_filter='CudaOps.*' \
    >"$OUT/pending-q8-tests.log" 2>&1
  echo "CudaOps tests [TERN_CUDA_GEMV_Q8_WIDE=0] rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/pending-q8-tests.log" | tr '\n' ' ')" >>"$summary"
  for round in $(seq 1 "${PENDING_ROUNDS:-2}"); do
    [ -e /tmp/q8_0.gguf ] || { echo "pending: no /tmp/q8_0.gguf (FILES=Q8_0 ... files pending)" >>"$summary" && break; }
    for c in - TERN_CUDA_GEMV_Q8_WIDE=0; do
      envs=()
      [ "$c" != "-" ] && read -ra envs <<<"$c"
      log="$OUT/pending-q8-$round-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
      env "${envs[@]}" TERN_CUDA_TIMING=1 timeout 60 $T/bin/tern bench --device cuda \
        -m /tmp/q8_0.gguf -p 512 -n 128 -r 1 >"$log" 2>&1
      echo "Q8_0 after 512 [$c] rc=$?: $(grep -E '^ +512 ' "$log") $(grep -o 'gpu [0-9][0-9]*' "$log" | head -1)" >>"$summary"
    done
  done
fi
if [[ " $stages " == *" parallel "* ]]; then
  # 8 sequences batched against one (MODEL), for each configuration of PARALLEL_CONFIGS (as
  # AB_CONFIGS below; default: the batched row-pair GEMV, then the v2 kernel).
  model=${MODEL:-/tmp/q4km.gguf}
  IFS=';' read -ra pconfigs <<<"${PARALLEL_CONFIGS:--;TERN_CUDA_GEMV_BATCH=0}"
  for c in "${pconfigs[@]}"; do
    envs=()
    [ "$c" != "-" ] && read -ra envs <<<"$c"
    log="$OUT/parallel-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
    env "${envs[@]}" timeout 200 $T/bin/tern bench --device cuda -m "$model" -p 512 -n 128 -r 2 \
      --parallel 1 --parallel 8 >"$log" 2>&1
    echo "tern --parallel 1 / 8 [$c] rc=$?" >>"$summary"
    grep -E '^ +512 |steps of' "$log" >>"$summary"
  done
fi
if [[ " $stages " == *" prefill "* ]]; then
  # Prefill of 512 and 4,096 tokens and sampled decode (MODEL) under each configuration of
  # PREFILL_CONFIGS, twice in alternation (A B A B), after PREFILL_DEPTH tokens of context (default
  # 0), then llama-bench's pp512 / pp4096 once (at the same depth).
  model=${MODEL:-/tmp/q4km.gguf}
  IFS=';' read -ra fconfigs <<<"${PREFILL_CONFIGS:--;TERN_CUDA_ATTN_PREFILL=0;TERN_CUDA_MMQ=1}"
  for round in 1 2; do
    for c in "${fconfigs[@]}"; do
      envs=()
      [ "$c" != "-" ] && read -ra envs <<<"$c"
      log="$OUT/prefill-$round-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
      env "${envs[@]}" timeout 200 $T/bin/tern bench --device cuda -m "$model" -p 512 -p 4096 \
        -d "${PREFILL_DEPTH:-0}" -n 64 -r 2 >"$log" 2>&1
      echo "tern prefill after ${PREFILL_DEPTH:-0} tokens [$c] round $round rc=$?" >>"$summary"
      grep -E '^ +[0-9]+ +[0-9]+ ' "$log" >>"$summary"
    done
  done
  for c in - TERN_CUDA_SAMPLE=0; do  # sample.cu, or the row brought back and picked on the host
    envs=()
    [ "$c" != "-" ] && envs=("$c")
    env "${envs[@]}" timeout 120 $T/bin/tern bench --device cuda -m "$model" -p 512 -n 128 -r 2 \
      --temp 1 >"$OUT/sampled-$c.log" 2>&1
    echo "tern sampled decode (--temp 1) [$c] rc=$?: $(grep -E '^ +512 ' "$OUT/sampled-$c.log")" \
      >>"$summary"
  done
  wait_llama
  if [ -x /tmp/llama/bin/llama-bench ]; then
    LD_LIBRARY_PATH=/tmp/llama/bin:$LD_LIBRARY_PATH timeout 200 /tmp/llama/bin/llama-bench \
      -m "$model" -fa 1 -ngl 99 -p 512,4096 -n 0 -d "${PREFILL_DEPTH:-0}" -r 2 \
      >"$OUT/prefill-llama.log" 2>&1
    echo "llama-bench pp512/pp4096 rc=$?" >>"$summary"
    grep '^| [a-z]' "$OUT/prefill-llama.log" | grep -v model >>"$summary"
  fi
fi
if [[ " $stages " == *" profile "* ]]; then
  # Decode steps after a 512-token prompt (ncu profiles each kernel node of the replayed graphs
  # on its own, and flushes the caches before each one: cold L2). PROFILE_ARGS adds tern bench
  # options ("--parallel 8": the batched step of 8 sequences, whose 4x is not met yet).
  SECONDS=0
  timeout 240 ncu --clock-control none --csv --page raw \
    --metrics "${NCU_METRICS:-gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second}" --launch-skip "${NCU_SKIP:-2600}" --launch-count "${NCU_COUNT:-3400}" \
    --log-file "$OUT/ncu.csv" $T/bin/tern bench --device cuda -m /tmp/q4km.gguf -p 512 -n ${PROFILE_N:-8} -r 1 \
    ${PROFILE_ARGS:-} >"$OUT/ncu-run.log" 2>&1
  echo "ncu rc=$? in ${SECONDS} s" >>"$summary"
  python3 tools/cuda/ncu_summary.py "$OUT/ncu.csv" >"$OUT/ncu-summary.md" 2>&1
  head -40 "$OUT/ncu-summary.md" >>"$summary"
fi
if [[ " $stages " == *" stalls "* ]]; then
  # Why a kernel of the decode step runs below the copy roofline: Nsight Compute's full sections
  # (speed of light, memory workload, warp states, scheduler, occupancy) for STALL_KERNELS (';'-
  # separated regexes, default the Q4_K_M step's row-pair products: gate/up and the others), two
  # launches each, late in a decode run (cold L2 per launch; STALL_SKIP launches skipped,
  # STALL_ARGS the bench's arguments: `-p 512 -d 16384 -n 1 -r 1` with STALL_SKIP=250 reaches the
  # prefill attention's chunks after ~14K keys). The text report goes to $OUT; the
  # lines that answer "memory-bound, latency-bound or issue-bound" go to the summary.
  IFS=';' read -ra kernels <<<"${STALL_KERNELS:-gemv_pair_glu_kernel;gemv_pair_kernel;gemv_pair_multi_kernel}"
  for k in "${kernels[@]}"; do
    log="$OUT/stalls-$(echo "$k" | tr -c 'A-Za-z0-9\n' '_').txt"
    timeout 200 ncu --set full -k "regex:$k" --launch-skip "${STALL_SKIP:-400}" --launch-count 2 \
      $T/bin/tern bench --device cuda -m "${STALL_MODEL:-/tmp/q4km.gguf}" ${STALL_ARGS:--p 512 -n 16 -r 1} >"$log" 2>&1
    echo "ncu --set full [$k] rc=$?" >>"$summary"
    grep -E "^  [a-z_:<>,0-9 ]+\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|One or More Eligible|Waves Per SM|Block Limit" \
      "$log" | head -60 >>"$summary"
    # Where the warps wait: cycles a warp spends stalled for each reason per issued instruction
    # (long_scoreboard: global/L2 loads; barrier: __syncthreads; short_scoreboard: shared memory
    # and MUFU; wait: fixed-latency dependencies such as mma chains; math_pipe_throttle: a busy
    # pipe), the reasons above 0.2 cycles.
    timeout 200 ncu --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      -k "regex:$k" --launch-skip "${STALL_SKIP:-400}" --launch-count 1 \
      $T/bin/tern bench --device cuda -m "${STALL_MODEL:-/tmp/q4km.gguf}" ${STALL_ARGS:--p 512 -n 16 -r 1} >"$log.reasons" 2>&1
    echo "stall reasons [$k] rc=$?" >>"$summary"
    awk '/issue_stalled_/ && $NF + 0 > 0.2 {sub(/smsp__average_warps_issue_stalled_/, ""); print "   ", $1, $NF}' \
      "$log.reasons" | head -20 >>"$summary"
  done
fi
if [[ " $stages " == *" compare "* ]]; then
  # A B A B: tern bench (with TERN_CUDA_TIMING=1: where each decode step's time goes) and
  # llama-bench (flash attention on, all layers on the GPU) on the same file.
  L=/tmp/llama/bin
  for round in $(seq 1 "${COMPARE_ROUNDS:-2}"); do
    TERN_CUDA_TIMING=1 timeout 200 $T/bin/tern bench --device cuda -m /tmp/q4km.gguf -p 512 -n 128 -r 3 \
      >"$OUT/compare-tern-$round.log" 2>&1
    echo "tern bench round $round rc=$?" >>"$summary"
    cat "$OUT/compare-tern-$round.log" >>"$summary"
    wait_llama
    if [ -x $L/llama-bench ]; then
      LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 200 $L/llama-bench -m /tmp/q4km.gguf -fa 1 -ngl 99 \
        -p 512 -n 128 -d 0,512 -r 3 >"$OUT/compare-llama-$round.log" 2>&1
      echo "llama-bench round $round rc=$?" >>"$summary"
      grep "^|" "$OUT/compare-llama-$round.log" >>"$summary"
    fi
  done
  if [ -n "${COMPARE_UNFUSED:-}" ]; then  # A/B: the same build with the fusions off
    TERN_CUDA_FUSE=0 TERN_CUDA_TIMING=1 timeout 200 $T/bin/tern bench --device cuda -m /tmp/q4km.gguf \
      -p 512 -n 128 -r 2 >"$OUT/compare-tern-unfused.log" 2>&1
    echo "tern bench TERN_CUDA_FUSE=0 rc=$?" >>"$summary"
    cat "$OUT/compare-tern-unfused.log" >>"$summary"
    TERN_CUDA_PDL=0 TERN_CUDA_TIMING=1 timeout 200 $T/bin/tern bench --device cuda -m /tmp/q4km.gguf \
      -p 512 -n 128 -r 2 >"$OUT/compare-tern-nopdl.log" 2>&1
    echo "tern bench TERN_CUDA_PDL=0 rc=$?" >>"$summary"
    cat "$OUT/compare-tern-nopdl.log" >>"$summary"
  fi
fi
if [[ " $stages " == *" steps "* ]]; then
  # Decode after 1K and 16K tokens on every file (STEP_FILES, default the three Qwen3-8B-shaped
  # files) under each configuration of STEP_CONFIGS, STEP_ROUNDS rounds (default 1): which decode
  # attention helps the whole step on which weights (the tensor-core kernel slowed the Q8_0 and
  # BF16 steps, 2026-12-05), and why: programmatic dependent launch (PDL=0), the products'
  # L2 prefetch of their weights while it runs (GEMV_PREFETCH=0), or its dependents starting
  # as soon as its blocks have (ATTN_DEPENDENTS=late).
  IFS=';' read -ra sconfigs <<<"${STEP_CONFIGS:-TERN_CUDA_ATTN=4;TERN_CUDA_ATTN=mma;TERN_CUDA_ATTN=4 TERN_CUDA_PDL=0;TERN_CUDA_ATTN=mma TERN_CUDA_PDL=0;TERN_CUDA_ATTN=mma TERN_CUDA_GEMV_PREFETCH=0;TERN_CUDA_ATTN=4 TERN_CUDA_GEMV_PREFETCH=0;TERN_CUDA_ATTN=mma TERN_CUDA_ATTN_DEPENDENTS=late}"
  for f in ${STEP_FILES:-/tmp/q4km.gguf /tmp/q8_0.gguf /tmp/bf16.gguf}; do
    [ -e "$f" ] || { echo "steps: no $f" >>"$summary"; continue; }
    for round in $(seq 1 "${STEP_ROUNDS:-1}"); do
      for c in "${sconfigs[@]}"; do
        envs=()
        [ "$c" != "-" ] && read -ra envs <<<"$c"
        log="$OUT/steps-$(basename "$f" .gguf)-$round-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
        env "${envs[@]}" timeout 120 $T/bin/tern bench --device cuda -m "$f" -p 1024 -p 16384 -n 64 \
          -r 1 >"$log" 2>&1
        echo "steps $(basename "$f") [$c] round $round rc=$?:" $(grep -E '^ +(1024|16384) ' "$log" |
          awk '{print $1 ": " $5}') >>"$summary"
      done
    done
  done
fi
if [[ " $stages " == *" ab "* ]]; then
  # Interleaved A B A B on one file (MODEL, default the Q4_K_M one): each configuration of
  # AB_CONFIGS (';'-separated; each a space-separated list of VAR=value, '-' for the defaults)
  # with TERN_CUDA_TIMING=1, then llama-bench (-fa 1 -ngl 99, decode at depth 512 like Tern's
  # after its 512-token prompt), AB_ROUNDS rounds (default 2).
  model=${MODEL:-/tmp/q4km.gguf}
  L=/tmp/llama/bin
  IFS=';' read -ra configs <<<"${AB_CONFIGS:--}"
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for c in "${configs[@]}"; do
      envs=()
      [ "$c" != "-" ] && read -ra envs <<<"$c"
      log="$OUT/ab-$round-$(echo "$c" | tr -c 'A-Za-z0-9\n' '_').log"
      env "${envs[@]}" TERN_CUDA_TIMING=1 timeout 150 $T/bin/tern bench --device cuda -m "$model" \
        -p 512 -n 128 -r 3 >"$log" 2>&1
      echo "tern [$c] round $round rc=$?: $(grep -E '^ +512 ' "$log")" >>"$summary"
      grep -o "steps of .*" "$log" | head -1 >>"$summary"
    done
    wait_llama
    if [ -x $L/llama-bench ]; then
      LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 150 $L/llama-bench -m "$model" -fa 1 -ngl 99 \
        -p 512 -n 128 -d 512 -r 3 >"$OUT/ab-$round-llama.log" 2>&1
      echo "llama-bench round $round rc=$?" >>"$summary"
      grep "^| [a-z]" "$OUT/ab-$round-llama.log" | grep -v model >>"$summary"
    fi
  done
fi
if [[ " $stages " == *" prev "* ]]; then
  # A B A B: an earlier build's tern (.gpu/tern-prev.xz, xz of its stripped bin/tern, carried or
  # unpacked by an earlier call of this warm machine) against this bundle's, PREV_ARGS on MODEL.
  [ -f .gpu/tern-prev.xz ] && xz -dc .gpu/tern-prev.xz >/tmp/tern-prev && chmod +x /tmp/tern-prev
  model=${MODEL:-/tmp/q4km.gguf}
  if [ -x /tmp/tern-prev ]; then
    for round in $(seq 1 "${PREV_ROUNDS:-2}"); do
      for build in prev this; do
        bin=$T/bin/tern && [ $build = prev ] && bin=/tmp/tern-prev
        log="$OUT/prev-$round-$build.log"
        TERN_CUDA_TIMING=1 timeout 200 $bin bench --device cuda -m "$model" ${PREV_ARGS:--p 512 -n 128 -r 3} \
          >"$log" 2>&1
        echo "tern ($build build) round $round rc=$?: $(grep -E '^ +[0-9]+ ' "$log" | tr -s ' ' | head -2 | tr '\n' ';')" >>"$summary"
        grep -o "steps of .*" "$log" | head -1 >>"$summary"
      done
    done
  else
    echo "prev: no .gpu/tern-prev.xz carried" >>"$summary"
  fi
fi
if [[ " $stages " == *" skips "* ]]; then
  # What each kernel costs inside the captured decode step: the step's GPU time with the launches
  # of one kernel dropped (TERN_CUDA_SKIP_KERNELS, timing only), against the full step, on MODEL
  # with SKIPS_ARGS. SKIPS: ';'-separated sets of names (mangled-name substrings). Prints one
  # table line a set: GPU us a step and what the dropped launches cost.
  model=${MODEL:-/tmp/q4km.gguf}
  IFS=';' read -ra skip_sets <<<"${SKIPS:-row_norm_kernel;rms_norm_rope_kernel;attention_v4_kernel;combine_kernel;quantize_q8;gemv_pair_multi_kernel;gemv_pair_kernel;gemv_pair_glu_kernel;row_norm_kernel,rms_norm_rope_kernel,attention_v4_kernel,combine_kernel,quantize_q8}"
  step_gpu() { grep -o 'gpu [0-9][0-9]*' "$1" | head -1 | cut -d' ' -f2; }
  TERN_CUDA_TIMING=1 timeout 150 $T/bin/tern bench --device cuda -m "$model" ${SKIPS_ARGS:--p 512 -n 128 -r 2} \
    >"$OUT/skips-none.log" 2>&1
  base=$(step_gpu "$OUT/skips-none.log")
  echo "| dropped | GPU us a step | their cost a step |" >>"$summary"
  echo "| --- | ---: | ---: |" >>"$summary"
  echo "| nothing | $base | |" >>"$summary"
  for set in "${skip_sets[@]}"; do
    log="$OUT/skips-$(echo "$set" | tr -c 'A-Za-z0-9\n' '_').log"
    TERN_CUDA_SKIP_KERNELS=$set TERN_CUDA_TIMING=1 timeout 150 $T/bin/tern bench --device cuda \
      -m "$model" ${SKIPS_ARGS:--p 512 -n 128 -r 2} >"$log" 2>&1
    gpu=$(step_gpu "$log")
    echo "| $set | $gpu | $(( ${base:-0} - ${gpu:-0} )) |" >>"$summary"
  done
fi
if [[ " $stages " == *" bench "* ]]; then
  timeout 240 $T/bin/tern bench --device cuda -m /tmp/q4km.gguf -p 512 -n 128 -r 3 >"$OUT/bench.log" 2>&1
  echo "tern bench rc=$?" >>"$summary"
  TERN_CUDA_GRAPHS=0 timeout 120 $T/bin/tern bench --device cuda -m /tmp/q4km.gguf -p 512 -n 32 -r 1 \
    >"$OUT/bench-nographs.log" 2>&1
  echo "tern bench without graphs rc=$?" >>"$summary"
  cat "$OUT/bench.log" "$OUT/bench-nographs.log" >>"$summary"
fi
for f in "$OUT"/kernels*.log; do [ -e "$f" ] && echo "$f" && grep -A200 "^| case" "$f"; done
cat "$summary"
# At most 8 files come back from a call: the logs travel as one archive beside the summary.
logs=$(cd "$OUT" && ls ./*.log 2>/dev/null)
if [ -n "$logs" ]; then
  (cd "$OUT" && tar -czf logs.tar.gz ./*.log && rm -f ./*.log)
fi
