#!/usr/bin/env python3
"""The paper's tables from one reproduction run: REPORT.md and the figures.

    python3 paper_repro/paper_tables.py RUNDIR [--out DIR] [--no-figure] [--gallery GALLERY.json]

RUNDIR holds what paper_repro/run.sh wrote in one session on one GPU: flashsample.csv
(flashsample bench --device cuda), flashinfer.csv (peers/fi_bench) and torch.csv
(peers/torch_peers.py); a missing peer leaves its cells empty ("—"). RUNDIR/NOTES.md, where
present, is copied under the report's header (what the run's reader must know). Writes into --out (default
RUNDIR): REPORT.md, sweep.png (runtime of each method vs B, one panel per shape) and
speedup.png (each method's time / the fused kernel's).

Tables, each next to the paper's published numbers (arXiv 2603.15854, H200 column unless said)
with the ratio measured / paper per cell:
- Tables 4 and 5: speedup of a fused sampler vs multinomial (torch.compile'd matmul + softmax +
  torch.multinomial), FI1 (matmul + FlashInfer top-k/top-p from probs, k = V, p = 1) and FI2
  (matmul + FlashInfer Gumbel from logits), D:V = 4096:151936 and 8192:128256; for
  FlashSampling's own Triton kernel (what the paper measured) and for flashsample's fused call.
- Table 1: the share of the time spent sampling, 1 - matmul-only / method (the paper measured it
  on an RTX 3090 from a kernel breakdown; here it is from timings on this GPU).
- Table 9: the cost of also storing the fp32 logits (FlashSampling's return_logits), measured
  vs the predicted 2B/D (the paper's numbers are from a B200).
With --gallery, the exactness gallery of the samplers people run (peers/gallery.py's JSON, from
its own GPU session) follows the timing tables, its tables made by peers/gallery.py.
The matmul-only time is the fastest matmul measured in the run for that (shape, B): cuBLAS eager
or graph-replayed (flashsample bench), torch's H @ W.T, or fi_bench's GEMM to fp32.
This script runs in CI on the committed CSVs (no GPU needed).
"""

import argparse
import csv
import json
import os
import sys
from collections import defaultdict

# The paper's Tables 4 and 5, H200 column: B -> (vs multinomial, vs FI1, vs FI2)
PAPER_SPEEDUP = {
    (4096, 151936): {
        1: (1.35, 1.39, 1.24), 2: (1.34, 1.44, 1.22), 4: (1.35, 1.42, 1.23), 8: (1.38, 1.48, 1.24),
        16: (1.44, 1.49, 1.25), 32: (1.53, 1.50, 1.27), 64: (1.67, 1.49, 1.25),
        128: (1.43, 1.15, 0.94), 256: (1.22, 1.00, 0.79),
    },
    (8192, 128256): {
        1: (1.26, 1.25, 1.13), 2: (1.23, 1.21, 1.11), 4: (1.24, 1.21, 1.12), 8: (1.25, 1.23, 1.12),
        16: (1.27, 1.25, 1.13), 32: (1.34, 1.30, 1.18), 64: (1.43, 1.33, 1.20),
        128: (1.01, 0.88, 0.78), 256: (0.82, 0.74, 0.65),
    },
}
# Table 1 (RTX 3090): share of kernel time spent sampling, % at B = 1, 16, 64, 256
PAPER_SHARE = {
    "flashsampling": {1: 2.3, 16: 2.3, 64: 6.0, 256: 6.2},
    "multinomial": {1: 6.3, 16: 12.9, 64: 28.7, 256: 26.9},
    "fi2_gumbel": {1: 5.3, 16: 6.6, 64: 11.4, 256: 11.8},
}
# Table 9 (B200): storing the logits, (predicted 2B/D %, measured %)
PAPER_LOGITS = {
    4096: {1: (0.05, 0.9), 16: (0.78, 2.1), 64: (3.13, 4.8), 256: (12.5, 15.2)},
    8192: {1: (0.02, 0.5), 64: (1.56, 3.6), 256: (6.25, 8.1)},
}

LABEL = {
    "fused": "flashsample fused",
    "fused_grouped": "flashsample grouped",
    "flashsampling": "FlashSampling (Triton)",
    "flashsampling_logits": "FlashSampling + logits",
    "multinomial": "multinomial (compiled)",
    "fi1_topk_topp": "FI1 top-k/top-p",
    "fi1_k50_p09": "FI1 k=50 p=0.9",
    "fi2_gumbel": "FI2 Gumbel",
    "fi_minp": "FI min-p 0.05",
    "gumbel_eager": "Gumbel argmax (eager)",
    "unfused_multinomial": "flashsample unfused multinomial",
    "matmul_only": "matmul only (best)",
    "floor": "W-read floor",
}


