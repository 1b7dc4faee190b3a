#!/usr/bin/env python3
"""The `tern` command as a user meets it: --help everywhere, clear errors with a non-zero exit
for bad input, and the model commands end to end on a tiny random model and the real SmolLM2.

Run by CTest: test_cli.py --tern PATH --synth PATH --work DIR
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

ARGS = None
COMMANDS = ["show", "list", "import", "rm", "tokenize", "detokenize", "run", "chat", "serve", "bench", "doctor"]


def tern(*args, stdin=None, home=None, check=True):
    env = dict(os.environ, TERN_HOME=home or os.path.join(ARGS.work, "home"))
    r = subprocess.run([ARGS.tern, *args], input=stdin, capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"tern {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


class Help(unittest.TestCase):
    def test_top_level_lists_every_command(self):
        out = tern("--help").stdout
        for c in COMMANDS:
            self.assertIn(c, out)

    def test_every_command_has_help(self):
        for c in COMMANDS:
            r = tern(c, "--help")
            self.assertIn("Usage", r.stdout + r.stderr, c)
            self.assertIn("--help", r.stdout, c)

    def test_unknown_command_and_absurd_flags_fail(self):
        self.assertNotEqual(tern("frobnicate", check=False).returncode, 0)
        self.assertNotEqual(tern("bench", "-p", "-5", check=False).returncode, 0)
        self.assertNotEqual(tern("run", "--temp", "1e9", "hi", check=False).returncode, 0)
        self.assertNotEqual(tern("serve", "--port", "70000", check=False).returncode, 0)


class Models(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.home = os.path.join(ARGS.work, "home")
        cls.tiny = os.path.join(ARGS.work, "tiny.gguf")
        subprocess.run([ARGS.synth, "--preset", "tiny-qwen3", "--quant", "Q8_0", "-o", cls.tiny], check=True,
                       capture_output=True)

    def test_import_list_show_rm(self):
        tern("import", self.tiny, "--name", "tiny")
        models = json.loads(tern("list", "--json").stdout)
        self.assertIn("tiny", [m["name"] for m in models])
        entry = next(m for m in models if m["name"] == "tiny")
        self.assertEqual(entry["architecture"], "qwen3")
        self.assertEqual(entry["quantization"], "Q8_0")
        shown = json.loads(tern("show", "tiny", "--json").stdout)
        self.assertEqual(shown["metadata"]["general.architecture"]["value"], "qwen3")
        self.assertTrue(any(t["name"] == "token_embd.weight" for t in shown["tensors"]))
        tern("rm", "tiny")
        r = tern("show", "tiny", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown model 'tiny'", r.stderr)

    def test_corrupt_files_get_clear_errors(self):
        with open(self.tiny, "rb") as f:
            data = f.read()
        for name, blob, needle in [("trunc.gguf", data[:1000], "offset"),
                                   ("magic.gguf", b"XXXX" + data[4:], "not a GGUF file"),
                                   ("empty.gguf", b"", "truncated")]:
            path = os.path.join(ARGS.work, name)
            with open(path, "wb") as f:
                f.write(blob)
            for cmd in (["show", path], ["import", path, "--name", "bad"], ["run", "-m", path, "hi"]):
                r = tern(*cmd, check=False)
                self.assertEqual(r.returncode, 1, (cmd, r.stderr))
                self.assertIn(needle, r.stderr, cmd)
                self.assertNotIn("Segmentation", r.stderr)
        self.assertNotIn("bad", [m["name"] for m in json.loads(tern("list", "--json").stdout)])

    def test_run_raw_and_chat_on_tiny_model(self):
        r = tern("run", "-m", self.tiny, "--raw", "--temp", "0", "-n", "8", "hello")
        self.assertTrue(r.stdout.endswith("\n"))
        r2 = tern("run", "-m", self.tiny, "--raw", "--temp", "0", "-n", "8", "hello")
        self.assertEqual(r.stdout, r2.stdout, "greedy output must be reproducible")
        # Chat through the template, two turns from stdin.
        c = tern("chat", "-m", self.tiny, "--temp", "0", "-n", "4", stdin="hi\nand again\n")
        self.assertEqual(c.returncode, 0)

    def test_context_limit_is_a_clear_error(self):
        r = tern("run", "-m", self.tiny, "--raw", "--ctx", "16", "-n", "4", "x" * 200, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("context", r.stderr)
        r = tern("run", "-m", self.tiny, "--ctx", "999999", "hi", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("context length", r.stderr)

    def test_tokenize_round_trip(self):
        ids = tern("tokenize", "-m", self.tiny, "héllo wörld").stdout.split()
        self.assertEqual(tern("detokenize", "-m", self.tiny, *ids).stdout, "héllo wörld\n")
        self.assertEqual(tern("detokenize", "-m", self.tiny, "99999999", check=False).returncode, 1)

    def test_bench_json(self):
        out = json.loads(tern("bench", "-m", self.tiny, "-p", "16", "-n", "4", "-r", "1", "--json").stdout)
        r = out["results"][0]
        self.assertGreater(r["prefill_tok_s"]["median"], 0)
        self.assertGreater(r["decode_tok_s"]["median"], 0)

    def test_bench_parallel_batches_sequences(self):
        # --parallel 1 and 4 side by side: one row each, the second an aggregate over 4
        # sequences batched by the scheduler; an absurd count is refused.
        out = json.loads(tern("bench", "-m", self.tiny, "-p", "16", "-n", "5", "-r", "1",
                              "--parallel", "1", "--parallel", "4", "--json").stdout)
        rows = out["results"]
        self.assertEqual([r["sequences"] for r in rows], [1, 4])
        for r in rows:
            self.assertGreater(r["prefill_tok_s"]["median"], 0)
            self.assertGreater(r["decode_tok_s"]["median"], 0)
        bad = subprocess.run([ARGS.tern, "bench", "-m", self.tiny, "--parallel", "0"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("parallel", bad.stderr)

    def test_bench_depth_prefills_after_a_context(self):
        # --depth fills the cache first (untimed): one row per depth, the prompt's prefill on top
        # of it (the run refuses to report if the context was not reused); not with --parallel.
        out = json.loads(tern("bench", "-m", self.tiny, "-d", "0", "-d", "40", "-p", "16", "-n", "3",
                              "-r", "1", "--json").stdout)
        rows = out["results"]
        self.assertEqual([r["depth"] for r in rows], [0, 40])
        for r in rows:
            self.assertGreater(r["prefill_tok_s"]["median"], 0)
            self.assertGreater(r["decode_tok_s"]["median"], 0)
        bad = subprocess.run([ARGS.tern, "bench", "-m", self.tiny, "-d", "8", "--parallel", "2"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--depth", bad.stderr)

    def test_doctor(self):
        out = json.loads(tern("doctor", "--json").stdout)
        self.assertGreater(out["cpu"]["threads"], 0)
        self.assertGreater(out["memory"]["total"], 0)
        names = [m["model"] for m in out["catalog"]]
        self.assertIn("qwen3-8b", names)

    def test_doctor_lists_the_drivers_gpus(self):
        # No GPU here: an nvidia-smi that answers as the driver's does on a one-H200 machine.
        # The GPU is listed and becomes the memory budget; this CPU build says it cannot measure
        # the GPU's copy bandwidth because it has no CUDA backend.
        fake = os.path.join(ARGS.work, "fake-driver")
        os.makedirs(fake, exist_ok=True)
        with open(os.path.join(fake, "nvidia-smi"), "w") as f:
            f.write("#!/bin/sh\necho 'NVIDIA H200, 143771, 580.159.04'\n")
        os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
        env = dict(os.environ, PATH=fake + ":" + os.environ["PATH"])
        r = subprocess.run([ARGS.tern, "doctor", "--json"], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["gpus"], [{"name": "NVIDIA H200", "memory": 143771 << 20, "driver": "580.159.04"}])
        self.assertEqual(out["budget"]["from"], "GPU memory")
        self.assertEqual(out["budget"]["bytes"], 143771 << 20)
        if "error" in out["cuda"]:
            self.assertIn("no CUDA backend", out["cuda"]["error"])
        text = subprocess.run([ARGS.tern, "doctor"], capture_output=True, text=True, env=env, timeout=60).stdout
        self.assertIn("gpu       NVIDIA H200, 140.40 GiB, driver 580.159.04", text)


    def test_doctor_lists_the_links_between_gpus(self):
        # Four H100 NVL cards as the driver reports them: two NVLink-bridged pairs (NV12), PCIe
        # across the sockets between the pairs, a NIC column and the affinity columns after the
        # GPUs, the legend below (tabs, cells padded with spaces, as nvidia-smi prints).
        fake = os.path.join(ARGS.work, "fake-driver-4")
        os.makedirs(fake, exist_ok=True)
        matrix = ("\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
                  "GPU0\t X \tNV12\tSYS\tSYS\tNODE\t0-47\t0\t\tN/A\n"
                  "GPU1\tNV12\t X \tSYS\tSYS\tNODE\t0-47\t0\t\tN/A\n"
                  "GPU2\tSYS\tSYS\t X \tNV12\tSYS\t48-95\t1\t\tN/A\n"
                  "GPU3\tSYS\tSYS\tNV12\t X \tSYS\t48-95\t1\t\tN/A\n"
                  "NIC0\tNODE\tNODE\tSYS\tSYS\t X \t\t\t\n\n"
                  "Legend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP "
                  "interconnect between NUMA nodes (e.g., QPI/UPI)\n  NV#  = Connection traversing a "
                  "bonded set of # NVLinks\n")
        with open(os.path.join(fake, "topo.txt"), "w") as f:
            f.write(matrix)
        with open(os.path.join(fake, "nvidia-smi"), "w") as f:
            f.write("#!/bin/sh\nif [ \"$1\" = topo ]; then cat \"$(dirname \"$0\")/topo.txt\"; exit 0; fi\n"
                    "for i in 0 1 2 3; do echo 'NVIDIA H100 NVL, 95830, 580.159.04'; done\n")
        os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
        env = dict(os.environ, PATH=fake + ":" + os.environ["PATH"])
        r = subprocess.run([ARGS.tern, "doctor", "--json"], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(len(out["gpus"]), 4)
        links = {tuple(x["gpus"]): (x["path"], x["nvlinks"]) for x in out["gpu_links"]}
        self.assertEqual(links, {(0, 1): ("NV12", 12), (0, 2): ("SYS", 0), (0, 3): ("SYS", 0),
                                 (1, 2): ("SYS", 0), (1, 3): ("SYS", 0), (2, 3): ("NV12", 12)})
        text = subprocess.run([ARGS.tern, "doctor"], capture_output=True, text=True, env=env, timeout=60).stdout
        self.assertIn("link      GPU0 - GPU1: NVLink x12", text)
        self.assertIn("link      GPU1 - GPU3: PCIe across CPU sockets (SYS)", text)
        # One GPU: no links section.
        out1 = json.loads(tern("doctor", "--json").stdout)
        self.assertEqual(out1["gpu_links"], [])


@unittest.skipUnless(os.environ.get("TERN_SMOLLM2_GGUF"), "needs the real SmolLM2 (scripts/test.sh sets it)")
class RealModel(unittest.TestCase):
    def test_instruct_reply(self):
        r = tern("run", "-m", os.environ["TERN_SMOLLM2_GGUF"], "--temp", "0", "-n", "24",
                 "What is the capital of France? Answer with one word.")
        self.assertIn("Paris", r.stdout)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tern", required=True)
    ap.add_argument("--synth", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
