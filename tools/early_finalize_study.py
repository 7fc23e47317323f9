#!/usr/bin/env python3
"""early_finalize_study.py — how much of W early finalization with norm bounds skips.

Builds an LM head W (V, D) and hidden states H (B, D) such that every row's
top token has an exact probability p (softmax(l / T) in double over the
stored float32 values) at temperature T, then samples each row through the
streaming API (fls_stream_*) in chunks of C tokens, in vocabulary order,
skipping a chunk when fls_stream_skip proves from the norm bound
u_c = fls_logit_bound(max_{v in c} ||w_v||, ||h_b||, D) that none of its
tokens can beat the leader. It records the fraction of chunks and of W's
bytes skipped and checks the token against the one-shot fls_sample_fused call
(B = 1 for the row, and the B-row call), which is the exactness contract.

W families (rows are random directions; the leaders are tokens 1 + 97 b,
all in the first chunk, so they are fed before any chunk can be skipped — the
most favourable order):
  a       rows sorted by norm: ||w_v|| = 100^(-v / (V-1)), 1 down to 0.01 (a
          vocabulary ordered by frequency whose frequent tokens have the large
          rows, taken to an extreme): the bound can bite;
  a-mild  the same with a 4x range, ||w_v|| = 4^(-v / (V-1));
  b       i.i.d. N(0, 1/D) entries: every row norm is 1 +- 1/sqrt(2D) (a random
          head, all rows comparable);
  b-aligned  every row of unit norm, and each leader's row exactly along its
          h (cos = 1): the best case for Cauchy-Schwarz with comparable norms.
For a, a-mild and b, H's rows are orthogonal with ||h|| = sqrt(D) (a unit-norm
row's logit then has standard deviation 1 over random directions) and each
leader's row gets a multiple of its h added so that its logit gives p; for
b-aligned the leader's logit is ||h|| and ||h|| is solved for p.

Usage (the bindings from this checkout and a built library):
  FLASHSAMPLE_LIBRARY=build-M7/lib/libflashsample.so PYTHONPATH=python \\
      python3 tools/early_finalize_study.py --csv out.csv
(or `pip install ./python` into a venv). Needs numpy. Exit status 1 when a
stream's token differs from the one-shot call's.
"""
import argparse
import csv
import math
import sys
import time

import numpy as np

import flashsample as fs

FAMILIES = ("a", "a-mild", "b", "b-aligned")


def logsumexp(x):
    m = np.max(x)
    return m + math.log(np.sum(np.exp(x - m)))


def build_w(family, V, D, rng, blk=8192):
    """W (V, D) float32 of the family (before the leaders are set)."""
    W = np.empty((V, D), dtype=np.float32)
    v = np.arange(V, dtype=np.float64)
    if family == "a":
        scale = 100.0 ** (-v / (V - 1))
    elif family == "a-mild":
        scale = 4.0 ** (-v / (V - 1))
    else:
        scale = np.ones(V)
    for a in range(0, V, blk):
        e = min(V, a + blk)
        x = rng.standard_normal((e - a, D), dtype=np.float32)
        if family == "b-aligned":
            x /= np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True).astype(np.float32)
        else:
            x *= np.float32(1.0 / math.sqrt(D))
        x *= scale[a:e, None].astype(np.float32)
        W[a:e] = x
    return W


def exact_logits(W, H64, blk=8192):
    """H W^T in double from the stored values (every product exact in double)."""
    V = W.shape[0]
    L = np.empty((H64.shape[0], V), dtype=np.float64)
    for a in range(0, V, blk):
        e = min(V, a + blk)
        L[:, a:e] = H64 @ W[a:e].astype(np.float64).T
    return L


def norm_up(x):
    """||x|| (float32 row) rounded up to a float32, as the command line does (cli_row_norms)."""
    r = math.sqrt(float(np.dot(x.astype(np.float64), x.astype(np.float64)))) * (1.0 + 2.0**-30)
    f = np.float32(r)
    if float(f) < r:
        f = np.nextafter(f, np.float32(np.inf))
    return float(f)


