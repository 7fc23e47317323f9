#!/usr/bin/env bash
# python/run-notebooks.sh — executes every notebook of notebooks/ headless, top to bottom, and fails
# if any cell fails (python/run-tests.sh calls it after pytest; it can also run on its own):
#   1. checks that the committed notebooks carry no outputs (they are committed stripped);
#   2. pip-installs nbconvert, nbclient, ipykernel and matplotlib into the venv that has the
#      flashsample package, and registers that venv's python as the Jupyter kernel
#      "flashsample-notebooks" (inside the venv: --sys-prefix);
#   3. `jupyter nbconvert --to notebook --execute` each notebook, from notebooks/ (as a user opens
#      it), into a temporary folder: the committed files are never rewritten.
# Environment: FLASHSAMPLE_VENV (default python/build/venv, made by python/run-tests.sh),
# FLASHSAMPLE_TOOL (the flashsample command line for the audit notebooks; else they look for a
# build of this checkout), NOTEBOOKS_OUT (keep the executed notebooks there instead of a
# temporary folder), NOTEBOOK_TIMEOUT (seconds per cell, default 300).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
venv=${FLASHSAMPLE_VENV:-$here/build/venv}
py="$venv/bin/python"
kernel=flashsample-notebooks
t0=$SECONDS

step() { printf '== notebooks: %s (%ds)\n' "$*" $((SECONDS - t0)); }

if [ ! -x "$py" ]; then
    echo "python/run-notebooks.sh: no virtual environment at $venv: run bash python/run-tests.sh (it makes" \
        "one with the flashsample package) or set FLASHSAMPLE_VENV" >&2
    exit 1
fi
shopt -s nullglob
notebooks=("$root"/notebooks/*.ipynb)
if [ ${#notebooks[@]} -eq 0 ]; then
    echo "python/run-notebooks.sh: no notebooks in $root/notebooks" >&2
    exit 1
fi

step "the committed notebooks carry no outputs"
"$py" - "${notebooks[@]}" <<'EOF'
import json, os, sys
bad = []
for path in sys.argv[1:]:
    nb = json.load(open(path))
    n = sum(1 for c in nb["cells"] if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count")))
    if n:
        bad.append(f"{os.path.basename(path)} ({n} cells with outputs)")
if bad:
    print("python/run-notebooks.sh: commit notebooks without outputs: " + ", ".join(bad) +
          "; strip them with: jupyter nbconvert --clear-output --inplace notebooks/NAME.ipynb", file=sys.stderr)
    sys.exit(1)
EOF

step "pip install nbconvert nbclient ipykernel matplotlib; kernel $kernel"
"$py" -m pip install --disable-pip-version-check -q nbconvert nbclient ipykernel matplotlib
"$py" -m ipykernel install --sys-prefix --name "$kernel" --display-name "Python (flashsample venv)" >/dev/null

if [ -n "${NOTEBOOKS_OUT:-}" ]; then
    out=$NOTEBOOKS_OUT
    mkdir -p "$out"
else
    out=$(mktemp -d "${TMPDIR:-/tmp}/fls_notebooks.XXXXXX")
    trap 'rm -rf "$out"' EXIT
fi

failed=()
for nb in "${notebooks[@]}"; do
    name=$(basename "$nb")
    start=$SECONDS
    # from notebooks/, so that `import flashsample` is the installed package and '..' the checkout
    if (cd "$root/notebooks" && PYDEVD_DISABLE_FILE_VALIDATION=1 "$py" -m nbconvert --to notebook --execute \
        --ExecutePreprocessor.kernel_name="$kernel" --ExecutePreprocessor.timeout="${NOTEBOOK_TIMEOUT:-300}" \
        --output-dir "$out" "$nb" >"$out/$name.log" 2>&1); then
        dt=$((SECONDS - start))
        note=""
        [ $dt -lt 60 ] || note=" (over a minute: keep the notebooks small)"
        echo "ok: $name executed, every cell, in ${dt} s$note"
    else
        failed+=("$name")
        echo "FAIL: $name ($((SECONDS - start)) s): a cell raised an error or the notebook could not run:"
        sed 's/\x1b\[[0-9;]*m//g' "$out/$name.log" | grep -v 'Kernel is running over TCP' | tail -n 60
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "${#failed[@]} of ${#notebooks[@]} notebook(s) failed: ${failed[*]}" >&2
    exit 1
fi
step "all ${#notebooks[@]} notebooks executed${NOTEBOOKS_OUT:+ (executed copies in $out)}"
