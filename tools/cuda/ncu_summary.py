#!/usr/bin/env python3
"""Per-kernel time of one decode step from an Nsight Compute CSV (ncu --csv --page raw
--metrics gpu__time_duration.sum, caches flushed before each kernel: cold-L2 times).

Forward passes are cut at each get_rows kernel (the embedding lookup that starts one); the
complete passes whose kernel count is the most common are averaged. Prints one line per
(kernel, grid) with its microseconds per pass, then the total.
  ncu_summary.py ncu.csv
"""
import collections
import csv
import re
import sys


def short(name):
    name = re.sub(r"\(anonymous namespace\)::|<?unnamed>::|tern::cuda::|tern::|^void ", "", name)
    name = re.sub(r"\(.*?\)\s*$", "", name) if "<" not in name else name
    return name[:90]


def main(path):
    rows = list(csv.reader(open(path, newline="")))
    start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    head = rows[start]
    kname, grid, dur = head.index("Kernel Name"), head.index("Grid Size"), None
    clk = None
    for i, h in enumerate(head):
        if h == "gpu__time_duration.sum":
            dur = i
        if h == "sm__cycles_elapsed.avg.per_second":
            clk = i  # the SM clock while the kernel ran
    kernels = []
    for r in rows[start + 1:]:
        if len(r) != len(head):
            continue
        try:
            t = float(r[dur].replace(",", ""))  # ncu writes 4,864
        except ValueError:
            continue  # the units row
        f = 0.0
        if clk is not None:
            try:
                f = float(r[clk].replace(",", ""))
            except ValueError:
                f = 0.0
        kernels.append((short(r[kname]), r[grid], t, f))
    unit_row = rows[start + 1] if len(rows) > start + 1 else []
    scale = 1e-3 if (dur < len(unit_row) and unit_row[dur] in ("nsecond", "ns")) else 1.0
    passes, cur = [], None
    for k in kernels:
        if k[0].startswith("get_rows"):
            if cur is not None:
                passes.append(cur)
            cur = []
        if cur is not None:
            cur.append(k)
    counts = collections.Counter(len(p) for p in passes)
    if not counts:
        print("no complete forward pass in", path)
        return
    n, _ = counts.most_common(1)[0]
    chosen = [p for p in passes if len(p) == n]
    per = collections.defaultdict(lambda: [0.0, 0, 0.0])
    for p in chosen:
        for name, g, t, f in p:
            per[(name, g)][0] += t * scale / len(chosen)
            per[(name, g)][1] += 1
            per[(name, g)][2] += f
    total = sum(v[0] for v in per.values())
    print(f"{len(chosen)} forward passes of {n} kernels; cold-L2 kernel time per pass {total:.0f} us")
    print("| kernel | grid | launches/pass | us/pass | share | SM clock (mean) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (name, g), (t, c, f) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"| {name} | {g} | {c // len(chosen)} | {t:.1f} | {100 * t / total:.1f}% | {f / c:.4g} |")


if __name__ == "__main__":
    main(sys.argv[1])
