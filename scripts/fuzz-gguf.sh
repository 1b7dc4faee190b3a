#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer (clang, ASan + UBSan) for SECONDS (default 60).
# Seeds: the sample files Tern's writer makes. Exits non-zero if the fuzzer finds a crash.
# Usage: scripts/fuzz-gguf.sh [SECONDS]
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTERN_FUZZ=ON -DTERN_BUILD_TESTS=OFF -DTERN_BUILD_BENCH=OFF >/dev/null
ninja -C "$build" gguf_reader_fuzz

# Seeds from the (non-fuzz) writer sample: build it in the normal tree if needed.
seeds="$build/seeds"
corpus="$build/corpus"
mkdir -p "$seeds" "$corpus"
if [ ! -x "$root/build/tests/io/gguf_write_sample" ]; then
  cmake -S "$root" -B "$root/build" -G Ninja >/dev/null
  ninja -C "$root/build" gguf_write_sample
fi
"$root/build/tests/io/gguf_write_sample" "$seeds"

echo "fuzzing the GGUF reader for ${seconds}s"
"$build/fuzz/gguf_reader_fuzz" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "$corpus" "$seeds"
