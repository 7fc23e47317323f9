#!/usr/bin/env python3
"""Executes every notebook of notebooks/ (meson suites 'cli' and 'notebooks').

Each *.ipynb runs top to bottom with `jupyter nbconvert --to notebook --execute`
into a temporary folder (the notebooks in the tree are not touched), with
FLASHSAMPLE_TOOL naming the freshly built command line. Any cell error fails the
test, and its traceback is printed. Skipped (exit 77, saying why) where
nbconvert, a Jupyter kernel, numpy or matplotlib is missing.

usage: run_notebooks.py /path/to/flashsample /path/to/notebooks
"""
import glob
import os
import re
import subprocess
import sys
import tempfile
import time


def skip(why):
    print(f"SKIP: {why}; install them with: bash tools/setup-deps.sh "
          "(Debian: python3-numpy python3-matplotlib python3-nbconvert python3-ipykernel)")
    sys.exit(77)


def main():
    tool, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    missing = []
    for mod in ("nbconvert", "nbformat", "ipykernel", "numpy", "matplotlib"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        skip(f"{sys.executable} lacks {', '.join(missing)}")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        skip("no Jupyter kernel 'python3' is installed")
    kernel_python = spec.argv[0]
    probe = subprocess.run([kernel_python, "-c", "import numpy, matplotlib"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip(f"the Jupyter kernel's python ({kernel_python}) cannot import numpy and matplotlib")

    notebooks = sorted(glob.glob(os.path.join(folder, "*.ipynb")))
    if not notebooks:
        print(f"FAIL: no notebooks in {folder}")
        return 1
    env = dict(os.environ, FLASHSAMPLE_TOOL=tool, MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1")
    failed = []
    with tempfile.TemporaryDirectory(prefix="fls_notebooks_") as out:
        for nb in notebooks:
            name = os.path.basename(nb)
            t0 = time.monotonic()
            # cwd: the notebook's own folder, as when a user opens it
            p = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                                "--ExecutePreprocessor.timeout=120", "--ExecutePreprocessor.kernel_name=python3",
                                "--output-dir", out, nb],
                               cwd=folder, env=env, capture_output=True, text=True)
            dt = time.monotonic() - t0
            if p.returncode != 0:
                failed.append(name)
                print(f"FAIL: {name} ({dt:.1f} s): a cell raised an error or the notebook could not run:")
                print(re.sub(r"\x1b\[[0-9;]*m", "", p.stderr)[-6000:])
            else:
                print(f"ok: {name} executed, every cell ({dt:.1f} s)")
    if failed:
        print(f"{len(failed)} of {len(notebooks)} notebook(s) failed: {', '.join(failed)}")
        return 1
    print(f"all {len(notebooks)} notebook(s) executed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
