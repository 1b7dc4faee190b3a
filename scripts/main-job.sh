#!/usr/bin/env bash
# The main job until the server exists: the default model, described and run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tern="$root/build/bin/tern"
model="${TERN_MODEL:-smollm2-135m}"
"$tern" show "$model" | head -3
echo
echo "Try it:  $tern tokenize --model $model 'Hello, world!'"
"$tern" tokenize --model "$model" "Hello, world!"
