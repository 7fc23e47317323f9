#!/usr/bin/env python3
"""Turn benchmark CSVs (long format: device,engine,dtype,B,V,D,median_ms,...)
into markdown tables of ratios and, with --out, a PNG figure.

    python3 paper_repro/report.py paper_repro/results/cpu_bench_epyc-2core_2026-11-29_final.csv \\
        --out paper_repro/results/cpu_bench_epyc-2core_2026-11-29_final

Ratios are taken inside one CSV (one run), never across runs.

The headline table holds the product and the references it is judged
against: floor (a read of W's bytes), cuBLAS matmul-only (cublas, and
cublas_graph: the ratio uses the faster of the two), fused (the library's
own choice of kernel) and the unfused baselines (unfused_gumbel,
unfused_multinomial). Its ratios are fused / each reference.

Everything else a run may hold -- one fused kernel forced (fused_wgmma,
fused_chunked, ...), variants kept for an A/B (..._noskip, ..._nopf), and
components timed alone (wgmma_gemm_only, chunked_gemms_only,
logits_sampler) -- goes to a separate breakdown table, with each engine's
time relative to fused and to cuBLAS, so no component is read as the
product.

With --out the figure is required: without matplotlib (Debian:
python3-matplotlib) the report fails (exit 1) instead of writing tables
only; --no-figure writes the tables alone.
"""
import argparse
import csv
import math
import os
import sys
from collections import defaultdict

# The headline: the product and the references, in this order.
HEADLINE = ["floor", "cublas", "cublas_graph", "fused", "unfused_gumbel", "unfused_multinomial"]
# Rows without a shape (B = 0) are run-level figures (the copy bandwidth).


def load(paths):
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            lines = [line for line in f if not line.startswith("#")]
        reader = csv.DictReader(lines)
        need = {"device", "engine", "dtype", "B", "V", "D", "median_ms"}
        if not need <= set(reader.fieldnames or []):
            sys.exit(f"report: {p} is not a benchmark CSV (it lacks {', '.join(sorted(need - set(reader.fieldnames or [])))})")
        for r in reader:
            r["_file"] = os.path.splitext(os.path.basename(p))[0]
            rows.append(r)
    return rows


def cublas_best(e):
    v = [e[k] for k in ("cublas", "cublas_graph") if k in e and e[k] > 0]
    return min(v) if v else None


def fmt_ms(v):
    return "" if v is None else f"{v:.3f}"


def fmt_ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else ""


def tables(t, runs):
    """The headline and the breakdown markdown for table t: (run, device, dtype, D, V, B) -> engine -> ms."""
    present = {e for v in t.values() for e in v}
    head = [e for e in HEADLINE if e in present]
    other = sorted(present - set(HEADLINE))
    refs = []  # (label, function of the engine dict)
    if "floor" in present:
        refs.append(("fused/floor", lambda e: e.get("floor")))
    if present & {"cublas", "cublas_graph"}:
        refs.append(("fused/cuBLAS", cublas_best))
    for b in ("unfused_gumbel", "unfused_multinomial"):
        if b in present:
            refs.append((f"fused/{b}", lambda e, b=b: e.get(b)))
    key_cols = ["device", "dtype", "D", "V", "B"]
    if len(runs) > 1:
        key_cols = ["run"] + key_cols

    def key_cells(k):
        return [str(x) for x in (k if len(runs) > 1 else k[1:])]

    out = ["## Headline: fused (the library's choice) against the references", "",
           "Times in ms (median); ratios < 1: fused is faster. cuBLAS = the faster of eager and graph.", ""]
    cols = key_cols + head + [r[0] for r in refs]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "---|" * len(cols))
    for k in sorted(t):
        e = t[k]
        f = e.get("fused")
        cells = [fmt_ms(e.get(x)) for x in head] + [fmt_ratio(f, fn(e)) for _, fn in refs]
        out.append("| " + " | ".join(key_cells(k) + cells) + " |")
    if other:
        out += ["", "## Breakdown: single kernels, A/B variants and components (not the product)", "",
                "Each engine's time in ms, then relative to fused and to cuBLAS of the same run and shape.", ""]
        cols = key_cols + ["engine", "ms", "/fused", "/cuBLAS"]
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "---|" * len(cols))
        for k in sorted(t):
            e = t[k]
            for x in other:
                if x in e:
                    out.append("| " + " | ".join(key_cells(k) + [x, fmt_ms(e[x]), fmt_ratio(e[x], e.get("fused")),
                                                                  fmt_ratio(e[x], cublas_best(e))]) + " |")
    return "\n".join(out) + "\n"


