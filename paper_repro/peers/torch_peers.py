#!/usr/bin/env python3
"""The paper's PyTorch and Triton baselines, timed on this GPU.

    python3 paper_repro/peers/torch_peers.py CSV --shapes 4096:151936,8192:128256 \
        --batches 1,2,4,...,256 [--flashsampling DIR]

Methods (bf16 W of V x D and H of B x D, T = 0.7, one sample per row), one CSV row each per
(shape, B), the median of triton.testing.do_bench (25 ms warm-up, 100 ms timed):
  torch_matmul        H @ W.T alone (torch's cuBLAS call): the matmul-only time
  multinomial         the paper's baseline: torch.compile'd matmul, fp32 logits / T, softmax,
                      torch.multinomial (compiled once with a dynamic batch)
  gumbel_eager        matmul, logits / T + Gumbel noise from torch.rand, argmax (eager)
  flashsampling       FlashSampling's fused Triton kernel (fused_mm_sample_triton) from a pinned
                      copy of its public repository (DIR/src/fused_mm_sampling; never part of this
                      repository); skipped, saying so, without DIR
  flashsampling_logits  the same kernel also storing the fp32 logits (return_logits=True): the
                      paper's Table 9 ablation
"""

import argparse
import csv
import datetime
import os
import sys
import time
import types


def stub_modules():
    """FlashSampling's core.py imports flashinfer and nvtx at the top; its Triton kernel needs
    neither. Stand-ins that do nothing let the kernel be imported where they are absent."""
    if "nvtx" not in sys.modules:
        try:
            import nvtx  # noqa: F401
        except ImportError:
            m = types.ModuleType("nvtx")
            m.annotate = lambda *a, **k: (lambda f: f)
            sys.modules["nvtx"] = m
    if "flashinfer" not in sys.modules:
        try:
            import flashinfer  # noqa: F401
        except ImportError:
            sys.modules["flashinfer"] = types.ModuleType("flashinfer")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--shapes", default="4096:151936,8192:128256")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--flashsampling", default=None, help="a pinned copy of FlashSampling's repository")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds; methods past it are skipped")
    ap.add_argument("--methods", default=None,
                    help="comma-separated subset of torch_matmul, multinomial, gumbel_eager, flashsampling, "
                    "flashsampling_logits (default: all)")
    a = ap.parse_args()
    t0 = time.time()

    import torch
    import triton

    if not torch.cuda.is_available():
        print("torch_peers: skipped: no CUDA device")
        return 0
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    date = datetime.date.today().isoformat()
    T = a.temperature
    temp = torch.tensor(T, device=dev)
    shapes = [tuple(int(x) for x in s.split(":")) for s in a.shapes.split(",")]
    batches = [int(b) for b in a.batches.split(",")]

    def sample_multinomial(W, H, temperature):
        logits = (H @ W.T).float() / temperature
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, replacement=True)

    multinomial = torch.compile(sample_multinomial, dynamic=True, fullgraph=True)

    def gumbel_eager(W, H, temperature):
        logits = (H @ W.T).float() / temperature
        u = torch.rand_like(logits)
        return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)

    fs = None
    if a.flashsampling:
        src = os.path.join(a.flashsampling, "src")
        if os.path.isdir(os.path.join(src, "fused_mm_sampling")):
            stub_modules()
            sys.path.insert(0, src)
            try:
                from fused_mm_sampling.core import fused_mm_sample_triton as fs
            except Exception as e:  # report and go on: the other peers still run
                print(f"torch_peers: FlashSampling not importable ({type(e).__name__}: {e}); skipped")
        else:
            print(f"torch_peers: no {src}/fused_mm_sampling; FlashSampling skipped")
    else:
        print("torch_peers: FlashSampling skipped (no --flashsampling DIR: a pinned copy of its repository)")

    rows = []
    out = open(a.csv, "w", newline="")
    w = csv.writer(out)
    w.writerow(["method", "D", "V", "B", "median_ms", "date", "device"])
    seed = 0
    for D, V in shapes:
        g = torch.Generator(device=dev).manual_seed(1)
        W = (torch.rand((V, D), device=dev, generator=g, dtype=torch.float32) - 0.5).mul_(0.2).to(torch.bfloat16)
        for B in batches:
            H = (torch.rand((B, D), device=dev, generator=g, dtype=torch.float32) - 0.5).mul_(2.0).to(torch.bfloat16)
            methods = [
                ("torch_matmul", lambda: H @ W.T),
                ("multinomial", lambda: multinomial(W, H, temp)),
                ("gumbel_eager", lambda: gumbel_eager(W, H, temp)),
            ]
            if fs is not None:
                methods.append(("flashsampling", lambda: fs(W, H, 1, temp, seed)))
                methods.append(("flashsampling_logits", lambda: fs(W, H, 1, temp, seed, return_logits=True)))
            if a.methods:
                methods = [m for m in methods if m[0] in a.methods.split(",")]
            for mname, fn in methods:
                if time.time() - t0 > a.deadline:
                    print(f"torch_peers: deadline reached; {mname} D={D} B={B} skipped")
                    continue
                try:
                    fn()
                    torch.cuda.synchronize()
                    ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                except Exception as e:
                    print(f"torch_peers: {mname} D={D} V={V} B={B} failed: {type(e).__name__}: {e}")
                    continue
                w.writerow([mname, D, V, B, f"{ms:.5f}", date, name])
                out.flush()
                rows.append((mname, D, V, B, ms))
                print(f"  D={D} V={V} B={B:4d} {mname:22s} {ms:.4f} ms  ({time.time() - t0:.0f} s)", flush=True)
            del H
        del W
        torch.cuda.empty_cache()
    out.close()
    print(f"torch_peers: {len(rows)} timings in {time.time() - t0:.0f} s -> {a.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
