#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input with libFuzzer (clang, ASan + UBSan), SECONDS each
# (default 60): the GGUF reader (seeds: the sample files Tern's writer makes) and the
# chat-template engine (seeds: the real templates in tests/data/chat-templates, with a dictionary
# of Jinja's syntax). Exits non-zero if a fuzzer finds a crash, a leak or a hang.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: gguf templates; default both)
set -euo pipefail
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf templates)
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTERN_FUZZ=ON -DTERN_BUILD_TESTS=OFF -DTERN_BUILD_BENCH=OFF >/dev/null
# -timeout: one input may take at most 10 s; -rss_limit_mb / -malloc_limit_mb: at most 2 GiB;
# what a fuzzer finds (crash-*, leak-*, timeout-*, oom-*) is written into build-fuzz/.
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1
  -artifact_prefix="$build/")

fuzz_gguf() {
  ninja -C "$build" gguf_reader_fuzz
  # Seeds from the (non-fuzz) writer sample: build it in the normal tree if needed.
  local seeds="$build/seeds" corpus="$build/corpus"
  mkdir -p "$seeds" "$corpus"
  if [ ! -x "$root/build/tests/io/gguf_write_sample" ]; then
    cmake -S "$root" -B "$root/build" -G Ninja >/dev/null
    ninja -C "$root/build" gguf_write_sample
  fi
  "$root/build/tests/io/gguf_write_sample" "$seeds"
  echo "fuzzing the GGUF reader for ${seconds}s"
  "$build/fuzz/gguf_reader_fuzz" -max_total_time="$seconds" -max_len=8192 "${limits[@]}" \
    "$corpus" "$seeds"
}

fuzz_templates() {
  ninja -C "$build" chat_template_fuzz
  local corpus="$build/corpus-templates"
  mkdir -p "$corpus"
  echo "fuzzing the chat-template engine for ${seconds}s"
  "$build/fuzz/chat_template_fuzz" -max_total_time="$seconds" -max_len=16384 "${limits[@]}" \
    -dict="$root/fuzz/jinja.dict" "$corpus" "$root/tests/data/chat-templates/templates"
}

for target in "${targets[@]}"; do
  case "$target" in
    gguf) fuzz_gguf ;;
    templates) fuzz_templates ;;
    *) echo "scripts/fuzz.sh: unknown target '$target' (gguf, templates)" >&2; exit 2 ;;
  esac
done
