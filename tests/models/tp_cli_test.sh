#!/usr/bin/env bash
# `tern run|bench --tp N` end to end under mpirun: the launch errors (no mpirun; a process count
# that is not --tp, reported once), greedy text with --tp 2 equal to --tp 1 on a synthetic F32
# model (and --tp 3 on SmolLM2 dequantized to F32 when the tp_smollm2_f32 fixture made it), and
# a --tp 2 benchmark's JSON.
# usage: tp_cli_test.sh TERN TERN_SYNTH MPIEXEC WORK_DIR [SMOLLM2_F32_GGUF]
set -euo pipefail
tern=$1 synth=$2 mpiexec=$3 work=$4 smol_f32=${5:-}
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=("$mpiexec" --oversubscribe --bind-to none)
fail() { echo "FAIL: $*" >&2; exit 1; }

model="$work/tiny-qwen3.gguf"
"$synth" --preset tiny-qwen3 --quant F32 -o "$model" >/dev/null

# --tp 2 outside mpirun: an error that says how to launch it.
if "$tern" run -m "$model" --tp 2 --raw "hi" >"$work/out" 2>"$work/err"; then
  fail "--tp 2 without mpirun succeeded"
fi
grep -q 'mpirun -np 2 tern' "$work/err" || fail "no launch hint: $(cat "$work/err")"

# Two processes for --tp 3: the error once (rank 0 reports it), not once per rank.
if "${mpi[@]}" -np 2 "$tern" run -m "$model" --tp 3 --raw "hi" >"$work/out" 2>"$work/err"; then
  fail "mpirun -np 2 with --tp 3 succeeded"
fi
[ "$(grep -c 'needs 3 processes, but mpirun started 2' "$work/err")" = 1 ] ||
  fail "expected the process-count error once: $(cat "$work/err")"

# Greedy text: --tp 2 (and 4: 2 KV heads, replicated) equal to one process.
"$tern" run -m "$model" --raw --temp 0 -n 24 "The quick brown fox" >"$work/tp1" 2>/dev/null
for np in 2 4; do
  "${mpi[@]}" -np $np "$tern" run -m "$model" --tp $np --raw --temp 0 -n 24 "The quick brown fox" \
    >"$work/tp$np" 2>"$work/err" || fail "--tp $np run: $(cat "$work/err")"
  cmp -s "$work/tp1" "$work/tp$np" || fail "--tp $np text differs: '$(cat "$work/tp$np")' vs '$(cat "$work/tp1")'"
done
[ -s "$work/tp1" ] || fail "no text generated"

if [ -n "$smol_f32" ] && [ -f "$smol_f32" ]; then
  q="What is the capital of France?"
  "$tern" run -m "$smol_f32" --temp 0 -n 24 "$q" >"$work/s1" 2>/dev/null
  "${mpi[@]}" -np 3 "$tern" run -m "$smol_f32" --tp 3 --temp 0 -n 24 "$q" >"$work/s3" 2>"$work/err" ||
    fail "SmolLM2 --tp 3: $(cat "$work/err")"
  cmp -s "$work/s1" "$work/s3" || fail "SmolLM2 F32 --tp 3 text differs: '$(cat "$work/s3")' vs '$(cat "$work/s1")'"
  echo "SmolLM2 F32 --tp 3: $(cat "$work/s3")"

  # One rank cannot load its share (SmolLM2's 9 heads over 2 ranks) while rank 0 can: every rank
  # stops, rank 0 names the rank that failed, that rank says why; no rank waits forever.
  if timeout 120 "${mpi[@]}" -np 1 "$tern" run -m "$model" --tp 2 --raw "hi" : \
      -np 1 "$tern" run -m "$smol_f32" --tp 2 --raw "hi" >"$work/out" 2>"$work/err"; then
    fail "a rank that cannot load its share did not fail the run"
  fi
  grep -q 'rank 1 could not load its share of the model' "$work/err" || fail "$(cat "$work/err")"
  grep -q 'rank 1: tensor parallelism over 2 ranks needs the attention heads (9)' "$work/err" ||
    fail "$(cat "$work/err")"

  # tern serve --tp 3: a chat request twice; the second reuses the first's KV (the prefix cache
  # is rank 0's block bookkeeping, mirrored by the others) and gives the same text. SIGTERM to
  # mpirun stops every rank.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${mpi[@]}" -np 3 "$tern" serve -m "$smol_f32" --tp 3 --port "$port" >"$work/serve.log" 2>&1 &
  serve_pid=$!
  python3 - "$port" <<'PY' || { kill -TERM $serve_pid; cat "$work/serve.log" >&2; fail "serve --tp 3"; }
import json, sys, time, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(240):
    try:
        urllib.request.urlopen(base + "/health", timeout=2)
        break
    except OSError:
        time.sleep(0.5)
body = json.dumps({"messages": [{"role": "user", "content": "Tell me about the moon."}],
                   "max_tokens": 16, "temperature": 0}).encode()
replies = []
for _ in range(2):
    req = urllib.request.Request(base + "/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    replies.append(json.load(urllib.request.urlopen(req, timeout=120)))
texts = [r["choices"][0]["message"]["content"] for r in replies]
cached = replies[1]["usage"]["prompt_tokens_details"]["cached_tokens"]
assert texts[0] == texts[1] and texts[0], texts
assert cached > 0, replies[1]["usage"]
print(f"serve --tp 3: '{texts[0]}', second request reused {cached} cached tokens")
PY
  kill -TERM $serve_pid
  for _ in $(seq 60); do kill -0 $serve_pid 2>/dev/null || break; sleep 0.5; done
  if kill -0 $serve_pid 2>/dev/null; then kill -KILL $serve_pid; fail "serve --tp 3 did not stop on SIGTERM"; fi
fi

# A --tp 2 benchmark: rank 0 alone prints one JSON document with positive speeds.
"${mpi[@]}" -np 2 "$tern" bench -m "$model" --tp 2 -p 32 -n 8 -r 1 --json >"$work/bench.json" \
  2>"$work/err" || fail "--tp 2 bench: $(cat "$work/err")"
python3 - "$work/bench.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["tp"] == 2, doc.get("tp")
r = doc["results"][0]
assert r["prefill_tok_s"]["median"] > 0 and r["decode_tok_s"]["median"] > 0, r
print(f"--tp 2 bench: prefill {r['prefill_tok_s']['median']:.1f} tok/s, decode {r['decode_tok_s']['median']:.1f} tok/s")
PY
echo "PASS"
