#!/usr/bin/env python3
"""audit_report.py — the report of `flashsample audit --logits L.npy --tokens T.npy --report DIR`.

Usage: audit_report.py AUDIT.json OUTDIR

Reads the audit's JSON (written by the tool into OUTDIR/audit.json) and writes
OUTDIR/report.md with three figures:
  fig_bins.png     observed vs expected count per bin of the global test (the
                   fractional histogram of the probability integral transform:
                   every bin expects N/K under the null), with 0.999 intervals;
  fig_tail.png     the tail-mass curve: draws more than t nats below their row's
                   head, observed against the exact expectation, with 0.999
                   intervals, t = 0..30;
  fig_pvalues.png  -log10 p of every test against -log10 alpha (rows not
                   tested: a grey bar at 0, named so).
A row that tested nothing (verdict "untested": e.g. one draw per row, no tied
logits) is shown as "not tested", never as a pass (docs/AUDIT.md).
Needs matplotlib (the tool checks for it before the audit runs); exits 1 with
a message if it is missing or the JSON is not an audit of external tokens.
"""
import json
import math
import os
import sys


def fail(msg):
    print(f"audit_report.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def fmt(x, spec=".3g"):
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def verdict(r):
    """A row's verdict: "pass", "fail" or "untested" (JSON of older tools: from "pass")."""
    v = r.get("verdict")
    if v in ("pass", "fail", "untested"):
        return v
    return "untested" if r.get("untested") else ("pass" if r.get("pass") else "fail")


def main():
    if len(sys.argv) != 3:
        fail("usage: audit_report.py AUDIT.json OUTDIR")
    src, out = sys.argv[1], sys.argv[2]
    try:
        with open(src) as f:
            a = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{src}: {e}")
    if a.get("mode") != "external" or "rows" not in a:
        fail(f"{src}: not the JSON of an audit of external tokens (flashsample audit --logits --tokens)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed for this python3 (install python3-matplotlib)")
    os.makedirs(out, exist_ok=True)
    groups = a.get("groups", [])
    rows = a["rows"]
    alpha = a["family"]["alpha"]

    # observed vs expected per bin
    n = max(1, len(groups))
    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.2), squeeze=False)
    for ax, g in zip(axes[0], groups):
        b = g["bins"]
        k = list(range(len(b["observed"])))
        ax.fill_between(k, b["lo"], b["hi"], step="mid", color="0.85", label="0.999 interval under the null")
        ax.step(k, b["expected"], where="mid", color="0.3", label="expected (N/K)")
        ax.plot(k, b["observed"], "o", color="tab:red", ms=4, label="observed")
        ax.set_title(f"{g['name']}: {g['draws']} draws, {len(k)} bins")
        ax.set_xlabel("bin of the probability integral transform (most likely tokens first)")
        ax.set_ylabel("draws")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fig_bins.png"), dpi=110)
    plt.close(fig)

    # tail-mass curve
    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.2), squeeze=False)
    for ax, g in zip(axes[0], groups):
        t = g["tail"]
        floor = 0.5
        lo = [max(floor, x if x is not None else floor) for x in t["lo"]]
        hi = [max(floor, x if x is not None else floor) for x in t["hi"]]
        ax.fill_between(t["t"], lo, hi, color="0.85", label="0.999 interval under the null")
        ax.plot(t["t"], [max(floor, x) for x in t["expected"]], color="0.3", label="expected")
        ax.plot(t["t"], [max(floor, x) for x in t["observed"]], "o", color="tab:red", ms=3, label="observed")
        ax.set_yscale("log")
        ax.set_title(f"{g['name']}: draws more than t nats below the row's head")
        ax.set_xlabel("t (nats)")
        ax.set_ylabel("draws (log; 0 drawn at 0.5)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fig_tail.png"), dpi=110)
    plt.close(fig)

    # p-values
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.2))
    names = [r["test"] for r in rows]
    vals = []
    for r in rows:
        p = r["p"]
        vals.append(0.0 if p is None else (16.0 if p <= 0 else min(16.0, -math.log10(p))))
    colors = [{"pass": "tab:green", "untested": "tab:gray"}.get(verdict(r), "tab:red") for r in rows]
    ax.bar(range(len(rows)), vals, color=colors)
    ax.axhline(-math.log10(alpha), color="k", ls="--", label=f"-log10 alpha ({alpha:.3g})")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([n + (" (not tested)" if verdict(r) == "untested" else "") for n, r in zip(names, rows)],
                       rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("-log10 p (capped at 16)")
    ax.set_title("every test (red: failed; grey: not tested)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fig_pvalues.png"), dpi=110)
    plt.close(fig)

    inp = a["inputs"]
    failed = [r for r in rows if verdict(r) == "fail"]
    untested = [r for r in rows if verdict(r) == "untested"]
    tested = len(rows) - len(untested)
    md = []
    md.append("# Audit of external tokens\n")
    md.append(f"`flashsample audit` {a.get('version', '')}, {a.get('date', '')}\n")
    md.append(f"- logits: `{inp['logits']}` (B = {inp['B']}, V = {inp['V']})")
    md.append(f"- tokens: `{inp['tokens']}` (N = {inp['N']} draws per row"
              + (f", K = {inp['K']} positions without replacement" if inp.get("K", 1) > 1 else "") + ")")
    md.append(f"- temperature: {inp['temperature']}; rule: {inp['rule']}")
    md.append(f"- family: {a['family']['tests']} tests, budget {a['family']['budget']:g}, "
              f"alpha = {alpha:.4g} per test (Bonferroni)\n")
    if failed:
        overall = f"**{len(failed)} test(s) fail**"
    elif tested == 0:
        overall = "**nothing was tested** (every row is not tested: not a pass)"
    elif untested:
        overall = f"**every tested row passes** ({tested} of {len(rows)})"
    else:
        overall = "**every test passes**"
    md.append(f"Verdict: {overall}.\n")
    md.append(f"{len(rows)} tests: {len(rows) - len(failed) - len(untested)} passed, {len(failed)} failed, "
              f"{len(untested)} not tested.\n")
    if untested:
        md.append("Not tested (these inputs gave the test nothing to test; never counted as passes): "
                  + ", ".join(f"{r['test']} ({r.get('note', '')})" for r in untested) + ".\n")
    md.append("## What these draws can catch\n")
    for s in a.get("power", []):
        md.append(f"- {s}")
    md.append("")
    md.append("## Tests\n")
    md.append("| test | p | alpha | result | what it sees |")
    md.append("|---|---|---|---|---|")
    for r in rows:
        if verdict(r) == "untested":
            sees = f"not tested: {r.get('note', '')}"
        elif r["kind"] == "tail":
            d, e = r["deficit_caught"], r["excess_caught"]
            sees = (f"mass {fmt(r['tail_mass'])} below {fmt(r['tail_t'], 'g')} nats: expected "
                    f"{fmt(r['expected'], '.4g')}, observed {fmt(r['observed'], '.0f')}; deficit >= "
                    f"{'none' if d is None else fmt(100 * d, '.3g') + '%'}, excess >= "
                    f"{'none' if e is None else fmt(100 * e, '.3g') + '%'}")
        elif r["kind"] in ("gof", "pairs"):
            sees = f"{r['bins']} bins, smallest mass {fmt(r['min_mass'])}; TV >= {fmt(r['tv_caught'])} caught"
        else:
            sees = r.get("note", "")
        result = {"pass": "pass", "untested": "not tested"}.get(verdict(r), "**FAIL**")
        md.append(f"| {r['test']} | {fmt(r['p'], '.4g')} | {fmt(r['alpha'], '.3g')} | {result} | {sees} |")
    md.append("")
    md.append("## Figures\n")
    md.append("Observed against expected draws per bin of the global test (equal bins of the probability "
              "integral transform; grey: the 0.999 interval of each bin under the null):\n")
    md.append("![bins](fig_bins.png)\n")
    md.append("The tail-mass curve: draws more than t nats below their row's most likely token, against the "
              "exact expectation (24-bit uniforms and truncated candidate lists fall short here):\n")
    md.append("![tail](fig_tail.png)\n")
    md.append("Every test's p-value against the per-test level:\n")
    md.append("![p-values](fig_pvalues.png)\n")
    md.append("How the tests work and what they cannot see: docs/AUDIT.md.\n")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
