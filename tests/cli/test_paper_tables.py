#!/usr/bin/env python3
"""paper_repro/paper_tables.py on the committed reproduction run (meson suite 'cli').

The committed paper_repro/REPORT.md is what the script makes of the committed CSVs and gallery
JSON (byte for byte: the report is regenerated, never edited by hand); the figures are written; a run without
the peers' CSVs still gives the tables, saying which peers are missing; a folder without
timings is an error (exit 1). Skipped (exit 77) where matplotlib is missing.

usage: test_paper_tables.py /path/to/paper_repro
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    print(f"SKIP: {sys.executable} lacks matplotlib (Debian: python3-matplotlib; bash tools/setup-deps.sh)")
    sys.exit(77)

REPRO = sys.argv[1]
SCRIPT = os.path.join(REPRO, "paper_tables.py")
RUN = os.path.join(REPRO, "results", "repro_h200_2026-12-01")
GALLERY = os.path.join(REPRO, "results", "gallery_h200_2026-12-02.json")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    p = run(RUN, "--out", os.path.join(d, "full"), "--gallery", GALLERY)
    check(p.returncode == 0, f"full run: exit {p.returncode}: {p.stderr}")
    made = open(os.path.join(d, "full", "REPORT.md")).read()
    committed = open(os.path.join(REPRO, "REPORT.md")).read()
    check(made == committed, "paper_repro/REPORT.md differs from what paper_tables.py makes of the committed run")
    for png in ("sweep.png", "speedup.png"):
        f = os.path.join(d, "full", png)
        check(os.path.exists(f) and os.path.getsize(f) > 10000, f"figure {png}")
    for table in ("## Table 4", "## Table 5", "## Table 1", "## Table 9", "FI2 Gumbel", "FlashSampling (Triton)",
                  "## The exactness gallery"):
        check(table in made, f"report lacks {table!r}")

    only = os.path.join(d, "only")
    os.makedirs(only)
    shutil.copy(os.path.join(RUN, "flashsample.csv"), only)
    p = run(only, "--no-figure")
    check(p.returncode == 0, f"flashsample only: exit {p.returncode}: {p.stderr}")
    md = open(os.path.join(only, "REPORT.md")).read()
    check("FlashInfer not measured" in md and "torch peers not measured" in md, "missing peers named")
    check(not os.path.exists(os.path.join(only, "sweep.png")), "--no-figure wrote a figure")

    empty = os.path.join(d, "empty")
    os.makedirs(empty)
    p = run(empty)
    check(p.returncode == 1 and "no timings" in p.stderr, f"empty folder: exit {p.returncode}: {p.stderr}")

    # a run folder that does not exist (a path relative to the wrong place): said, exit 2, nothing made
    p = run(os.path.join(d, "no-such-run"), "--out", os.path.join(d, "out-missing"))
    check(p.returncode == 2 and "is not a folder" in p.stderr and "Traceback" not in p.stderr,
          f"missing run folder: exit {p.returncode}: {p.stderr}")
    check(not os.path.exists(os.path.join(d, "out-missing")), "missing run folder: --out created anyway")

    # run.sh without a GPU: exit 77, saying how to regenerate the report instead, and no results folder left
    if shutil.which("nvidia-smi") is None:
        target = os.path.join(d, "repro_out")
        p = subprocess.run(["bash", os.path.join(REPRO, "run.sh"), target], capture_output=True, text=True)
        check(p.returncode == 77 and "paper_tables.py" in p.stderr, f"run.sh without a GPU: exit {p.returncode}")
        check(not os.path.exists(target), "run.sh without a GPU left its results folder behind")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("paper_tables: the committed report regenerates; figures; missing peers; empty folder refused")
