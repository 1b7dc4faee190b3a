#!/usr/bin/env bash
# Builds Tern with warnings as errors and runs every test (CTest: GoogleTest suites and the
# python-oracle checks). Needs ./setup.sh --no-run (or scripts/install-deps.sh) to have run once.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/build.sh -DTERN_WERROR=ON
scripts/install-models.sh >/dev/null
# Tests that need the real models find them here.
eval "$(build/bin/tern list --json | .venv/bin/python -c '
import json, sys
names = {"smollm2-135m": "TERN_SMOLLM2_GGUF", "gemma3-270m": "TERN_GEMMA3_GGUF"}
for m in json.load(sys.stdin):
    if m["name"] in names:
        print("export " + names[m["name"]] + "=" + m["files"][0])
')"
if [ -z "${TERN_SMOLLM2_GGUF:-}" ] || [ -z "${TERN_GEMMA3_GGUF:-}" ]; then
  echo "error: the real models are not installed; run ./setup.sh --no-run" >&2
  exit 1
fi
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
