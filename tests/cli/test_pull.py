"""`tern pull` end to end against a Hugging Face-compatible hub on loopback (tests/hub_server.py):
catalog names (the file of a quantization, the recommended quantization, the revision resolved
to a commit and recorded), HF_REPO[:FILE], an interrupted download resumed by running the
command again, a corrupted file refused, bad names and an unreachable hub; and
tools/catalog/pin_catalog.py pinning a catalog's revisions against the same hub.

Run by CTest (tests/cli/CMakeLists.txt): pytest with TERN_BIN and TERN_SYNTH set.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from hub_server import FakeHub  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "bin", "tern"))
SYNTH = os.environ.get("TERN_SYNTH", os.path.join(ROOT, "build", "bin", "tern-synth"))
COMMIT = "0123456789abcdef0123456789abcdef01234567"
BUILTIN_CATALOG = os.path.join(ROOT, "data", "catalog.json")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two small real GGUF files (tern-synth): a Q8_0 and a Q4_0 model."""
    d = tmp_path_factory.mktemp("models")
    out = {}
    for quant in ("Q8_0", "Q4_0"):
        path = str(d / f"tiny-{quant}.gguf")
        subprocess.run([SYNTH, "--preset", "tiny-qwen3", "--quant", quant, "-o", path], check=True,
                       capture_output=True)
        out[quant] = path
    return out


@pytest.fixture
def hub():
    h = FakeHub()
    yield h
    h.close()


def write_catalog(path, models):
    """A catalog: 'tiny', whose Q4_0 (at the catalog's 0.0001 bits per weight) fits any machine
    and whose F16 none; 'small', which fits everywhere at a pinned revision; 'huge', which fits
    nowhere."""
    catalog = {
        "quantizations": {"F16": 16.0, "Q8_0": 8.5, "Q4_0": 0.0001},
        "models": [{"name": "tiny", "family": "qwen3", "parameters": 10 ** 13, "layers": 2,
                    "kv_heads": 1, "head_dim": 8, "context": 256, "repo": "org/tiny-GGUF",
                    "revision": "main",
                    "files": {"F16": "tiny-F16.gguf", "Q4_0": "tiny-Q4_0.gguf"}},
                   {"name": "small", "family": "qwen3", "parameters": 1000, "layers": 2,
                    "kv_heads": 1, "head_dim": 8, "context": 256, "repo": "org/small-GGUF",
                    "revision": COMMIT, "files": {"Q8_0": "small-Q8_0.gguf", "Q4_0": "small-Q4_0.gguf"}},
                   {"name": "huge", "family": "qwen3", "parameters": 10 ** 16, "layers": 2,
                    "kv_heads": 1, "head_dim": 8, "context": 256, "repo": "org/huge-GGUF",
                    "revision": "main", "files": {"F16": "huge-F16.gguf", "Q8_0": "huge-Q8_0.gguf"}}],
    }
    with open(path, "w") as f:
        json.dump(catalog, f)
    return str(path)


