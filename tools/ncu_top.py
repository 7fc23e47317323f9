#!/usr/bin/env python3
"""The SASS instructions where a kernel's warps stall most, from Nsight Compute.

    ncu --import REPORT.ncu-rep --page source --print-source sass --csv > SRC.csv
    python3 tools/ncu_top.py SRC.csv [N]

Prints the stall samples summed per reason over the kernel, then the N instructions (default
40) with the most warp-stall samples: address, samples, times executed, the instruction and
its three leading stall reasons. The execution count tells the roles apart in the wgmma
kernel: per k-block (the MMA warps' waits for a stage), per tile and sampling warp (their
waits for a logits buffer), per (row, tile) call (the sampler's own work). tools/gpu-check.sh
writes ncu_top_ENGINE.txt with it where FLS_GPU_NCU is set.
"""
import csv
import sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return None


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = list(csv.reader(open(sys.argv[1], errors="replace")))
    n = int(sys.argv[2]) if len(sys.argv) == 3 else 40
    hi = next((i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)), None)
    if hi is None:
        print(f"ncu_top: no 'Source' column in {sys.argv[1]}", file=sys.stderr)
        return 1
    h = rows[hi]
    col = lambda pred: next((i for i, c in enumerate(h) if pred(c.strip())), None)
    src, addr = col(lambda c: c == "Source"), col(lambda c: "Address" in c)
    tot = col(lambda c: c.startswith("Warp Stall Sampling (All"))
    ex = col(lambda c: c.startswith("Instructions Executed"))
    if tot is None:
        print("ncu_top: no warp-stall sampling column (profile with --set full)", file=sys.stderr)
        return 1
    reasons = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
    data = [r for r in rows[hi + 1:] if len(r) == len(h)]
    total = sum(num(r[tot]) or 0 for r in data)
    print(f"{len(data)} instructions, {total:.0f} warp-stall samples")
    agg = sorted(((sum(num(r[i]) or 0 for r in data), h[i]) for i in reasons), reverse=True)
    print("by reason: " + ", ".join(f"{k} {v:.0f}" for v, k in agg if v))
    data.sort(key=lambda r: -(num(r[tot]) or 0))
    for r in data[:n]:
        top = sorted(((num(r[i]) or 0, h[i]) for i in reasons), reverse=True)[:3]
        print(f"{r[addr] if addr is not None else '':>16} {num(r[tot]) or 0:7.0f} "
              f"x{r[ex] if ex is not None else '?':>9} {r[src].strip()[:64]:64s} "
              + " ".join(f"{k}={v:.0f}" for v, k in top if v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