def styles(engines):
    """A distinct (colour, marker, line style) for every engine: the headline in fixed colours
    (fused black and thick), the breakdown dashed, cycling 20 colours and 10 markers."""
    import matplotlib
    cmap = matplotlib.colormaps["tab20"] if hasattr(matplotlib, "colormaps") else matplotlib.cm.get_cmap("tab20")
    # dark ones first; not the greys (14, 15), which read as the floor
    colours = [cmap.colors[i] for i in list(range(0, 20, 2)) + list(range(1, 20, 2)) if i not in (14, 15)]
    fixed = {"floor": "0.55", "cublas": "tab:blue", "cublas_graph": "tab:cyan", "fused": "black",
             "unfused_gumbel": "tab:green", "unfused_multinomial": "tab:red"}
    markers = ["o", "s", "^", "v", "D", "P", "X", "<", ">", "*"]
    st = {}
    k = 0
    for i, eng in enumerate(engines):
        if eng in fixed:
            st[eng] = dict(color=fixed[eng], marker=markers[i % len(markers)], linestyle="-",
                           linewidth=2.4 if eng == "fused" else 1.4)
        else:
            st[eng] = dict(color=colours[k % len(colours)], marker=markers[(k + k // len(colours)) % len(markers)],
                           linestyle="--", linewidth=1.1)
            k += 1
    return st


def figure(t, runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    engines = [e for e in HEADLINE if any(e in v for v in t.values())]
    engines += sorted({e for v in t.values() for e in v} - set(HEADLINE))
    st = styles(engines)
    per_run = {r: sorted({k[1:5] for k in t if k[0] == r}) for r in runs}
    ncols = min(4, max(len(g) for g in per_run.values()))
    nrows = {r: math.ceil(len(g) / ncols) for r, g in per_run.items()}
    row_h = max(3.0, 0.16 * len(engines) + 1.0)  # the legend of every engine fits beside a row
    heights = [row_h * nrows[r] + 0.5 for r in runs]
    fig = plt.figure(figsize=(4.0 * ncols + 2.4, sum(heights)), layout="constrained")
    subfigs = fig.subfigures(len(runs), 1, squeeze=False, height_ratios=heights)[:, 0]
    for sf, run in zip(subfigs, runs):
        groups = per_run[run]
        sf.suptitle(f"run: {run}", fontsize=11, fontweight="bold")
        axes = sf.subplots(nrows[run], ncols + 1, squeeze=False, gridspec_kw={"width_ratios": [1] * ncols + [0.55]})
        handles = {}
        for i, g in enumerate(groups):
            ax = axes[i // ncols][i % ncols]
            keys = sorted(k for k in t if k[0] == run and k[1:5] == g)
            Bs = [k[5] for k in keys]
            for eng in engines:
                ys = [t[k].get(eng, float("nan")) for k in keys]
                if all(math.isnan(y) for y in ys):
                    continue
                (h,) = ax.plot(Bs, ys, markersize=4, label=eng, **st[eng])
                handles[eng] = h
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("batch B")
            if i % ncols == 0:
                ax.set_ylabel("median ms")
            ax.set_title(f"{g[0]} {g[1]}, D={g[2]}, V={g[3]}", fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
        for i in range(len(groups), nrows[run] * ncols):
            axes[i // ncols][i % ncols].axis("off")
        for r in range(nrows[run]):
            axes[r][ncols].axis("off")
        order = [e for e in engines if e in handles]
        axes[0][ncols].legend([handles[e] for e in order], order, loc="upper left", fontsize=7, frameon=False,
                              borderaxespad=0, title="solid: headline\ndashed: breakdown", title_fontsize=7)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", default=None, help="output prefix for .md and .png (default: tables on stdout only)")
    ap.add_argument("--no-figure", action="store_true", help="with --out: write the tables only")
    a = ap.parse_args()
    if a.out and os.path.dirname(a.out) and not os.path.isdir(os.path.dirname(a.out)):
        sys.exit(f"report: --out {a.out}: the folder {os.path.dirname(a.out)} does not exist (create it first)")
    rows = load(a.csv)
    if not rows:
        sys.exit("report: no rows")
    if a.out and not a.no_figure:
        try:  # fail before writing anything
            import matplotlib  # noqa: F401
            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except Exception as e:  # missing, or broken by a mismatched numpy
            sys.exit(f"report: matplotlib is needed for the figure and cannot be imported ({e}); install it "
                     "(Debian: apt-get install python3-matplotlib) or pass --no-figure")
    t = defaultdict(dict)  # (run, device, dtype, D, V, B) -> engine -> ms
    runs = []
    for r in rows:
        if r["_file"] not in runs:
            runs.append(r["_file"])
        if int(r["B"]) <= 0:
            continue
        key = (r["_file"], r["device"], r["dtype"], int(r["D"]), int(r["V"]), int(r["B"]))
        t[key][r["engine"]] = float(r["median_ms"])
    runs = [r for r in runs if any(k[0] == r for k in t)]
    if not t:
        sys.exit("report: no rows with a shape")
    md = tables(t, runs)
    print(md)
    if a.out:
        with open(a.out + ".md.tmp", "w") as f:
            f.write(f"# Benchmark report: {', '.join(runs)}\n\n" + md)
        os.replace(a.out + ".md.tmp", a.out + ".md")
        if not a.no_figure:
            figure(t, runs, a.out + ".png")
            print(f"report: wrote {a.out}.md and {a.out}.png", file=sys.stderr)


if __name__ == "__main__":
    main()
