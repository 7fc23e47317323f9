#!/usr/bin/env python3
"""tie_bias.py — how far the sampled frequencies of tied and near-tied tokens are from exact,
by temperature: the measurement behind docs/NOISE.md's "key resolution" table.

    python3 tools/tie_bias.py [--tool build/tools/flashsample] [--draws 10000000] [--csv out.csv]

Cases (one row of logits each, fp32): an exact 2-way tie (10, 10), an exact 3-way tie
(10, 10, 10), a near-tie one fp32 ulp apart (10, nextafter(10, inf)) and a tie (40, 40)
whose keys at T = 1e-2 sit just inside the key resolution (docs/NOISE.md), each at
T = 1e-2 .. 1e-6 (and T = 1 as the control). The exact probability of token 0 is computed in
double from the fp32 logits as given, p0 = 1 / sum_v exp((l_v - l_0) / T). The draws go through
`flashsample sample --counts` (the CPU engine, all cores; seed fixed and printed), and the table
gives the observed frequency of token 0, the exact p0, and z = (observed - p0) / sqrt(p0 (1 - p0) / N):
|z| >= 5 is a bias these draws detect.
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile

import numpy as np


def find_tool(given):
    cands = [given, os.environ.get("FLASHSAMPLE_TOOL"), "build/tools/flashsample", "build-ci/tools/flashsample"]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("tie_bias: no flashsample command line found: build it (meson setup build && ninja -C build) "
             "or pass --tool PATH")


CASES = [
    ("2-way tie", [10.0, 10.0]),
    ("3-way tie", [10.0, 10.0, 10.0]),
    ("near-tie (1 ulp)", [10.0, float(np.nextafter(np.float32(10.0), np.float32(np.inf)))]),
    ("2-way tie at 40", [40.0, 40.0]),  # |l / T| = 4000 at T = 0.01: just inside the key resolution
]
TEMPS = [1.0, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", default=None, help="the flashsample command line")
    ap.add_argument("--draws", type=int, default=10_000_000, help="draws per (case, T) (default 1e7)")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--csv", default=None, help="also write the table as CSV")
    a = ap.parse_args()
    tool = find_tool(a.tool)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tie_bias_") as tmp:
        for name, logits in CASES:
            L = np.asarray([logits], dtype=np.float32)
            lpath = os.path.join(tmp, "L.npy")
            np.save(lpath, L)
            for T in TEMPS:
                cpath = os.path.join(tmp, "c.npy")
                cmd = [tool, "sample", "--logits", lpath, "--temperature", repr(T), "--seed", str(a.seed),
                       "--samples", str(a.draws), "--counts", cpath]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0 and "temperature" in r.stderr:
                    # beyond the key resolution (docs/NOISE.md): refused, nothing sampled
                    rows.append((name, T, 0, float("nan"), float("nan"), float("nan")))
                    print("%-18s T=%-7g refused (FLS_ERR_TEMPERATURE: |key| >= 2^12)" % (name, T), flush=True)
                    continue
                if r.returncode != 0:
                    sys.exit("tie_bias: %s failed:\n%s" % (" ".join(cmd), r.stderr))
                counts = np.load(cpath)[0].astype(np.float64)
                l64 = L[0].astype(np.float64)
                p0 = 1.0 / np.exp((l64 - l64[0]) / np.float64(np.float32(T))).sum()
                obs = counts[0] / counts.sum()
                z = (obs - p0) / math.sqrt(p0 * (1.0 - p0) / counts.sum())
                rows.append((name, T, int(counts.sum()), obs, p0, z))
                print("%-18s T=%-7g N=%-9d P(token 0) observed %.5f exact %.5f  z = %8.1f%s"
                      % (name, T, counts.sum(), obs, p0, z, "  BIASED" if abs(z) >= 5 else ""), flush=True)
    print()
    print("| case | T | draws | P(token 0) observed | exact | z |")
    print("|---|---|---|---|---|---|")
    for name, T, n, obs, p0, z in rows:
        if n == 0:
            print("| %s | %g | refused | | | |" % (name, T))
            continue
        print("| %s | %g | %d | %.5f | %.5f | %.1f%s |" % (name, T, n, obs, p0, z, " (biased)" if abs(z) >= 5 else ""))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "T", "draws", "observed", "exact", "z", "seed"])
            for name, T, n, obs, p0, z in rows:
                w.writerow([name, T, n, "%.6f" % obs, "%.6f" % p0, "%.2f" % z, a.seed])


if __name__ == "__main__":
    main()
