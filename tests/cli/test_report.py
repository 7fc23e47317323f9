#!/usr/bin/env python3
"""paper_repro/report.py on the committed CSVs (meson suite 'cli').

The headline table holds only fused and its references, the components go
to the breakdown table; --out writes the markdown and the figure, for one CSV
and for several; without matplotlib --out fails (exit 1) and writes nothing,
--no-figure writes the tables. Skipped (exit 77) where matplotlib is missing.

usage: test_report.py /path/to/report.py /path/to/results
"""
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    print(f"SKIP: {sys.executable} lacks matplotlib (Debian: python3-matplotlib; bash tools/setup-deps.sh)")
    sys.exit(77)

REPORT, RESULTS = sys.argv[1], sys.argv[2]
CPU = os.path.join(RESULTS, "cpu_bench_epyc-2core_2026-11-29_final.csv")
GPU = os.path.join(RESULTS, "gpu_bench_h200_2026-11-29_v8.csv")
GPU_ALL = os.path.join(RESULTS, "gpu_bench_h200_2026-11-29_v8_run6.csv")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args, env=None):
    return subprocess.run([sys.executable, REPORT, *args], capture_output=True, text=True, env=env)


with tempfile.TemporaryDirectory() as d:
    p = run(GPU_ALL, "--out", os.path.join(d, "one"))
    check(p.returncode == 0, f"one CSV: exit {p.returncode}: {p.stderr}")
    check(os.path.getsize(os.path.join(d, "one.png")) > 10000, "one CSV: a figure")
    md = open(os.path.join(d, "one.md")).read()
    head, _, breakdown = md.partition("## Breakdown")
    check("| fused/cuBLAS |" in head and "| fused |" in head, "headline has fused and fused/cuBLAS")
    for comp in ("wgmma_gemm_only", "chunked_gemms_only", "logits_sampler", "fused_wgmma", "fused_chunked"):
        check(comp not in head, f"component {comp} in the headline")
        check(comp in breakdown, f"component {comp} missing from the breakdown")

    p = run(CPU, GPU, "--out", os.path.join(d, "two"))
    check(p.returncode == 0, f"two CSVs: exit {p.returncode}: {p.stderr}")
    check(os.path.exists(os.path.join(d, "two.png")), "two CSVs: a figure")

    # matplotlib missing: a failure, and nothing written
    fake = os.path.join(d, "fake")
    os.makedirs(os.path.join(fake, "matplotlib"))
    with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('No module named matplotlib (simulated)')\n")
    env = dict(os.environ, PYTHONPATH=fake)
    p = run(CPU, "--out", os.path.join(d, "none"), env=env)
    check(p.returncode == 1 and "matplotlib" in p.stderr, f"without matplotlib: exit {p.returncode}: {p.stderr}")
    check(not os.path.exists(os.path.join(d, "none.md")), "without matplotlib: tables written anyway")
    p = run(CPU, "--out", os.path.join(d, "tables"), "--no-figure", env=env)
    check(p.returncode == 0 and os.path.exists(os.path.join(d, "tables.md")), f"--no-figure: {p.stderr}")

    # --out into a folder that does not exist: a message, no traceback
    p = run(CPU, "--out", os.path.join(d, "no-such-dir", "x"))
    check(p.returncode != 0 and "does not exist" in p.stderr and "Traceback" not in p.stderr,
          f"--out into a missing folder: exit {p.returncode}: {p.stderr}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("report.py: all checks passed")