def read(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load(run):
    """{(D, V): {B: {method: ms}}} and notes on what is missing."""
    t = defaultdict(lambda: defaultdict(dict))
    meta = {}
    notes = []
    fs = read(os.path.join(run, "flashsample.csv"))
    if not fs:
        notes.append("flashsample.csv missing")
    for r in fs:
        if r["device"] != "cuda" or r["engine"] == "copy":
            continue
        key = (int(r["D"]), int(r["V"]))
        ms = float(r["median_ms"])
        if ms <= 0:
            continue
        eng = r["engine"]
        meta["date"], meta["gpu"] = r.get("date", ""), r.get("gpu", "")
        if eng in ("cublas", "cublas_graph"):
            eng = "mm_" + eng
        t[key][int(r["B"])][eng] = ms
    fi = read(os.path.join(run, "flashinfer.csv"))
    if not fi:
        notes.append("FlashInfer not measured (no flashinfer.csv): its columns are empty")
    for r in fi:
        key = (int(r["D"]), int(r["V"]))
        m = r["method"]
        t[key][int(r["B"])]["mm_fi" if m == "matmul" else m] = float(r["median_ms"])
    to = read(os.path.join(run, "torch.csv"))
    if not to:
        notes.append("torch peers not measured (no torch.csv)")
    elif not any(r["method"] == "flashsampling" for r in to):
        notes.append("FlashSampling's Triton kernel not measured (no pinned copy): its columns are empty")
    for r in to:
        key = (int(r["D"]), int(r["V"]))
        m = r["method"]
        t[key][int(r["B"])]["mm_torch" if m == "torch_matmul" else m] = float(r["median_ms"])
    for key in t:
        for B, row in t[key].items():
            mm = [v for k, v in row.items() if k.startswith("mm_")]
            if mm:
                row["matmul_only"] = min(mm)
    nf = os.path.join(run, "NOTES.md")
    if os.path.exists(nf):
        meta["notes"] = open(nf).read()
    return t, meta, notes


def f3(v):
    return "—" if v is None else f"{v:.3f}"


def f2(v):
    return "—" if v is None else f"{v:.2f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def tables(t, meta, notes):
    L = []
    L.append("# The paper's tables on this GPU\n")
    L.append(
        f"Generated by `paper_repro/paper_tables.py` from one run of `paper_repro/run.sh` on "
        f"{meta.get('gpu', '?')}, {meta.get('date', '?')} (bf16 W and H, T = 0.7, one sample per row, "
        "medians in ms). The paper is FlashSampling, arXiv 2603.15854; its numbers are its H200 "
        "column unless a table says otherwise. Ratios are taken only within this run.\n"
    )
    for n in notes:
        L.append(f"- Note: {n}")
    if notes:
        L.append("")
    if meta.get("notes"):
        L.append(meta["notes"].strip() + "\n")
    for key in sorted(t):
        D, V = key
        rows = t[key]
        tab = {(4096, 151936): "Table 4", (8192, 128256): "Table 5"}.get(key, "Sweep")
        L.append(f"## {tab}: D = {D}, V = {V}\n")
        L.append("Times (ms):\n")
        cols = ["floor", "matmul_only", "fused", "fused_grouped", "flashsampling", "multinomial",
                "fi1_topk_topp", "fi1_k50_p09", "fi2_gumbel", "fi_minp", "gumbel_eager"]
        cols = [c for c in cols if any(c in rows[B] for B in rows)]
        L.append("| B | " + " | ".join(LABEL.get(c, c) for c in cols) + " | fused / matmul |")
        L.append("|---" * (len(cols) + 2) + "|")
        for B in sorted(rows):
            r = rows[B]
            L.append(f"| {B} | " + " | ".join(f3(r.get(c)) for c in cols)
                     + f" | {f3(ratio(r.get('fused'), r.get('matmul_only')))} |")
        L.append("")
        paper = PAPER_SPEEDUP.get(key, {})
        for who, lab in (("flashsampling", "FlashSampling's Triton kernel (the paper's own)"),
                         ("fused", "flashsample's fused call")):
            if not any(who in rows[B] for B in rows):
                continue
            L.append(f"Speedup of {lab}: baseline time / its time; paper = the published H200 speedup of "
                     "FlashSampling; measured / paper per cell:\n")
            L.append("| B | vs multinomial | paper | ratio | vs FI1 | paper | ratio | vs FI2 | paper | ratio |")
            L.append("|---" * 10 + "|")
            for B in sorted(rows):
                r = rows[B]
                me = r.get(who)
                cells = []
                for i, base in enumerate(("multinomial", "fi1_topk_topp", "fi2_gumbel")):
                    s = ratio(r.get(base), me)
                    p = paper.get(B, (None, None, None))[i]
                    cells += [f2(s), f2(p), f2(ratio(s, p))]
                L.append(f"| {B} | " + " | ".join(cells) + " |")
            L.append("")
    # Table 1
    L.append("## Table 1: share of the time spent sampling\n")
    L.append("1 − matmul-only / method, % (the paper: RTX 3090, from a kernel breakdown; here: timings on "
             "this GPU; a share near 0 or below means the sampling costs nothing measurable):\n")
    who = ["fused", "flashsampling", "multinomial", "fi2_gumbel"]
    L.append("| D, V | B | " + " | ".join(f"{LABEL[w]} | paper" for w in who) + " |")
    L.append("|---" * (2 + 2 * len(who)) + "|")
    for key in sorted(t):
        for B in (1, 16, 64, 256):
            r = t[key].get(B)
            if not r:
                continue
            cells = []
            for w in who:
                s = None
                if r.get(w) and r.get("matmul_only"):
                    s = 100.0 * (1.0 - r["matmul_only"] / r[w])
                p = PAPER_SHARE.get("flashsampling" if w == "fused" else w, {}).get(B)
                cells += ["—" if s is None else f"{s:.1f}", "—" if p is None else f"{p:.1f}"]
            L.append(f"| {key[0]}, {key[1]} | {B} | " + " | ".join(cells) + " |")
    L.append("\n(The paper column for flashsample fused is FlashSampling's share.)\n")
    # Table 9
    L.append("## Table 9: also storing the fp32 logits\n")
    L.append("FlashSampling's kernel with return_logits=True vs without, overhead %; predicted 2B/D (the "
             "logits' bytes over W's); the paper measured on a B200. flashsample never writes the logits "
             "(there is no such mode), so only the Triton kernel is measured:\n")
    L.append("| D, V | B | predicted 2B/D % | measured % | paper predicted % | paper measured % |")
    L.append("|---" * 6 + "|")
    for key in sorted(t):
        D = key[0]
        for B in sorted(t[key]):
            r = t[key][B]
            if "flashsampling_logits" not in r or "flashsampling" not in r:
                continue
            m = 100.0 * (r["flashsampling_logits"] / r["flashsampling"] - 1.0)
            p = PAPER_LOGITS.get(D, {}).get(B, (None, None))
            L.append(f"| {D}, {key[1]} | {B} | {100.0 * 2 * B / D:.2f} | {m:.1f} | {f2(p[0])} | {f2(p[1])} |")
    L.append("")
    L.append("Figures: `sweep.png` (runtime of each method vs B) and `speedup.png` (each method's time / "
             "flashsample fused).\n")
    return "\n".join(L)


def figures(t, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("paper_tables: matplotlib missing: figures not written (Debian: python3-matplotlib)", file=sys.stderr)
        return False
    methods = ["floor", "matmul_only", "fused", "fused_grouped", "flashsampling", "multinomial",
               "fi1_topk_topp", "fi2_gumbel", "fi1_k50_p09", "gumbel_eager"]
    keys = sorted(t)
    for name, rel in (("sweep.png", False), ("speedup.png", True)):
        fig, axes = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 4.5), squeeze=False)
        for ax, key in zip(axes[0], keys):
            rows = t[key]
            Bs = sorted(rows)
            for m in methods:
                pts = [(B, rows[B][m]) for B in Bs if m in rows[B]]
                if rel:
                    pts = [(B, v / rows[B]["fused"]) for B, v in pts if rows[B].get("fused")]
                if not pts or (rel and m == "fused"):
                    continue
                style = "-" if m in ("fused", "fused_grouped") else ("--" if m in ("floor", "matmul_only") else "-.")
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3, label=LABEL.get(m, m))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch B")
            ax.set_ylabel("time / flashsample fused" if rel else "ms (median)")
            if rel:
                ax.axhline(1.0, color="k", lw=0.8)
            ax.set_title(f"D = {key[0]}, V = {key[1]}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
    return True


def gallery_section(path):
    """The exactness gallery's tables (peers/gallery.py table) under a heading of its own."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    import gallery

    with open(path) as f:
        data = json.load(f)
    env = data.get("env", {})
    return ("\n## The exactness gallery: the samplers people run\n\n"
            f"From `{os.path.basename(path)}`: `paper_repro/peers/audit_gallery.sh` on {env.get('gpu', 'a GPU')}, "
            f"{data.get('date', '')} (torch {env.get('torch', '?')}, Triton {env.get('triton', '?')}; peers: "
            f"{env.get('peers', '?')}), a session of its own, not the timing run's. Each cell: the audit's verdict, "
            "the draws and the smallest TV they catch, or the failing test with observed against expected counts; "
            "then the reproducibility checks and the upper tail of each peer's noise. What the failures are and "
            "their causes: docs/AUDIT.md, \"The samplers people run\".\n\n" + gallery.table(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-figure", action="store_true")
    ap.add_argument("--gallery", default=None, help="append the exactness gallery of this gallery.json")
    a = ap.parse_args()
    if not os.path.isdir(a.run):
        print(f"paper_tables: {a.run} is not a folder: give the run folder paper_repro/run.sh wrote, e.g. "
              "paper_repro/results/repro_h200_2026-12-01 (paths are relative to where you run the script)",
              file=sys.stderr)
        return 2
    out = a.out or a.run
    os.makedirs(out, exist_ok=True)
    t, meta, notes = load(a.run)
    if not t:
        print(f"paper_tables: no timings in {a.run} (flashsample.csv, flashinfer.csv, torch.csv)", file=sys.stderr)
        return 1
    report = tables(t, meta, notes)
    if a.gallery:
        report += gallery_section(a.gallery)
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write(report)
    ok = True if a.no_figure else figures(t, out)
    print(f"paper_tables: wrote {os.path.join(out, 'REPORT.md')}" + ("" if a.no_figure else " and the figures"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
