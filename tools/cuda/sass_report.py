#!/usr/bin/env python3
"""What a CUDA source compiles to, without a GPU: registers and spills (ptxas -v), SASS instruction
counts, and each loop's size (a backward branch's span) per kernel, for the machine code the
sm_90a build runs. Counting the instructions a loop issues per tile or per superblock is how a
kernel change is judged here before device time is spent on it (2026-12-05: the prefill attention's
main loop 2,485 -> 1,124 instructions).

  .venv/bin/python tools/cuda/sass_report.py src/backend/cuda/attention_prefill.cu [--kernel RE]

Uses the build-cuda tree's own compile line (ninja -t commands), and cuobjdump from PyPI's
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (installed into the running Python's environment on first use; the
CUDA toolkit here ships without it).
"""
import argparse
import collections
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WATCH = ("HMMA", "HGMMA", "IMMA", "IDP", "LDG", "LDGSTS", "LDSM", "LDS", "STS", "SHFL", "BAR", "MUFU",
         "BRA", "I2F", "F2F", "WARPGROUP.DEPBAR")


def cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    for base in sys.path:
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin"):
            path = os.path.join(base, sub, "cuobjdump")
            if os.path.exists(path):
                return path
    print("installing nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm from PyPI ...",
          file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "nvidia-cuda-cuobjdump",
                    "nvidia-cuda-nvdisasm"], check=True)
    return cuobjdump()


def compile_line(source, build):
    rel = os.path.relpath(os.path.abspath(source), ROOT)
    out = subprocess.run(["ninja", "-C", build, "-t", "commands"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        if line.startswith("/") and "nvcc" in line and rel in line and " -c " in line:
            return shlex.split(line)
    sys.exit(f"no nvcc compile line for {rel} in {build} (configure it with -DTERN_CUDA=ON)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("--kernel", default="", help="regex on the mangled kernel names")
    ap.add_argument("--build", default=os.path.join(ROOT, "build-cuda"))
    ap.add_argument("--dump", metavar="OPCODES", default="",
                    help="also print the matching kernels' instructions whose opcode matches this "
                         "regex (e.g. HMMA to see how the tensor-core chains interleave)")
    args = ap.parse_args()
    cmd = compile_line(args.source, args.build)
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "k.o")
        keep, skip = [], 0
        for word in cmd:
            if skip:
                skip -= 1
                continue
            if word in ("-o", "-MF", "-MT"):
                skip = 1
                continue
            if word == "-MD" or "code=compute_" in word:
                continue
            keep.append(word)
        ptxas = subprocess.run(keep + ["-o", obj, "-Xptxas", "-v"], cwd=args.build,
                               capture_output=True, text=True)
        if ptxas.returncode != 0:
            sys.exit(ptxas.stderr)
        tool = cuobjdump()
        env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ["PATH"])
        if not os.path.exists(os.path.join(os.path.dirname(tool), "nvdisasm")):
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "nvidia-cuda-nvdisasm"],
                           check=True)
        dump = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, env=env)
        if dump.returncode != 0:
            sys.exit(f"cuobjdump failed: {dump.stderr}")
        sass = dump.stdout
    regs = {}
    # ptxas's performance notes name their kernel: wgmma serialized (C7514), warpgroup.arrive
    # injected (C7519), setmaxnreg ignored (C7508) and the like (a wgmma kernel whose products
    # were serialized runs them one at a time: HOPPER.md).
    notes = collections.defaultdict(list)
    for line in ptxas.stderr.splitlines():
        m = re.search(r"\((C\d+)\) (.*?) in (?:the )?function '(\S+)'", line)
        if m:
            notes[m.group(3)].append(f"{m.group(1)} {m.group(2).strip()}")
    name = None
    for line in ptxas.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)
        if m and name:
            regs.setdefault(name, {})["stack"] = int(m.group(1))
            regs.setdefault(name, {})["spill"] = int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            regs.setdefault(name, {})["regs"] = int(m.group(1))
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        kernel = part.split("\n", 1)[0].strip()
        if not re.search(args.kernel, kernel):
            continue
        code = []
        for line in part.splitlines():
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m:
                code.append((int(m.group(1), 16), m.group(2).strip()))
        ops = collections.Counter()
        for _, text in code:
            op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]
            for w in sorted(WATCH, key=len, reverse=True):  # LDGSTS before LDG
                if op.startswith(w):
                    ops[w] += 1
                    break
        loops = []
        for address, text in code:
            m = re.search(r"\bBRA\b.*0x([0-9a-f]+)\s*$", text)
            if m and int(m.group(1), 16) < address:
                loops.append((int(m.group(1), 16), address))
        info = regs.get(kernel, {})
        demangled = subprocess.run(["c++filt", kernel], capture_output=True, text=True).stdout
        print(f"{demangled.strip()}\n  {info.get('regs', '?')} registers, {info.get('spill', 0)} "
              f"bytes spilled, {info.get('stack', 0)} bytes of stack, {len(code)} instructions: "
              + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
        for start, end in loops:
            print(f"  loop {start:#x}-{end:#x}: {(end - start) // 16 + 1} instructions")
        for note in sorted(set(notes.get(kernel, []))):
            print(f"  ptxas: {note}")
        if args.dump:
            for address, text in code:
                op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]
                if re.search(args.dump, op):
                    print(f"    {address:#06x}  {text}")


if __name__ == "__main__":
    main()
