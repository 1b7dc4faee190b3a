#!/usr/bin/env bash
# One command on a fresh machine: installs what is missing (Debian and PyPI packages, the real
# models), builds Tern, and runs it on the default model.
# Usage: ./setup.sh [--no-run]
set -euo pipefail
root="$(cd "$(dirname "$0")" && pwd)"
cd "$root"
scripts/install-deps.sh
scripts/build.sh
scripts/install-models.sh
if [ "${1:-}" != "--no-run" ]; then
  echo
  echo "Tern is built: $root/build/bin/tern"
  exec scripts/main-job.sh
fi
