#!/usr/bin/env python3
"""gallery.py — the exactness gallery: the samplers people run, judged by `flashsample audit`.

    python3 paper_repro/peers/gallery.py draw OUT --tool build/tools/flashsample \
        [--fi-draw build/fi_draw] [--flashsampling .peers/FlashSampling] [--scale 1.0]
    python3 paper_repro/peers/gallery.py table OUT/gallery.json [--md OUT/gallery.md]

`draw` (the GPU machine: torch, Triton, FlashInfer's kernels) builds each case's logits, draws
each sampler's tokens, runs `flashsample audit --logits --tokens` on them and writes
OUT/gallery.json (every audit's JSON, keyed by sampler and case) and OUT/gallery.md. `table`
(CPU only) rebuilds the markdown table from a committed gallery.json.

Samplers, each from its own code, never re-implemented here except where named:
  flashsample-cpu, flashsample-cuda  this library's engines (the control: `flashsample sample`)
  torch-multinomial                  torch.softmax (fp32) then torch.multinomial
  vllm-race                          the exponential race vLLM documents: probs / Exp(1) in fp32,
                                     argmax (written here from that description)
  flashinfer-logits, -probs, -topk, -topp, -minp
                                     FlashInfer's kernels through fi_draw.cu (its pinned headers)
  flashsampling                      FlashSampling's fused Triton kernel (fused_mm_sample_triton),
                                     a pinned copy of its repository, logits placed in a D = 16
                                     bf16 matmul (so its case logits are bf16 values)
Identical rows in one batch stand for independent draws (each sampler's batch rows are
independent streams); the per-row-seed case asks that of the samplers with per-row seeds.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import types

import numpy as np

SEED = 20261202
CPU_KEYS = 2e9  # flashsample-cpu runs the cases of at most this many keys (V x draws)
RACE_KEYS = 2e10  # vllm-race (torch's exponential_ over B x V) draws at most this many keys per case


def bf16_round(a):
    """float32 -> nearest bf16 value (ties to even), as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def case_logits(name, rng):
    """The cases: (logits (B, V) float32, temperature, rule args, draws per row, note)."""
    if name == "deep-tail":
        # 8 head tokens at 0, the rest split evenly over 10, 12, ..., 20 nats below
        V = 4096
        l = np.zeros(V, np.float32)
        depths = np.repeat([-10.0, -12.0, -14.0, -16.0, -18.0, -20.0], (V - 8) // 6 + 1)[: V - 8]
        l[8:] = depths
        return l[None, :], 1.0, {}, 4_000_000, "heads at 0, 4088 tokens 10-20 nats below"
    if name == "ties":
        l = np.zeros(64, np.float32)
        l[1::2] = np.nextafter(np.float32(0.0), np.float32(1.0))  # one ulp above 0: near-ties
        l[::4] = 1.0  # exact ties among the heads
        return l[None, :], 1.0, {}, 1_000_000, "exact ties at 1.0 and 1-ulp near-ties at 0"
    if name == "flat-151936":
        return np.zeros((1, 151936), np.float32), 1.0, {}, 2_000_000, "uniform over 151936 tokens"
    if name == "zipf-T0.7":
        V = 151936
        l = (-1.1 * np.log(1.0 + rng.permutation(V))).astype(np.float32)
        return l[None, :], 0.7, {}, 2_000_000, "l = -1.1 log(rank), T = 0.7"
    if name == "masked":
        l = rng.normal(0.0, 1.5, 1024).astype(np.float32)
        l[rng.random(1024) < 0.5] = -np.inf
        return l[None, :], 1.0, {}, 1_000_000, "N(0, 1.5), half the tokens at -inf"
    if name == "topk-ties":
        l = np.sort(rng.normal(0.0, 1.0, 1024).astype(np.float32))[::-1].copy()
        l[49:52] = l[49]  # ranks 50, 51, 52 tied: the 50th value is shared
        return l[None, :], 1.0, {"top_k": 50}, 1_000_000, "top-k 50, ranks 50-52 tied"
    if name == "topp-0.9":
        l = (-1.1 * np.log(1.0 + rng.permutation(1024))).astype(np.float32)
        return l[None, :], 1.0, {"top_p": 0.9}, 1_000_000, "Zipf, top-p 0.9"
    if name == "minp-0.1":
        l = rng.normal(0.0, 1.5, 1024).astype(np.float32)
        return l[None, :], 1.0, {"min_p": 0.1}, 1_000_000, "N(0, 1.5), min-p 0.1"
    if name == "row-seeds":
        l = rng.normal(0.0, 1.0, 8).astype(np.float32)
        return np.repeat(l[None, :], 16, axis=0), 1.0, {"pairs": True}, 20_000, \
            "16 identical rows, row seeds s + b: rows 2i, 2i+1 must be independent"
    raise ValueError(name)


CASES = ["deep-tail", "ties", "flat-151936", "zipf-T0.7", "masked", "topk-ties", "topp-0.9", "minp-0.1",
         "row-seeds"]


def rule_args(rules):
    a = []
    if "top_k" in rules:
        a += ["--top-k", str(rules["top_k"])]
    if "top_p" in rules:
        a += ["--top-p", repr(rules["top_p"])]
    if "min_p" in rules:
        a += ["--min-p", repr(rules["min_p"])]
    return a


class Draw:
    """The samplers; each returns tokens int64 (B, N) or None (not offered for the case)."""

    def __init__(self, a, tmp):
        self.a, self.tmp = a, tmp
        self.torch = None
        try:
            import torch
            if torch.cuda.is_available():
                self.torch = torch
        except ImportError:
            pass
        self.fs = None
        if a.flashsampling and self.torch is not None:
            sys.path.insert(0, os.path.join(a.flashsampling, "src"))
            for mod in ("nvtx", "flashinfer"):
                if mod not in sys.modules:
                    try:
                        __import__(mod)
                    except ImportError:
                        m = types.ModuleType(mod)
                        m.annotate = lambda *x, **k: (lambda f: f)
                        sys.modules[mod] = m
            from fused_mm_sampling.core import fused_mm_sample_triton
            self.fs = fused_mm_sample_triton

    def names(self):
        n = ["flashsample-cpu", "flashsample-cuda"]
        if self.torch is not None:
            n += ["torch-multinomial", "vllm-race"]
        if self.a.fi_draw:
            n += ["flashinfer-logits", "flashinfer-probs", "flashinfer-topk", "flashinfer-topp", "flashinfer-minp"]
        if self.fs is not None:
            n += ["flashsampling"]
        return n

    def flashsample(self, device, L, T, rules, N, pairs):
        lp = os.path.join(self.tmp, "L.npy")
        tp = os.path.join(self.tmp, "tok.npy")
        np.save(lp, L)
        cmd = [self.a.tool, "sample", "--logits", lp, "--temperature", repr(T), "--samples", str(N), "--out", tp,
               "--seed", str(SEED), "--device", device] + rule_args(rules)
        if pairs:
            sp = os.path.join(self.tmp, "seeds.npy")
            np.save(sp, (SEED + np.arange(L.shape[0])).astype(np.uint64))
            cmd += ["--row-seeds", sp]
        subprocess.run(cmd, check=True, capture_output=True)
        return np.load(tp)

    def rows_batched(self, L, N, R, fn):
        """Draws N per row by batches of R identical copies of the row (independent batch rows)."""
        out = []
        for b in range(L.shape[0]):
            got, parts = 0, []
            while got < N:
                r = min(R, N - got)
                parts.append(fn(np.repeat(L[b : b + 1], r, axis=0)).reshape(-1))
                got += r * (parts[-1].size // r)
            out.append(np.concatenate(parts)[:N])
        return np.stack(out).astype(np.int64)

    def torch_multinomial(self, L, T, N):
        t = self.torch
        g = t.Generator(device="cuda").manual_seed(SEED)
        p = t.softmax(t.tensor(L, device="cuda", dtype=t.float32) / T, dim=-1)
        return t.multinomial(p, N, replacement=True, generator=g).cpu().numpy().astype(np.int64)

    def vllm_race(self, L, T, N):
        t = self.torch
        g = t.Generator(device="cuda").manual_seed(SEED)
        R = max(1, min(4096, (1 << 27) // L.shape[1]))

        def one(rows):
            p = t.softmax(t.tensor(rows, device="cuda", dtype=t.float32) / T, dim=-1)
            q = t.empty_like(p).exponential_(generator=g)
            return p.div(q).argmax(dim=-1).cpu().numpy()

        return self.rows_batched(L, N, R, one)

    def flashinfer(self, kind, L, T, rules, N, pairs):
        if pairs:
            xp = os.path.join(self.tmp, "x.f32")
            tp = os.path.join(self.tmp, "t.i64")
            (L.astype(np.float64) / T).astype(np.float32).tofile(xp)
            param = {"topk": rules.get("top_k", 0), "topp": rules.get("top_p", 1.0), "minp": rules.get("min_p", 0.0)}
            subprocess.run([self.a.fi_draw, kind, xp, str(L.shape[0]), str(L.shape[1]), str(N), str(SEED), tp,
                            repr(param.get(kind, 0)), "--row-seeds"], check=True, capture_output=True)
            return np.fromfile(tp, dtype=np.int64).reshape(L.shape[0], N)
        R = max(1, min(1024, (1 << 26) // L.shape[1]))
        param = {"topk": rules.get("top_k", 0), "topp": rules.get("top_p", 1.0), "minp": rules.get("min_p", 0.0)}
        calls = [0]

        def one(rows):
            xp = os.path.join(self.tmp, "x.f32")
            tp = os.path.join(self.tmp, "t.i64")
            (rows.astype(np.float64) / T).astype(np.float32).tofile(xp)
            n = max(1, N // R)
            calls[0] += 1
            subprocess.run([self.a.fi_draw, kind, xp, str(rows.shape[0]), str(rows.shape[1]), str(n),
                            str(SEED + 7919 * calls[0]), tp, repr(param.get(kind, 0))], check=True, capture_output=True)
            return np.fromfile(tp, dtype=np.int64).reshape(rows.shape[0], n).T

        return self.rows_batched(L, N, R, one)

    def flashsampling(self, L, T, N):
        t = self.torch
        V = L.shape[1]
        R = max(1, min(256, (1 << 26) // V))
        calls = [0]

        def one(rows):
            W = t.zeros((V, 16), dtype=t.bfloat16, device="cuda")
            W[:, 0] = t.tensor(rows[0], device="cuda", dtype=t.float32).to(t.bfloat16)
            H = t.zeros((rows.shape[0], 16), dtype=t.bfloat16, device="cuda")
            H[:, 0] = 1.0
            calls[0] += 1
            s = self.fs(W, H, 1, t.tensor(T, device="cuda", dtype=t.float32), SEED + calls[0])
            return s.reshape(-1).cpu().numpy()

        return self.rows_batched(L, N, R, one)

    def draw(self, name, L, T, rules, N, pairs):
        plain = not any(k in rules for k in ("top_k", "top_p", "min_p"))
        if name == "flashsample-cpu" and L.size * N > CPU_KEYS:
            return None  # the CUDA engine draws the same tokens; the CPU's keys would take minutes
        if name.startswith("flashsample-"):
            return self.flashsample(name.split("-")[1], L, T, rules, N, pairs)
        if pairs and not name.startswith("flashinfer"):
            return None  # no per-row seed to give
        if name == "torch-multinomial":
            return self.torch_multinomial(L, T, N) if plain else None
        if name == "vllm-race":
            return self.vllm_race(L, T, min(N, max(1000, int(RACE_KEYS / L.shape[1])))) if plain else None
        if name.startswith("flashinfer-"):
            kind = name.split("-")[1]
            want = {"topk": "top_k", "topp": "top_p", "minp": "min_p"}.get(kind)
            if (want is None and not plain) or (want is not None and want not in rules):
                return None
            return self.flashinfer(kind, L, T, rules, N, pairs)
        if name == "flashsampling":
            return self.flashsampling(L, T, N) if plain else None
        return None


def audit(tool, tmp, L, T, rules, tokens, pairs):
    lp = os.path.join(tmp, "aL.npy")
    tp = os.path.join(tmp, "aT.npy")
    jp = os.path.join(tmp, "a.json")
    np.save(lp, L)
    np.save(tp, tokens)
    cmd = [tool, "audit", "--logits", lp, "--tokens", tp, "--temperature", repr(T), "--json", jp] + rule_args(rules)
    if pairs:
        cmd.append("--pairs-rows")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1, 3):
        raise RuntimeError("audit failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return json.load(open(jp))


def cell(rep):
    """One table cell: the verdict, and for a failure its worst row."""
    if rep is None:
        return "—"
    if rep.get("error"):
        return "error: " + rep["error"][:60]
    rows = rep["rows"]
    tested = [r for r in rows if not r.get("untested")]
    fails = [r for r in tested if not r["pass"]]
    if not fails:
        best = min((r.get("tv_caught") or math.inf for r in tested), default=math.inf)
        return "pass (%d tests, N %d%s)" % (len(tested), max(r["draws"] for r in rows),
                                           ", TV >= %.2g caught" % best if best < math.inf else "")
    w = min(fails, key=lambda r: r["p"])
    extra = ""
    if w.get("tail_t"):
        extra = ", %d nats: observed %d vs %.1f" % (w["tail_t"], w["observed"], w["expected"])
    return "**FAIL** %s p %.2g%s" % (w["test"], w["p"], extra)


def table(data):
    samplers = data["samplers"]
    lines = ["| case | " + " | ".join(samplers) + " |", "|---|" + "---|" * len(samplers)]
    for c in data["cases"]:
        lines.append("| %s (%s) | " % (c["name"], c["note"]) +
                     " | ".join(cell(c["audits"].get(s)) for s in samplers) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("draw")
    d.add_argument("out")
    d.add_argument("--tool", required=True)
    d.add_argument("--fi-draw", default=None)
    d.add_argument("--flashsampling", default=None)
    d.add_argument("--scale", type=float, default=1.0, help="multiplies every case's draws")
    d.add_argument("--cases", default=",".join(CASES))
    t = sub.add_parser("table")
    t.add_argument("json")
    t.add_argument("--md", default=None)
    a = ap.parse_args()
    if a.cmd == "table":
        md = table(json.load(open(a.json)))
        if a.md:
            open(a.md, "w").write(md)
        sys.stdout.write(md)
        return
    os.makedirs(a.out, exist_ok=True)
    data = {"seed": SEED, "date": time.strftime("%Y-%m-%d"), "cases": []}
    with tempfile.TemporaryDirectory(prefix="gallery_") as tmp:
        dr = Draw(a, tmp)
        data["samplers"] = dr.names()
        for name in a.cases.split(","):
            # each case's own generator: its logits do not depend on which cases run
            L, T, rules, N, note = case_logits(name, np.random.default_rng([SEED, CASES.index(name)]))
            N = max(1000, int(N * a.scale))
            pairs = bool(rules.pop("pairs", False))
            c = {"name": name, "note": note, "T": T, "rules": rules, "draws": N, "audits": {}}
            for s in data["samplers"]:
                t0 = time.time()
                Ls = bf16_round(L) if s == "flashsampling" else L
                try:
                    tok = dr.draw(s, Ls, T, rules, N, pairs)
                    rep = None if tok is None else audit(a.tool, tmp, Ls, T, rules, tok, pairs)
                except Exception as e:  # a sampler that crashes is a finding, reported in its cell
                    rep = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
                c["audits"][s] = rep
                print("gallery: %-12s %-18s %s (%.1f s)" % (name, s, cell(rep), time.time() - t0), flush=True)
            data["cases"].append(c)
            json.dump(data, open(os.path.join(a.out, "gallery.json"), "w"), indent=1)
    md = table(data)
    open(os.path.join(a.out, "gallery.md"), "w").write(md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
