#!/usr/bin/env bash
# Packs the llama.cpp peer for the GPU machine (which reaches no registry) into .peer/ (an
# ignored folder): the llama.cpp sources of PyPI's llama-cpp-python sdist, trimmed to what
# llama-bench needs (the CPU and CUDA backends), as .peer/llama-src.tar.xz, and
# .peer/build-llama.sh, which builds llama-bench there with CUDA for sm_90a into /tmp/llama/bin.
# tools/cuda/gpu_run.sh's `llama` stage starts that build in the background; carry ".peer" with
# the call. Nothing of llama.cpp is kept in this repository.
#   tools/compare/pack_llama_peer.sh [VERSION]   (default 0.3.36, the version of the recorded runs)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version=${1:-0.3.36}
python=${PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$root/.peer"
"$python" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "error: no llama.cpp sources in the sdist" >&2; exit 1; }
# Not needed to build llama-bench: documentation, vocabularies, Python, tests, the web UI and the
# backends other than the CPU and CUDA ones.
rm -rf "$src"/{docs,models,gguf-py,tests,benches,media,pocs,ci,conversion,skills,examples} \
  "$src/tools/ui" "$src/.github"
for b in "$src"/ggml/src/ggml-*/; do
  case "$(basename "$b")" in ggml-cpu | ggml-cuda | ggml-blas) ;; *) rm -rf "$b" ;; esac
done
tar -cf - -C "$src/.." llama.cpp | xz -9e -T0 >"$root/.peer/llama-src.tar.xz.tmp"
mv "$root/.peer/llama-src.tar.xz.tmp" "$root/.peer/llama-src.tar.xz"
cat >"$root/.peer/build-llama.sh" <<'EOF'
#!/usr/bin/env bash
# Builds llama-bench (llama.cpp, CUDA for sm_90a, static) into /tmp/llama/bin from
# .peer/llama-src.tar.xz. Written by tools/compare/pack_llama_peer.sh.
set -euo pipefail
rm -rf /tmp/llama-src && mkdir -p /tmp/llama-src /tmp/llama/bin
tar -xJf .peer/llama-src.tar.xz -C /tmp/llama-src
cmake -S /tmp/llama-src/llama.cpp -B /tmp/llama-build -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc
cmake --build /tmp/llama-build --target llama-bench -j"$(nproc)"
cp /tmp/llama-build/bin/llama-bench /tmp/llama/bin/
EOF
chmod +x "$root/.peer/build-llama.sh"
ls -la "$root/.peer"
