#!/usr/bin/env bash
# Packs what tools/cuda/gpu_run.sh needs on the GPU machine into .gpu/bundle.tar.xz (an ignored
# folder the device tool carries): the CUDA build's binaries (stripped) and the non-system
# shared libraries they load. cuBLAS is not packed: the GPU machine's toolkit has it.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
b=$root/build-cuda
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" "$root/.gpu"
for f in bin/tern bin/tern-synth bin/tern-cuda-bench tests/backend/cuda_device_test \
  tests/models/cuda_forward_test; do
  strip -o "$stage/bin/$(basename "$f")" "$b/$f"
done
for lib in $(ldd "$stage"/bin/* | awk '/=>/ {print $3}' | sort -u); do
  case "$lib" in
    */libc.so* | */libm.so* | */libpthread* | */libdl.so* | */librt.so* | */libgcc_s* | \
      */libstdc++* | */libcublas* | */ld-linux*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
tar -cJf "$root/.gpu/bundle.tar.xz" -C "$stage" bin lib
rm -rf "$stage"
ls -la "$root/.gpu/bundle.tar.xz"
