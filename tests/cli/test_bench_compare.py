"""`tern bench compare`: Tern and the peers found installed, on the same file, in one table and a
Markdown report. Tern alone always runs; llama.cpp's llama-bench and llama-server run when a
build is found ($TERN_LLAMA_BIN, or the peer build under third_party_peers/ that
BENCHMARKS.md describes). A broken peer is reported, not fatal to the others.

Run by CTest (tests/cli/CMakeLists.txt): pytest with TERN_BIN and TERN_SYNTH set.
"""
import glob
import json
import os
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "bin", "tern"))
SYNTH = os.environ.get("TERN_SYNTH", os.path.join(ROOT, "build", "bin", "tern-synth"))


def llama_bin():
    path = os.environ.get("TERN_LLAMA_BIN")
    if path:
        return path
    found = glob.glob(os.path.join(ROOT, "third_party_peers", "*", "vendor", "llama.cpp", "build-cpu", "bin",
                                   "llama-server"))
    return os.path.dirname(found[0]) if found else None


needs_llama = pytest.mark.skipif(llama_bin() is None, reason="no llama.cpp build (TERN_LLAMA_BIN)")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("m") / "tiny.gguf")
    subprocess.run([SYNTH, "--preset", "tiny-qwen3", "--quant", "Q8_0", "-o", path], check=True,
                   capture_output=True)
    return path


def tern(tmp_path, *args, env_extra=None):
    env = dict(os.environ, TERN_HOME=str(tmp_path / "home"), PATH="/usr/bin:/bin")
    env.update(env_extra or {})
    return subprocess.run([TERN, "bench", "compare", *args], capture_output=True, text=True, env=env,
                          timeout=600, stdin=subprocess.DEVNULL)


def test_tern_alone_table_json_and_report(tmp_path, model):
    report = tmp_path / "out" / "report.md"
    report.parent.mkdir()
    r = tern(tmp_path, "-m", model, "-p", "32", "-n", "8", "-r", "2", "--threads", "2",
             "--report", str(report))
    assert r.returncode == 0, r.stderr
    row = next(l for l in r.stdout.splitlines() if l.strip().startswith("tern "))
    rates = [float(x) for x in re.findall(r"(\d+\.\d) \[", row)]
    assert len(rates) == 2 and all(x > 0 for x in rates), row
    # Peers that are not installed are named, not silently skipped.
    assert "llama-bench: not found on PATH" in r.stderr and "ollama: not found" in r.stderr
    md = report.read_text()
    assert md.startswith("# tern bench compare: tiny.gguf")
    assert "| tern | " in md and "prefill of 32 tokens, decode of 8 tokens" in md
    assert "bench -m " + model in md  # the command that ran
    assert os.listdir(report.parent) == ["report.md"]  # written to a temp file, renamed
    j = json.loads(tern(tmp_path, "-m", model, "-p", "16", "-n", "4", "-r", "1", "--json",
                        "--engines", "tern").stdout)
    assert [e["engine"] for e in j["engines"]] == ["tern"]
    assert j["engines"][0]["prefill_tok_s"]["median"] > 0 and j["engines"][0]["decode_tok_s"]["median"] > 0


@needs_llama
def test_llama_cpp_peers_on_the_same_file(tmp_path, model):
    r = tern(tmp_path, "-m", model, "-p", "32", "-n", "8", "-r", "2", "--threads", "2",
             "--llama-bin", llama_bin(), "--engines", "tern,llama-bench,llama-server", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    by = {e["engine"]: e for e in j["engines"]}
    assert set(by) == {"tern", "llama.cpp (llama-bench)", "llama.cpp (llama-server)"}
    for e in by.values():
        assert e["error"] == "", e
        assert e["prefill_tok_s"]["median"] > 0 and e["decode_tok_s"]["median"] > 0, e
        assert model in e["commands"]
    assert "-d 32" in by["llama.cpp (llama-bench)"]["commands"]  # decode after the prompt, as Tern
    assert by["llama.cpp (llama-bench)"]["version"].startswith("build ")


def test_a_broken_peer_is_reported_and_the_others_still_run(tmp_path, model):
    bad = tmp_path / "llama"
    bad.mkdir()
    script = bad / "llama-bench"
    script.write_text("#!/bin/sh\necho 'ggml: no backend' >&2\nexit 3\n")
    script.chmod(0o755)
    r = tern(tmp_path, "-m", model, "-p", "16", "-n", "4", "-r", "1", "--llama-bin", str(bad),
             "--engines", "tern,llama-bench")
    assert r.returncode == 1
    assert "llama-bench exited with 3: ggml: no backend" in r.stdout
    row = next(l for l in r.stdout.splitlines() if l.strip().startswith("tern "))
    assert re.search(r"\d+\.\d \[", row), row


def test_bad_input(tmp_path, model):
    r = tern(tmp_path, "-m", str(tmp_path / "missing.gguf"))
    assert r.returncode != 0 and "missing.gguf" in r.stderr
    r = tern(tmp_path, "-m", model, "--llama-bin", str(tmp_path / "nowhere"))
    assert r.returncode != 0 and "not a folder" in r.stderr
    r = tern(tmp_path, "-m", model, "--engines", "mystery")
    assert r.returncode != 0 and "mystery" in r.stderr
    r = tern(tmp_path, "-m", model, "-r", "0")
    assert r.returncode != 0
    r = tern(tmp_path, "-m", model, "--engines", "vllm")
    assert r.returncode != 0 and "no engine to run" in r.stderr and "vllm: not found" in r.stderr