def tern(home, hub, *args, catalog=None, timeout=120):
    env = dict(os.environ, TERN_HOME=str(home), HF_ENDPOINT=hub.endpoint)
    env.pop("HF_TOKEN", None)
    env.pop("TERN_CATALOG", None)
    if catalog:
        env["TERN_CATALOG"] = catalog
    return subprocess.run([TERN, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def installed(home, hub):
    r = tern(home, hub, "list", "--json")
    assert r.returncode == 0, r.stderr
    return {m["name"]: m for m in json.loads(r.stdout)}


def manifest(home, name):
    with open(os.path.join(home, "models", name, "model.json")) as f:
        return json.load(f)


def test_catalog_name_pulls_the_recommended_quantization_at_the_resolved_commit(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    hub.add_repo("org/tiny-GGUF", COMMIT, {"tiny-Q4_0.gguf": models["Q4_0"]})
    r = tern(tmp_path / "home", hub, "pull", "tiny", catalog=catalog)
    assert r.returncode == 0, r.stderr
    assert "pulled tiny (qwen3 Q4_0" in r.stdout
    assert "not pin" in r.stderr  # the catalog said "main"
    assert "warning" not in r.stderr
    m = installed(tmp_path / "home", hub)["tiny"]
    assert m["quantization"] == "Q4_0"
    assert manifest(tmp_path / "home", "tiny")["source"] == f"hf://org/tiny-GGUF@{COMMIT}/tiny-Q4_0.gguf"
    # The download asked for the commit, not the branch.
    resolves = [p for _, p, _ in hub.requests if "/resolve/" in p]
    assert resolves == [f"/org/tiny-GGUF/resolve/{COMMIT}/tiny-Q4_0.gguf"]
    # The downloads folder holds nothing once the store has the file.
    assert os.listdir(tmp_path / "home" / "downloads") == []
    # Pulling again changes nothing.
    again = tern(tmp_path / "home", hub, "pull", "tiny", catalog=catalog)
    assert again.returncode == 0 and "already installed" in again.stdout


def test_recommendation_is_the_most_precise_that_fits(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    hub.add_repo("org/small-GGUF", COMMIT, {"small-Q8_0.gguf": models["Q8_0"],
                                            "small-Q4_0.gguf": models["Q4_0"]}, branch=COMMIT)
    r = tern(tmp_path / "home", hub, "pull", "small", catalog=catalog)
    assert r.returncode == 0, r.stderr
    assert "not pin" not in r.stderr  # a 40-digit revision is a pinned one
    assert installed(tmp_path / "home", hub)["small"]["quantization"] == "Q8_0"
    # doctor names the same choice, for any memory size.
    for memory in ("2G", "64G"):
        d = json.loads(tern(tmp_path / "home", hub, "doctor", "--json", "--memory", memory,
                            catalog=catalog).stdout)
        entry = {e["model"]: e for e in d["catalog"]}
        assert entry["small"]["recommended"] == "Q8_0"
        assert entry["tiny"]["recommended"] == "Q4_0"
        assert entry["huge"]["recommended"] is None
        assert d["budget"]["from"] == "--memory"


def test_a_model_too_big_for_the_machine_pulls_the_smallest_with_a_warning(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    hub.add_repo("org/huge-GGUF", COMMIT, {"huge-F16.gguf": models["Q8_0"], "huge-Q8_0.gguf": models["Q8_0"]})
    r = tern(tmp_path / "home", hub, "pull", "huge", catalog=catalog)
    assert r.returncode == 0, r.stderr
    assert "warning: no quantization of huge fits" in r.stderr and "pulling the smallest, Q8_0" in r.stderr
    assert manifest(tmp_path / "home", "huge")["source"].endswith("/huge-Q8_0.gguf")


def test_doctor_recommends_from_the_builtin_catalog(tmp_path, hub):
    """For each catalog model, the most precise of its files whose weights + 8K of F16 KV + 1 GiB
    fit the memory, computed here from data/catalog.json."""
    with open(BUILTIN_CATALOG) as f:
        cat = json.load(f)
    bits = cat["quantizations"]
    for memory, budget in (("8G", 8 << 30), ("24G", 24 << 30), ("80G", 80 << 30)):
        r = tern(tmp_path / "home", hub, "doctor", "--json", "--memory", memory)
        assert r.returncode == 0, r.stderr
        got = {e["model"]: e["recommended"] for e in json.loads(r.stdout)["catalog"]}
        for m in cat["models"]:
            kv = m["layers"] * m["kv_heads"] * m["head_dim"] * 4 * min(8192, m["context"])
            ranked = sorted(m["files"], key=lambda q: -bits[q])
            fitting = [q for q in ranked if int(m["parameters"] * bits[q] / 8) + kv + (1 << 30) <= budget]
            assert got[m["name"]] == (fitting[0] if fitting else None), (memory, m["name"])
    assert got["qwen3-8b"] == "Q8_0"  # 80G
    r = tern(tmp_path / "home", hub, "doctor", "--memory", "lots")
    assert r.returncode != 0 and "--memory lots" in r.stderr


def test_builtin_catalog_names_the_repo_and_file(tmp_path, hub, models):
    hub.add_repo("Qwen/Qwen3-8B-GGUF", COMMIT, {"Qwen3-8B-Q4_K_M.gguf": models["Q8_0"]})
    r = tern(tmp_path / "home", hub, "pull", "qwen3-8b:Q4_K_M")
    assert r.returncode == 0, r.stderr
    assert manifest(tmp_path / "home", "qwen3-8b")["source"] == \
        f"hf://Qwen/Qwen3-8B-GGUF@{COMMIT}/Qwen3-8B-Q4_K_M.gguf"


def test_a_renamed_file_is_found_by_its_quantization_tag(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    hub.add_repo("org/tiny-GGUF", COMMIT, {"Tiny-Model.Q4_0.gguf": models["Q4_0"]})
    r = tern(tmp_path / "home", hub, "pull", "tiny", "--quant", "q4_0", catalog=catalog)
    assert r.returncode == 0, r.stderr
    assert "its Q4_0 file is Tiny-Model.Q4_0.gguf" in r.stderr


def test_hf_repo_forms(tmp_path, hub, models):
    hub.add_repo("someone/one-GGUF", COMMIT, {"one.Q8_0.gguf": models["Q8_0"]})
    hub.add_repo("someone/two-GGUF", COMMIT, {"two-Q8_0.gguf": models["Q8_0"], "two-Q4_0.gguf": models["Q4_0"]})
    home = tmp_path / "home"
    # A repository with one GGUF file: that one, named after it.
    r = tern(home, hub, "pull", "someone/one-GGUF")
    assert r.returncode == 0, r.stderr
    assert "one.q8_0" in installed(home, hub)
    # Two files: the choice is the user's, and the error lists them.
    r = tern(home, hub, "pull", "someone/two-GGUF")
    assert r.returncode != 0
    assert "someone/two-GGUF:two-Q8_0.gguf" in r.stderr and "someone/two-GGUF:two-Q4_0.gguf" in r.stderr
    r = tern(home, hub, "pull", "someone/two-GGUF", "--quant", "Q4_0", "--name", "two")
    assert r.returncode == 0, r.stderr
    assert installed(home, hub)["two"]["quantization"] == "Q4_0"
    r = tern(home, hub, "pull", "someone/two-GGUF:two-Q8_0.gguf")
    assert r.returncode == 0, r.stderr
    assert installed(home, hub)["two-q8_0"]["quantization"] == "Q8_0"


def test_an_interrupted_download_resumes_when_run_again(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    hub.add_repo("org/small-GGUF", COMMIT, {"small-Q8_0.gguf": models["Q8_0"]}, branch=COMMIT)
    size = os.path.getsize(models["Q8_0"])
    hub.cut_after = size // 2
    home = tmp_path / "home"
    r = tern(home, hub, "pull", "small:Q8_0", catalog=catalog)
    assert r.returncode != 0
    assert "small" not in installed(home, hub)
    parts = os.listdir(home / "downloads")
    assert len(parts) == 1 and parts[0].endswith(".part")
    assert os.path.getsize(home / "downloads" / parts[0]) == size // 2
    r = tern(home, hub, "pull", "small:Q8_0", catalog=catalog)
    assert r.returncode == 0, r.stderr
    ranges = [rng for _, p, rng in hub.requests if "/resolve/" in p]
    assert ranges == [None, f"bytes={size // 2}-"]
    with open(models["Q8_0"], "rb") as a, open(installed(home, hub)["small"]["files"][0], "rb") as b:
        assert a.read() == b.read()


def test_a_corrupted_file_is_refused(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    hub.add_repo("org/small-GGUF", COMMIT, {"small-Q8_0.gguf": models["Q8_0"]}, branch=COMMIT)
    hub.corrupt.add("small-Q8_0.gguf")
    home = tmp_path / "home"
    r = tern(home, hub, "pull", "small:Q8_0", catalog=catalog)
    assert r.returncode != 0
    assert "sha256" in r.stderr
    assert "small" not in installed(home, hub)
    assert os.listdir(home / "downloads") == []


def test_bad_input_is_a_clear_error(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    home = tmp_path / "home"
    r = tern(home, hub, "pull", "no-such-model", catalog=catalog)
    assert r.returncode != 0 and "unknown model 'no-such-model'" in r.stderr and "tiny" in r.stderr
    r = tern(home, hub, "pull", "tiny:Q2_K", catalog=catalog)
    assert r.returncode != 0 and "tiny has no Q2_K file" in r.stderr
    r = tern(home, hub, "pull", "org/missing-GGUF")
    assert r.returncode != 0 and "no repository org/missing-GGUF" in r.stderr
    for bad_repo in ("a/b/c:x.gguf", "../x", "org/..", "org/re po", "/x", "org/"):
        r = tern(home, hub, "pull", bad_repo)
        assert r.returncode != 0 and "HF_REPO[:FILE]" in r.stderr, bad_repo
    assert not any(p.startswith("/api/models/..") for _, p, _ in hub.requests)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = tern(home, hub, "pull", "tiny", catalog=str(bad))
    assert r.returncode != 0 and "TERN_CATALOG" in r.stderr
    # Gated: the hub answers 401 and the error says to set HF_TOKEN; with it the pull works.
    hub.add_repo("org/small-GGUF", COMMIT, {"small-Q8_0.gguf": models["Q8_0"]}, branch=COMMIT)
    hub.token = "secret"
    r = tern(home, hub, "pull", "small:Q8_0", catalog=catalog)
    assert r.returncode != 0 and "HF_TOKEN" in r.stderr
    env_token = dict(os.environ, TERN_HOME=str(home), HF_ENDPOINT=hub.endpoint, HF_TOKEN="secret",
                     TERN_CATALOG=catalog)
    r = subprocess.run([TERN, "pull", "small:Q8_0"], capture_output=True, text=True, env=env_token)
    assert r.returncode == 0, r.stderr
    # Nothing listens: a clear error, quickly.
    hub.close()
    r = tern(home, hub, "pull", "tiny", catalog=catalog, timeout=60)
    assert r.returncode != 0 and "127.0.0.1" in r.stderr


def test_pin_catalog_resolves_revisions_and_checks_files(tmp_path, hub, models):
    catalog = write_catalog(tmp_path / "catalog.json", models)
    hub.add_repo("org/tiny-GGUF", COMMIT, {"tiny-Q4_0.gguf": models["Q4_0"]})
    hub.add_repo("org/small-GGUF", COMMIT, {"small-Q8_0.gguf": models["Q8_0"],
                                            "small-Q4_0.gguf": models["Q4_0"]}, branch=COMMIT)
    out = tmp_path / "pinned.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "catalog", "pin_catalog.py"),
                        "--endpoint", hub.endpoint, "--catalog", catalog, "-o", str(out)],
                       capture_output=True, text=True)
    # tiny's F16 file is not in the repository: reported, and the exit status says so.
    assert r.returncode == 1, r.stdout + r.stderr
    assert "tiny: F16 file tiny-F16.gguf is not in org/tiny-GGUF" in r.stdout + r.stderr
    pinned = json.loads(out.read_text())
    revs = {m["name"]: m["revision"] for m in pinned["models"]}
    # tiny lists a file the repository lacks and huge has no repository: neither is pinned.
    assert revs == {"tiny": "main", "small": COMMIT, "huge": "main"}
    assert "huge: org/huge-GGUF" in r.stdout + r.stderr
    # Everything else is kept as it was.
    before = json.loads(open(catalog).read())
    assert pinned["quantizations"] == before["quantizations"]
    assert [m["files"] for m in pinned["models"]] == [m["files"] for m in before["models"]]
