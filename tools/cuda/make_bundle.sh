#!/usr/bin/env bash
# Packs what tools/cuda/gpu_run.sh needs on the GPU machine into .gpu/bundle.tar.xz (an ignored
# folder the device tool carries): the CUDA build's binaries (stripped) and the non-system
# shared libraries they load. cuBLAS is not packed: the GPU machine's toolkit has it.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
b=${TERN_CUDA_BUILD:-$root/build-cuda}
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" "$root/.gpu"
for f in bin/tern bin/tern-synth bin/tern-cuda-bench tests/backend/cuda_device_test \
  tests/models/cuda_forward_test tests/engine/cuda_greedy_test; do
  strip -o "$stage/bin/$(basename "$f")" "$b/$f"
done
# The CPU backend's own tests where they were built here (ninja -C build-cuda backend_matmul_test
# cpu_attention_test forward_test): the GPU machine's CPU has AVX-512, which CI's has not.
for f in tests/backend/backend_matmul_test tests/backend/cpu_attention_test \
  tests/models/forward_test; do
  [ -x "$b/$f" ] && strip -o "$stage/bin/$(basename "$f")" "$b/$f"
done
for lib in $(ldd "$stage"/bin/* | awk '/=>/ {print $3}' | sort -u); do
  case "$lib" in
    */libc.so* | */libm.so* | */libpthread* | */libdl.so* | */librt.so* | */libgcc_s* | \
      */libstdc++* | */libcublas* | */ld-linux*) ;;
    # NCCL (218 MB) comes with the CUDA toolkit, here and on the GPU machine, as cuBLAS does.
    */libnccl*) ;;
    # libcurl and what it loads: the GPU machine's image has its own libcurl.so.4 (seen
    # 2026-12-04), and the bundle shares the 64 MiB a call carries with the llama.cpp build.
    */libcurl* | */libgnutls* | */libkrb5* | */libgssapi* | */libk5crypto* | */libcom_err* | \
      */libkeyutils* | */libnettle* | */libhogweed* | */libgmp* | */libp11-kit* | */libtasn1* | \
      */libunistring* | */libidn2* | */libssh2* | */libldap* | */liblber* | */libsasl2* | \
      */libbrotli* | */libzstd* | */libnghttp2* | */librtmp* | */libpsl* | */libffi*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
# Where the tests look for their fixtures: the build's source tree (a worktree, say).
sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$b/CMakeCache.txt" >"$stage/srcdir"
# xz -9e: the bundle shares the 64 MiB a call carries with the llama.cpp build.
tar -cf - -C "$stage" bin lib srcdir | xz -9e -T0 >"$root/.gpu/bundle.tar.xz"
rm -rf "$stage"
ls -la "$root/.gpu/bundle.tar.xz"
