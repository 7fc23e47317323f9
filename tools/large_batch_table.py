#!/usr/bin/env python3
"""The large-batch table of docs/PERF.md from one run's CSVs.

    python3 tools/large_batch_table.py DIR

DIR holds flashsample.csv (`flashsample bench --device cuda`, with the engines
fused_wgmma, fused_wgmma_mf, wgmma_gemm_only, fused_grouped and the rule engines
rule_minp005, rule_topk50, rule_k50_p09, rule_wr4) and, optionally, torch.csv
(paper_repro/peers/torch_peers.py: torch_matmul, flashsampling). Prints, per shape and B,
the times in ms and the ratios the large-batch targets are stated in: the fused call
(the dispatcher's pick) over the best matmul-only time (cuBLAS eager or graph, or torch's
H @ W.T), the min-first scheme and the grouped method over the best matmul and the fused
call, FlashSampling's Triton kernel over the fused call (above 1: ours is faster), and
each rule over the fused call. A cell with no timing prints "-".
"""
import csv
import os
import sys


def load(path, key_engine):
    t = {}
    if not os.path.exists(path):
        return t
    for r in csv.DictReader(open(path)):
        eng = r[key_engine]
        if eng == "copy":
            continue
        t[(eng, int(r["D"]), int(r["V"]), int(r["B"]))] = float(r["median_ms"])
    return t


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    d = sys.argv[1]
    fs = load(os.path.join(d, "flashsample.csv"), "engine")
    tp = load(os.path.join(d, "torch.csv"), "method")
    if not fs:
        print(f"large_batch_table: no {d}/flashsample.csv", file=sys.stderr)
        return 1
    shapes = sorted({(k[1], k[2]) for k in fs})
    ms = lambda x: "-" if x is None else f"{x:.3f}"
    rt = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}"
    cols = ["D, V", "B", "matmul best", "mainloop", "fused", "fused / matmul", "min-first / matmul",
            "grouped / matmul", "FlashSampling / fused", "min-p / fused", "top-k 50 / fused",
            "k50 + p0.9 / fused", "w/o repl. K=4 / fused"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for D, V in shapes:
        for B in sorted({k[3] for k in fs if k[1:3] == (D, V)}):
            g = lambda e: fs.get((e, D, V, B))
            best = min(x for x in (g("cublas"), g("cublas_graph"), tp.get(("torch_matmul", D, V, B))) if x)
            f = g("fused")
            cells = [f"{D}, {V}", str(B), ms(best), ms(g("wgmma_gemm_only")), ms(f), rt(f, best),
                     rt(g("fused_wgmma_mf"), best), rt(g("fused_grouped"), best),
                     rt(tp.get(("flashsampling", D, V, B)), f)]
            cells += [rt(g(e), f) for e in ("rule_minp005", "rule_topk50", "rule_k50_p09", "rule_wr4")]
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
