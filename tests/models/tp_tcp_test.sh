#!/usr/bin/env bash
# `tern run|serve --tp 2` without mpirun: two processes meet at a rendezvous on loopback (TCP).
# The flag errors; greedy text with --tp 2 (and 4) over TCP equal to --tp 1 on a synthetic F32
# model; and `tern serve --tp 2` whose rank 1 is killed: the next request fails with a 5xx JSON
# error naming rank 1, the server stays up, later requests get 503 with the same reason and
# /health reports it; SIGTERM still stops rank 0.
# usage: tp_tcp_test.sh TERN TERN_SYNTH WORK_DIR
set -euo pipefail
tern=$1 synth=$2 work=$3
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

model="$work/tiny-qwen3.gguf"
"$synth" --preset tiny-qwen3 --quant F32 -o "$model" >/dev/null

# Flag errors, each a clear message and exit status 1.
expect_error() {  # expect_error TEXT ARGS...
  local want=$1; shift
  if "$tern" run -m "$model" --raw "$@" "hi" >"$work/out" 2>"$work/err"; then
    fail "tern run $* succeeded"
  fi
  grep -qF -- "$want" "$work/err" || fail "tern run $*: expected '$want', got: $(cat "$work/err")"
}
expect_error "--rank 1 needs --rendezvous HOST:PORT" --tp 2 --rank 1
expect_error "--rank 2 with --tp 2: the ranks are 0..1" --tp 2 --rendezvous 127.0.0.1:1 --rank 2
expect_error "the port 'x' is not a number" --tp 2 --rendezvous 127.0.0.1:x --rank 0
expect_error "it needs --tp N" --rendezvous 127.0.0.1:1 --rank 0
expect_error "--rendezvous needs --rank R" --tp 2 --rendezvous 127.0.0.1:1
port=$(free_port)
TERN_RENDEZVOUS=127.0.0.1:$port TERN_RANK=1 expect_error \
  "rank 1: could not reach rank 0 at 127.0.0.1:$port within 1 s: Connection refused" \
  --tp 2 --rendezvous-timeout 1
expect_error "--rendezvous HOST:PORT --rank R" --tp 2  # the launch hint names both ways

# Greedy text over TCP equal to one process's (ranks started in any order; rank 0 in front).
"$tern" run -m "$model" --raw --temp 0 -n 24 "The quick brown fox" >"$work/tp1" 2>/dev/null
[ -s "$work/tp1" ] || fail "no text generated"
for np in 2 4; do
  port=$(free_port)
  followers=()
  for r in $(seq 1 $((np - 1))); do
    "$tern" run -m "$model" --tp $np --rendezvous 127.0.0.1:$port --rank $r --raw --temp 0 -n 24 \
      "The quick brown fox" >"$work/f$r.out" 2>"$work/f$r.err" &
    followers+=($!)
  done
  "$tern" run -m "$model" --tp $np --rendezvous 127.0.0.1:$port --rank 0 --raw --temp 0 -n 24 \
    "The quick brown fox" >"$work/tcp$np" 2>"$work/err" || fail "--tp $np over TCP: $(cat "$work/err")"
  for p in "${followers[@]}"; do wait "$p" || fail "a follower of --tp $np exited with $?"; done
  cmp -s "$work/tp1" "$work/tcp$np" ||
    fail "--tp $np over TCP differs: '$(cat "$work/tcp$np")' vs '$(cat "$work/tp1")'"
  [ ! -s "$work/f1.out" ] || fail "a follower printed text: $(cat "$work/f1.out")"
done
echo "--tp 2 and 4 over TCP: $(cat "$work/tcp2")"

# tern serve --tp 2 over TCP; rank 1 is killed.
rdv=127.0.0.1:$(free_port)
http=$(free_port)
TERN_RENDEZVOUS=$rdv TERN_RANK=1 "$tern" serve -m "$model" --tp 2 >"$work/serve1.log" 2>&1 &
rank1=$!
pids+=($rank1)
"$tern" serve -m "$model" --tp 2 --rendezvous "$rdv" --rank 0 --port "$http" >"$work/serve0.log" 2>&1 &
rank0=$!
pids+=($rank0)
python3 - "$http" "$rank1" <<'PY' || { cat "$work/serve0.log" "$work/serve1.log" >&2; fail "serve --tp 2 over TCP"; }
import json, os, signal, sys, time, urllib.error, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
rank1 = int(sys.argv[2])
for _ in range(240):
    try:
        urllib.request.urlopen(base + "/health", timeout=2)
        break
    except OSError:
        time.sleep(0.25)
else:
    sys.exit("the server did not come up")

def chat():
    body = json.dumps({"messages": [{"role": "user", "content": "Tell me about the moon."}],
                       "max_tokens": 16, "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)

status, reply = chat()
assert status == 200 and reply["choices"][0]["message"]["content"], (status, reply)
os.kill(rank1, signal.SIGKILL)
time.sleep(0.3)
start = time.time()
status, reply = chat()
took = time.time() - start
assert 500 <= status < 600, (status, reply)
message = reply["error"]["message"]
assert "rank 1 is gone" in message, message
assert took < 10, took
print(f"after rank 1 was killed: HTTP {status} in {took:.2f} s: {message}")
status, again = chat()
assert status == 503, (status, again)
assert again["error"]["message"] == message, (again, message)
try:
    urllib.request.urlopen(base + "/health", timeout=5)
    sys.exit("/health answered 200 without rank 1")
except urllib.error.HTTPError as e:
    health = json.load(e)
    assert e.code == 503 and health["status"] == "error" and "rank 1 is gone" in health["error"], health
print(f"then HTTP 503 with the same reason; /health 503: {health['error']}")
PY
wait $rank1 2>/dev/null || true
kill -0 $rank0 2>/dev/null || fail "rank 0 exited after rank 1 died: $(cat "$work/serve0.log")"
kill -TERM $rank0
for _ in $(seq 60); do kill -0 $rank0 2>/dev/null || break; sleep 0.25; done
if kill -0 $rank0 2>/dev/null; then fail "rank 0 did not stop on SIGTERM"; fi
echo "PASS"
