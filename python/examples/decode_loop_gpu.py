"""A decode loop on the GPU: one step (the fused sample with a grammar's bitmask, a logit bias,
repetition / presence / frequency penalties and top-k 50, then the next hidden state) captured in
a CUDA graph through ``flashsample.torch_ops`` and replayed with each step's values written into
the captured tensors. The host runs the grammar between steps, as a serving engine's grammar
backend does.

    python3 python/examples/decode_loop_gpu.py [--rows 64] [--vocab 151936] [--dim 4096] [--steps 16]

Needs torch with CUDA and flashsample built with its CUDA engine (FLASHSAMPLE_CUDA=1 pip install
./python, or FLASHSAMPLE_LIBRARY=build/lib/libflashsample.so). It checks that every replay gives
the tokens of an eager call on the same inputs and that every row's text is in the grammar, prints
the first rows' tokens with their log-probabilities, then times one step (graph replays, CUDA
events) with and without the mask, bias and penalties. The synthetic LM head is bf16 random; the
toy grammar (a JSON list of up to four integers) lives in its first 14 tokens and every other
token is disallowed, so the mask removes nearly the whole vocabulary, head included.
"""

import argparse
import json
import sys

import numpy as np

import flashsample as fs
from flashsample import torch_ops

EOS, OPEN, CLOSE, COMMA = 0, 1, 2, 3
DIGITS = list(range(4, 14))
NAMES = ["<eos>", "[", "]", ","] + list("0123456789")

# grammar states: 0 before '[', 1 after '[' (a digit or ']'), 2 after ',' (a digit),
# 3 + k inside a number of k + 1 digits (k < 3), 6 after a leading zero, 7 done
# (only <eos>); items counted apart (at most 4)


def allowed(state, items):
    if state == 0:
        return [OPEN]
    if state == 1:
        return DIGITS + [CLOSE]
    if state == 2:
        return DIGITS
    if state == 7:
        return [EOS]
    more = [COMMA] if items + 1 < 4 else []
    if state in (3, 4):
        return DIGITS + [CLOSE] + more
    return [CLOSE] + more  # a third digit or a leading zero ends the number


