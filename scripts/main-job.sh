#!/usr/bin/env bash
# The main job: serve the default model on 127.0.0.1:8000 (Ctrl-C stops it).
# TERN_MODEL and TERN_PORT override the model and the port.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
exec "$root/build/bin/tern" serve --model "${TERN_MODEL:-smollm2-135m}" --port "${TERN_PORT:-8000}"
