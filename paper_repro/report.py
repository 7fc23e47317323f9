#!/usr/bin/env python3
"""Turn benchmark CSVs (long format: device,engine,dtype,B,V,D,median_ms,...)
into a markdown table of ratios and, where matplotlib is present, a PNG.

    python3 paper_repro/report.py paper_repro/results/cpu-*.csv --out paper_repro/results/cpu-report

Ratios are taken inside one CSV (one run), never across runs: fused / floor,
fused / each unfused baseline, and fused / cuBLAS matmul-only where present.
"""
import argparse
import csv
import os
import sys
from collections import defaultdict


def load(paths):
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                r["_file"] = os.path.basename(p)
                rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", default=None, help="output prefix for .md and .png (default: stdout only)")
    a = ap.parse_args()
    rows = load(a.csv)
    if not rows:
        sys.exit("report: no rows")
    t = defaultdict(dict)  # (file, device, dtype, D, V, B) -> engine -> ms
    for r in rows:
        if int(r["B"]) <= 0:  # run-level figures (e.g. the copy bandwidth) have no shape
            continue
        key = (r["_file"], r["device"], r["dtype"], int(r["D"]), int(r["V"]), int(r["B"]))
        t[key][r["engine"]] = float(r["median_ms"])
    engines = sorted({e for v in t.values() for e in v})
    fused = [e for e in engines if e.startswith("fused")]
    refs = [e for e in engines if not e.startswith("fused")]
    lines = ["| run | device | dtype | D | V | B | " + " | ".join(engines) + " | "
             + " | ".join(f"{f}/{r}" for f in fused[:1] for r in refs) + " |"]
    lines.append("|" + "---|" * (6 + len(engines) + len(refs) * min(1, len(fused))))
    for key in sorted(t):
        e = t[key]
        cells = [f"{e[x]:.3f}" if x in e else "" for x in engines]
        ratios = []
        if fused:
            f0 = e.get(fused[0])
            ratios = [f"{f0 / e[r]:.2f}" if f0 and r in e and e[r] > 0 else "" for r in refs]
        lines.append("| " + " | ".join(str(k) for k in key) + " | " + " | ".join(cells + ratios) + " |")
    md = "\n".join(lines) + "\n"
    print(md)
    if a.out:
        with open(a.out + ".md.tmp", "w") as f:
            f.write("Times in ms (median); ratios within one run.\n\n" + md)
        os.replace(a.out + ".md.tmp", a.out + ".md")
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except Exception as e:  # missing, or broken by a mismatched numpy
            print(f"report: matplotlib unavailable ({e}); no PNG", file=sys.stderr)
            return
        groups = defaultdict(list)
        for key in sorted(t):
            groups[key[:5]].append(key)
        fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
        for ax, (g, keys) in zip(axes[0], groups.items()):
            Bs = [k[5] for k in keys]
            for eng in engines:
                ys = [t[k].get(eng, float("nan")) for k in keys]
                ax.plot(Bs, ys, marker="o", label=eng)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch B")
            ax.set_ylabel("median ms")
            ax.set_title(f"{g[1]} {g[2]} D={g[3]} V={g[4]}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.out + ".png.tmp.png", dpi=120)
        os.replace(a.out + ".png.tmp.png", a.out + ".png")


if __name__ == "__main__":
    main()
