#!/usr/bin/env bash
# python/run-tests.sh — the Python bindings' test run, from a clean checkout:
#   1. a fresh virtual environment (python/build/venv, or $FLASHSAMPLE_VENV),
#   2. `pip install ./python` into it (Meson builds libflashsample.so, CPU-only, into the package;
#      numpy, meson and ninja come from PyPI) and pytest,
#   3. the flashsample command line for the identity tests (python/build/cli, unless
#      $FLASHSAMPLE_TOOL names one),
#   4. pytest on python/tests (the CPU engine; a few seconds),
#   5. every notebook of notebooks/, executed headless in this venv (python/run-notebooks.sh:
#      nbconvert, ipykernel and matplotlib from PyPI; about a minute; a failing cell fails the run).
# Needs (Debian): python3, python3-venv, gcc, pkg-config, libgsl-dev, meson, ninja-build.
# Environment: PYTHON (default python3), FLASHSAMPLE_VENV, FLASHSAMPLE_TOOL, FLASHSAMPLE_CUDA
# (passed to the pip build: 1 builds the CUDA engine), PYTEST_ARGS (extra pytest arguments),
# FLASHSAMPLE_NOTEBOOKS=0 (skip step 5, saying so), NOTEBOOKS_OUT (keep the executed notebooks).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
py=${PYTHON:-python3}
venv=${FLASHSAMPLE_VENV:-$here/build/venv}
t0=$SECONDS

step() { printf '== python: %s (%ds)\n' "$*" $((SECONDS - t0)); }

step "virtual environment $venv ($($py --version 2>&1))"
rm -rf "$venv"
if ! "$py" -m venv "$venv"; then
    echo "python/run-tests.sh: '$py -m venv' failed; on Debian: apt-get install python3-venv" >&2
    exit 1
fi

step "pip install ./python"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >/dev/null 2>&1 || true
(cd "$root" && "$venv/bin/python" -m pip install --disable-pip-version-check -q ./python pytest)
# import from outside the source tree: the installed package, with its library
(cd / && "$venv/bin/python" -c 'import flashsample as fs; print("flashsample", fs.__version__, "from", fs.library_path(), "| CUDA engine built:", fs.cuda_built())')

if [ -z "${FLASHSAMPLE_TOOL:-}" ]; then
    step "the flashsample command line (python/build/cli)"
    cli="$here/build/cli"
    if command -v meson >/dev/null && command -v ninja >/dev/null; then
        if { [ -f "$cli/build.ninja" ] || meson setup "$cli" "$root" -Dcuda=disabled -Dtests=false >"$here/build/cli-setup.log" 2>&1; } &&
            ninja -C "$cli" tools/flashsample >"$here/build/cli-build.log" 2>&1; then
            export FLASHSAMPLE_TOOL="$cli/tools/flashsample"
        else
            echo "python/run-tests.sh: building the command line failed (python/build/cli-*.log); the identity tests will skip" >&2
            tail -5 "$here/build/cli-setup.log" "$here/build/cli-build.log" 2>/dev/null >&2 || true
        fi
    else
        echo "python/run-tests.sh: no meson/ninja on PATH: the CLI identity tests will skip" >&2
    fi
fi

step "pytest python/tests"
# from /, so that `import flashsample` finds the installed package and not python/flashsample
cd /
# shellcheck disable=SC2086
"$venv/bin/python" -I -m pytest -q -rs -p no:cacheprovider "$here/tests" ${PYTEST_ARGS:-}

if [ "${FLASHSAMPLE_NOTEBOOKS:-1}" = 0 ]; then
    step "notebooks skipped (FLASHSAMPLE_NOTEBOOKS=0)"
else
    step "notebooks (python/run-notebooks.sh)"
    FLASHSAMPLE_VENV="$venv" bash "$here/run-notebooks.sh"
fi
step "done"