def set_leaders(W, H64, L0, leaders, p, T, iters=3):
    """Adds to each leader's row of W a multiple of its row's h so that the row's top-token
    probability at T is p (exactly, in double, over the stored floats). Returns the row logits."""
    B = H64.shape[0]
    Lcol = W[leaders].astype(np.float64) @ H64.T  # Lcol[j, b]: leader j's logit in row b
    lp = math.log(p / (1.0 - p))
    for _ in range(iters):
        for b in range(B):
            row = L0[b].copy()
            row[leaders] = Lcol[:, b]
            vb = leaders[b]
            rest = np.delete(row, vb)
            target = T * (lp + logsumexp(rest / T))
            hb = H64[b]
            w = W[vb].astype(np.float64) + (target - row[vb]) * hb / float(hb @ hb)
            W[vb] = w.astype(np.float32)
        Lcol = W[leaders].astype(np.float64) @ H64.T
    L = L0.copy()
    for b in range(B):
        L[b, leaders] = Lcol[:, b]
    return L


def solve_aligned(a, lead, p, T):
    """b-aligned: the scale S of h (h = S q) giving the leader probability p; a = W q (double)."""
    d = np.delete(a - a[lead], lead)  # < 0 for every other token (the leader is aligned)

    def prob(S):
        z = S * d / T
        m = max(0.0, float(np.max(z)))
        return math.exp(-m) / (math.exp(-m) + float(np.sum(np.exp(z - m))))

    lo, hi = 0.0, 1.0
    while prob(hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if prob(mid) < p:
            lo = mid
        else:
            hi = mid
    return hi


def stream_run(ctx, W, H, T, seeds, chunk, cnorms, hnorms, D):
    """One stream over H's rows with early finalization. Returns (tokens, Progress)."""
    B, V = H.shape[0], W.shape[0]
    with ctx.stream(B, V, temperature=T, row_seeds=seeds) as st:
        for c, a in enumerate(range(0, V, chunk)):
            e = min(V, a + chunk)
            upper = np.array([fs.logit_bound(float(cnorms[c]), hnorms[b], D) for b in range(B)],
                             dtype=np.float32)
            if st.skip(a, e - a, upper):
                continue
            st.feed_fused(W[a:e], H, a)
        pr = st.progress()
        tok = st.finalize().tokens[:, 0].copy()
    return tok, pr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--V", type=int, default=151936)
    ap.add_argument("--D", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=8, help="rows of H (B); default 8")
    ap.add_argument("--seeds", type=int, default=2, help="noise seeds per case; default 2")
    ap.add_argument("--chunks", default="1024,4096,16384")
    ap.add_argument("--ps", default="0.5,0.9,0.99")
    ap.add_argument("--Ts", default="0.3,0.7,1.0")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--save-npy", default=None,
                    help="DIR: also write W.npy, H.npy, seeds.npy of each family's last case (the last family's "
                    "survive) for `flashsample sample --early-finalize`")
    args = ap.parse_args()
    V, D, B = args.V, args.D, args.rows
    chunks = [int(x) for x in args.chunks.split(",")]
    ps = [float(x) for x in args.ps.split(",")]
    Ts = [float(x) for x in args.Ts.split(",")]
    fams = args.families.split(",")
    for f in fams:
        if f not in FAMILIES:
            sys.exit("unknown family %s (%s)" % (f, ", ".join(FAMILIES)))
    leaders = np.array([1 + 97 * b for b in range(B)], dtype=np.int64)
    assert leaders[-1] < min(chunks), "every leader must be in the first chunk"
    ctx = fs.Context(threads=args.threads)
    print("flashsample %s (%s), %d threads, simd %s; V=%d D=%d B=%d, chunks %s, W float32"
          % (fs.version(), fs.library_path(), ctx.threads, ctx.simd, V, D, B, chunks), flush=True)
    cols = ["family", "p_target", "T", "chunk", "B", "seed", "row", "p_exact", "lead_logit",
            "logit_std", "bound_median", "margin_nats_median", "chunks_total", "chunks_skipped",
            "frac_chunks_skipped", "frac_W_bytes_skipped", "token", "leader_won",
            "identical_to_oneshot"]
    out = []
    mismatches = 0
    t_start = time.time()
    for fam in fams:
        rng = np.random.default_rng(20261201 + FAMILIES.index(fam))
        t0 = time.time()
        W = build_w(fam, V, D, rng)
        Q, _ = np.linalg.qr(rng.standard_normal((D, B)))
        cn = {C: fs.chunk_max_norms(W, C) for C in chunks}
        if fam == "b-aligned":
            for b in range(B):
                W[leaders[b]] = Q[:, b].astype(np.float32)
            A = exact_logits(W, Q.T)  # the logits for unit h (the direction q_b)
        else:
            H = np.ascontiguousarray((math.sqrt(D) * Q.T).astype(np.float32))
            H64 = H.astype(np.float64)
            L0 = exact_logits(W, H64)
            Wlead0 = W[leaders].copy()
        print("family %s: W built, norms and base logits in %.1f s" % (fam, time.time() - t0),
              flush=True)
        for p in ps:
            for T in Ts:
                if fam == "b-aligned":
                    S = [solve_aligned(A[b], leaders[b], p, T) for b in range(B)]
                    H = np.ascontiguousarray((np.array(S)[:, None] * Q.T).astype(np.float32))
                    H64 = H.astype(np.float64)
                    L = exact_logits(W, H64)
                else:
                    W[leaders] = Wlead0
                    L = set_leaders(W, H64, L0, leaders, p, T)
                pex = np.array([math.exp(L[b, leaders[b]] / T - logsumexp(L[b] / T)) for b in range(B)])
                assert all(int(np.argmax(L[b])) == leaders[b] for b in range(B))
                hn = [norm_up(H[b]) for b in range(B)]
                std = L.std(axis=1)
                print("  p=%.2f T=%.1f: exact top-token p per row in [%.9f, %.9f]; leader logit %.2f..%.2f,"
                      " logit std %.3f..%.3f, ||h|| %.1f..%.1f"
                      % (p, T, pex.min(), pex.max(), min(L[b, leaders[b]] for b in range(B)),
                         max(L[b, leaders[b]] for b in range(B)), std.min(), std.max(), min(hn), max(hn)),
                      flush=True)
                for s in range(args.seeds):
                    seeds = np.array([1000003 * (s + 1) + 7919 * b for b in range(B)], dtype=np.uint64)
                    one_all = ctx.sample_fused(W, H, temperature=T, row_seeds=seeds).tokens[:, 0]
                    one = np.array([ctx.sample_fused(W, H[b:b + 1], temperature=T,
                                                     row_seeds=seeds[b:b + 1]).tokens[0, 0]
                                    for b in range(B)])
                    for C in chunks:
                        nch = (V + C - 1) // C
                        bounds = [np.array([fs.logit_bound(float(cn[C][c]), hn[b], D) for c in range(1, nch)])
                                  for b in range(B)]
                        for b in range(-1, B):
                            if b < 0:  # all rows in one stream
                                tok, pr = stream_run(ctx, W, H, T, seeds, C, cn[C], hn, D)
                                ident = bool(np.array_equal(tok, one_all) and np.array_equal(tok, one))
                                rowname, Bn = "all", B
                                pe = float(pex.mean())
                                ll = float(np.mean([L[r, leaders[r]] for r in range(B)]))
                                sd = float(std.mean())
                                bm = float(np.mean([np.median(x) for x in bounds]))
                                mg = float(np.mean([np.median((L[r, leaders[r]] - x) / T)
                                                    for r, x in enumerate(bounds)]))
                                won = float(np.mean(tok == leaders))
                                tokstr = " ".join(str(int(t)) for t in tok)
                            else:
                                tk, pr = stream_run(ctx, W, H[b:b + 1], T, seeds[b:b + 1], C, cn[C], hn[b:b + 1], D)
                                ident = int(tk[0]) == int(one[b]) == int(one_all[b])
                                rowname, Bn = str(b), 1
                                pe = float(pex[b])
                                ll = float(L[b, leaders[b]])
                                sd = float(std[b])
                                bm = float(np.median(bounds[b]))
                                mg = float(np.median((ll - bounds[b]) / T))
                                won = float(tk[0] == leaders[b])
                                tokstr = str(int(tk[0]))
                            if not ident:
                                mismatches += 1
                                print("MISMATCH family %s p=%g T=%g seed %d chunk %d row %s: stream %s, one-shot"
                                      " B=1 %s, one-shot B=%d %s" % (fam, p, T, s, C, rowname, tokstr,
                                                                     one.tolist(), B, one_all.tolist()),
                                      flush=True)
                            out.append([fam, p, T, C, Bn, s, rowname, "%.9f" % pe, "%.4f" % ll, "%.4f" % sd,
                                        "%.4f" % bm, "%.3f" % mg, pr.chunks_fed + pr.chunks_skipped,
                                        pr.chunks_skipped,
                                        "%.6f" % (pr.chunks_skipped / (pr.chunks_fed + pr.chunks_skipped)),
                                        "%.6f" % (pr.tokens_skipped / V), tokstr, "%.3f" % won,
                                        "yes" if ident else "no"])
        if args.save_npy:  # the family's last case, noise seed 0 (for the command line's check)
            import os

            os.makedirs(args.save_npy, exist_ok=True)
            np.save(os.path.join(args.save_npy, "W.npy"), W)
            np.save(os.path.join(args.save_npy, "H.npy"), H)
            np.save(os.path.join(args.save_npy, "seeds.npy"),
                    np.array([1000003 + 7919 * b for b in range(B)], dtype=np.uint64))
            print("  wrote W.npy, H.npy, seeds.npy (p=%g, T=%g, seed 0) to %s" % (ps[-1], Ts[-1], args.save_npy))
        del W
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        w.writerows(out)
    # summary: mean fraction of W bytes skipped, B = 1 runs, per family, p, T and chunk
    print("\nmean fraction of W bytes skipped (B = 1, %d rows x %d seeds each; [B = %d stream]);"
          " identical to the one-shot call: %d/%d runs" % (B, args.seeds, B, len(out) - mismatches, len(out)))
    for fam in fams:
        print("family %s" % fam)
        print("  %5s %4s " % ("p", "T") + " ".join("%16s" % ("C=%d" % C) for C in chunks)
              + "  leader won  margin(nats)")
        for p in ps:
            for T in Ts:
                cells = []
                for C in chunks:
                    r1 = [float(r[15]) for r in out if r[0] == fam and r[1] == p and r[2] == T and r[3] == C
                          and r[4] == 1]
                    rb = [float(r[15]) for r in out if r[0] == fam and r[1] == p and r[2] == T and r[3] == C
                          and r[4] == B]
                    cells.append("%7.4f [%6.4f]" % (np.mean(r1), np.mean(rb)))
                won = [float(r[17]) for r in out if r[0] == fam and r[1] == p and r[2] == T and r[4] == 1
                       and r[3] == chunks[0]]
                mg = [float(r[11]) for r in out if r[0] == fam and r[1] == p and r[2] == T and r[4] == 1
                      and r[3] == chunks[len(chunks) // 2]]
                print("  %5.2f %4.1f " % (p, T) + " ".join("%16s" % c for c in cells)
                      + "  %9.3f  %8.1f" % (np.mean(won), np.median(mg)))
    print("total %.0f s" % (time.time() - t_start))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
