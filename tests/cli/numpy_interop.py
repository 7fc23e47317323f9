#!/usr/bin/env python3
"""numpy interoperability of the flashsample command line (meson suite 'cli').

Files written by numpy.save / numpy.lib.format.write_array (versions 1.0, 2.0,
3.0; float32 and float16; 1-D and 2-D) are read by `flashsample sample`; what
the tool writes is read back by numpy.load with the promised dtype and shape;
arrays the reader must refuse (Fortran order, big-endian, float64, object
arrays) are refused with a message and no output. Skipped (exit 77) where
numpy is not installed.

usage: numpy_interop.py /path/to/flashsample
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy is not installed: skipping the interoperability test")
    sys.exit(77)

TOOL = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([TOOL, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def save(path, arr, version=None):
    if version is None:
        np.save(path, arr)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)


with tempfile.TemporaryDirectory() as d:
    rng = np.random.default_rng(5)
    B, V, N = 3, 41, 6
    L = (rng.standard_normal((B, V)) * 2).astype(np.float32)
    ref = os.path.join(d, "ref.npy")
    save(os.path.join(d, "L.npy"), L)
    rc, out, err = run("sample", "--logits", os.path.join(d, "L.npy"), "--samples", str(N), "--seed", "9",
                       "--out", ref, "--counts", os.path.join(d, "counts.npy"))
    check(rc == 0, f"numpy.save float32 logits: exit {rc}: {err}")
    tok = np.load(ref)
    check(tok.dtype == np.dtype("<i8") and tok.shape == (B, N), f"tokens dtype/shape {tok.dtype} {tok.shape}")
    check(bool(((tok >= 0) & (tok < V)).all()), "tokens in range")
    counts = np.load(os.path.join(d, "counts.npy"))
    check(counts.dtype == np.dtype("<i8") and counts.shape == (B, V), f"counts dtype/shape {counts.shape}")
    check(bool((counts.sum(axis=1) == N).all()), "counts sum to N per row")
    for b in range(B):
        check(bool((np.bincount(tok[b], minlength=V) == counts[b]).all()), f"counts row {b} = histogram")

    # the same logits through every format version give the same tokens
    for version in [(1, 0), (2, 0), (3, 0)]:
        p = os.path.join(d, f"L{version[0]}.npy")
        save(p, L, version)
        o = os.path.join(d, f"t{version[0]}.npy")
        rc, out, err = run("sample", "--logits", p, "--samples", str(N), "--seed", "9", "--out", o)
        check(rc == 0, f"format {version}: exit {rc}: {err}")
        if rc == 0:
            check(bool((np.load(o) == tok).all()), f"format {version}: same tokens")

    # a strided view is saved in C order by numpy: accepted, same tokens as its copy
    big = np.zeros((B, 2 * V), np.float32)
    big[:, ::2] = L
    save(os.path.join(d, "view.npy"), big[:, ::2])
    rc, out, err = run("sample", "--logits", os.path.join(d, "view.npy"), "--samples", str(N), "--seed", "9",
                       "--out", os.path.join(d, "tv.npy"))
    check(rc == 0 and bool((np.load(os.path.join(d, "tv.npy")) == tok).all()), f"strided view: {err}")

    # float16 logits: widened exactly, so the same tokens as the float32 of the same values
    L16 = L.astype(np.float16)
    save(os.path.join(d, "L16.npy"), L16)
    save(os.path.join(d, "L16as32.npy"), L16.astype(np.float32))
    rc1, _, e1 = run("sample", "--logits", os.path.join(d, "L16.npy"), "--samples", "5", "--out",
                     os.path.join(d, "a.npy"))
    rc2, _, e2 = run("sample", "--logits", os.path.join(d, "L16as32.npy"), "--samples", "5", "--out",
                     os.path.join(d, "b.npy"))
    check(rc1 == 0 and rc2 == 0, f"float16 logits: {e1} {e2}")
    if rc1 == 0 and rc2 == 0:
        check(bool((np.load(os.path.join(d, "a.npy")) == np.load(os.path.join(d, "b.npy"))).all()),
              "float16 logits = their float32 widening")

    # fused: W (V, D) and H (B, D) from numpy, H 1-D for one row; row seeds as uint64 and int64
    D = 13
    W = rng.standard_normal((V, D)).astype(np.float32)
    H = rng.standard_normal((B, D)).astype(np.float32)
    save(os.path.join(d, "W.npy"), W)
    save(os.path.join(d, "H.npy"), H)
    save(os.path.join(d, "h1.npy"), H[1])
    seeds = np.array([3, 2**64 - 1, 7], dtype=np.uint64)
    save(os.path.join(d, "s.npy"), seeds)
    save(os.path.join(d, "s1.npy"), seeds[1:2])
    save(os.path.join(d, "si.npy"), seeds.astype(np.int64) & 0x7FFFFFFFFFFFFFFF)
    rc, _, err = run("sample", "--weights", os.path.join(d, "W.npy"), "--hidden", os.path.join(d, "H.npy"),
                     "--row-seeds", os.path.join(d, "s.npy"), "--samples", "4", "--out", os.path.join(d, "f.npy"))
    check(rc == 0, f"fused with row seeds: {err}")
    rc, _, err = run("sample", "--weights", os.path.join(d, "W.npy"), "--hidden", os.path.join(d, "h1.npy"),
                     "--row-seeds", os.path.join(d, "s1.npy"), "--samples", "4", "--out", os.path.join(d, "f1.npy"))
    check(rc == 0, f"fused, one row: {err}")
    if rc == 0:
        f = np.load(os.path.join(d, "f.npy"))
        f1 = np.load(os.path.join(d, "f1.npy"))
        check(f1.shape == (1, 4) and bool((f1[0] == f[1]).all()), "a row's tokens do not depend on its batch")
    rc, _, err = run("sample", "--weights", os.path.join(d, "W.npy"), "--hidden", os.path.join(d, "H.npy"),
                     "--row-seeds", os.path.join(d, "si.npy"), "--samples", "2")
    check(rc == 0, f"int64 row seeds: {err}")

    # refused: Fortran order, big-endian, float64, int32, object arrays, a pickle
    bad = {
        "fortran.npy": (np.asfortranarray(L), "fortran_order"),
        "big.npy": (L.astype(">f4"), "'>f4'"),
        "f64.npy": (L.astype(np.float64), "'<f8'"),
        "i32.npy": (L.astype(np.int32), "'<i4'"),
        "obj.npy": (np.array([{"a": 1}, None], dtype=object), "'|O'"),
        "rec.npy": (np.zeros(3, dtype=[("x", "<f4"), ("y", "<f4")]), "structured"),
    }
    for name, (arr, msg) in bad.items():
        p = os.path.join(d, name)
        np.save(p, arr, allow_pickle=True)
        o = os.path.join(d, "never.npy")
        rc, out, err = run("sample", "--logits", p, "--out", o)
        check(rc == 1, f"{name}: exit {rc}")
        check(msg in err, f"{name}: message {err!r} lacks {msg!r}")
        check(not os.path.exists(o), f"{name}: output written")

    leftovers = [n for n in os.listdir(d) if ".tmp-" in n]
    check(not leftovers, f"temporary files left: {leftovers}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("numpy interoperability: all checks passed")