def advance(state, items, tok):
    if tok == OPEN:
        return 1, items
    if tok == COMMA:
        return 2, items + 1
    if tok in (CLOSE, EOS):
        return 7, items
    if state in (1, 2):
        return (6 if tok == DIGITS[0] else 3), items
    return state + 1, items


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--reps", type=int, default=50, help="timed replays per variant")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("decode_loop_gpu: needs torch (with CUDA)")
        return 2
    if not torch.cuda.is_available() or not fs.cuda_available():
        print("decode_loop_gpu: needs a GPU and flashsample's CUDA engine (cuda_built=%s)" % fs.cuda_built())
        return 2
    B, V, D = a.rows, a.vocab, a.dim
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(20261205)
    W = (torch.randn(V, D, device=dev, generator=g) / D**0.5).to(torch.bfloat16)
    A = torch.randn(D, D, device=dev, generator=g) * (0.9 / D**0.5)
    E = torch.randn(V, D, device=dev, generator=g)
    words = (V + 31) // 32
    S = a.steps + 4  # seen list: the prompt's tokens and every generated one (unique ids)

    # the captured tensors: every value a step reads
    st = dict(
        hidden=torch.tanh(E[OPEN].expand(B, D).contiguous()).to(torch.bfloat16),
        row_seeds=torch.from_numpy(fs.row_seed(7, np.arange(B, dtype=np.uint64)).view(np.int64)).to(dev),
        row_offsets=torch.zeros(B, dtype=torch.int64, device=dev),
        temperature=torch.full((B,), 0.8, device=dev),
        allowed_bitmask=torch.zeros(B, words, dtype=torch.int32, device=dev),
        logit_bias_ids=torch.full((B, 1), CLOSE, dtype=torch.int64, device=dev),
        logit_bias_values=torch.linspace(-1.0, 2.0, B, device=dev).reshape(B, 1),
        seen_ids=torch.full((B, S), -1, dtype=torch.int64, device=dev),
        seen_counts=torch.zeros(B, S, dtype=torch.int32, device=dev),
        repetition_penalty=torch.full((B,), 1.2, device=dev),
        presence_penalty=torch.full((B,), 0.4, device=dev),
        frequency_penalty=torch.full((B,), 0.2, device=dev),
    )

    def step(mods=True):
        kw = {k: v for k, v in st.items() if k != "hidden"}
        if not mods:
            for k in ("allowed_bitmask", "logit_bias_ids", "logit_bias_values", "seen_ids", "seen_counts"):
                kw.pop(k)
            for k in ("repetition_penalty", "presence_penalty", "frequency_penalty"):
                kw[k] = {"repetition_penalty": 1.0}.get(k, 0.0)
        tok, lp = torch_ops.sample_fused(W, st["hidden"], top_k=50, return_logprobs=True, **kw)
        nxt = torch.tanh(st["hidden"].float() @ A.T + E[tok[:, 0]]).to(torch.bfloat16)
        return tok, lp, nxt

    def capture(mods):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step(mods)  # eager first: the context and its workspace exist before the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=s):
                out = step(mods)
        torch.cuda.synchronize()
        return graph, out

    states = [(0, 0)] * B
    seen = [dict() for _ in range(B)]

    def host_update():
        m = np.zeros((B, words * 32), dtype=bool)
        for b, (s_, it) in enumerate(states):
            m[b, allowed(s_, it)] = True
        packed = (m.reshape(B, words, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(2)
        st["allowed_bitmask"].copy_(torch.from_numpy(packed.astype(np.uint32).view(np.int32)))
        ids = np.full((B, S), -1, dtype=np.int64)
        cnt = np.zeros((B, S), dtype=np.int32)
        for b in range(B):
            for i, (v, c) in enumerate(sorted(seen[b].items())):
                ids[b, i], cnt[b, i] = v, c
        st["seen_ids"].copy_(torch.from_numpy(ids))
        st["seen_counts"].copy_(torch.from_numpy(cnt))

    host_update()
    graph, (g_tok, g_lp, g_next) = capture(True)
    toks, lps, mism = [], [], 0
    for t in range(a.steps):
        st["row_offsets"].fill_(t)
        host_update()
        graph.replay()
        torch.cuda.synchronize()
        tok, lp = g_tok[:, 0].cpu().numpy(), g_lp[:, 0].cpu().numpy()
        e_tok, _, _ = step(True)  # eager, same inputs: the same tokens
        mism += int((e_tok[:, 0].cpu().numpy() != tok).sum())
        toks.append(tok)
        lps.append(lp)
        for b in range(B):
            states[b] = advance(*states[b], int(tok[b]))
            seen[b][int(tok[b])] = seen[b].get(int(tok[b]), 0) + 1
        st["hidden"].copy_(g_next)
    toks, lps = np.array(toks).T, np.array(lps).T
    bad = []
    for b in range(B):
        n = next((i + 1 for i, v in enumerate(toks[b]) if v in (CLOSE, EOS)), len(toks[b]))
        text = "".join(NAMES[v] for v in toks[b][:n])
        if b < 4:
            print("row %2d: %-20s %s" % (b, text, " ".join("%s:%.2f" % (NAMES[v], x) for v, x in zip(toks[b][:n], lps[b][:n]))))
        try:
            ok = isinstance(json.loads(text), list)
        except ValueError:
            ok = n == len(toks[b]) and all(v < 14 for v in toks[b])  # unfinished within --steps
        bad += [] if ok else [(b, text)]
    print("graph replays vs eager calls: %d of %d tokens differ" % (mism, toks.size))
    print("grammar: %d of %d rows outside it%s" % (len(bad), B, (": %s" % bad[:3]) if bad else ""))

    # the cost of one step: replays of the captured step, with and without mask, bias, penalties
    times = {}
    for mods in (False, True):
        graph_v, _ = capture(mods)
        for _ in range(10):
            graph_v.replay()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * a.reps)]
        for i in range(a.reps):
            ev[2 * i].record()
            graph_v.replay()
            ev[2 * i + 1].record()
        torch.cuda.synchronize()
        times[mods] = float(np.median([ev[2 * i].elapsed_time(ev[2 * i + 1]) for i in range(a.reps)]))
    print("one step (B=%d, V=%d, D=%d, bf16, top-k 50, graph replay, median of %d): plain %.3f ms, "
          "with mask + bias + penalties %.3f ms (%.3fx)" % (B, V, D, a.reps, times[False], times[True],
                                                          times[True] / times[False]))
    return 1 if mism or bad else 0


if __name__ == "__main__":
    sys.exit(main())
