#!/usr/bin/env bash
# python/gpu-check.sh [OUTDIR] — the bindings on a GPU machine (nvcc, PyTorch; CuPy optional):
# builds the package with the CUDA engine (FLASHSAMPLE_CUDA=1, pip --no-build-isolation with the
# machine's setuptools, meson and ninja; nothing fetched) into a target folder, builds the command
# line from the same Meson folder, and runs every test of python/tests (test_cuda.py included).
# GSL, which the root meson.build needs, comes from the system or from .gpudeps/*.deb as in
# tools/gpu-check.sh (tools/gpu-gsl.sh). Logs go to OUTDIR (default python/build/gpu-check).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$here")
OUTDIR=$(mkdir -p "${1:-$here/build/gpu-check}" && cd "${1:-$here/build/gpu-check}" && pwd)
BUILD=$here/build/meson-gpu
site=$here/build/gpu-site
py=${PYTHON:-python3}
export PATH="/usr/local/cuda/bin:$PATH"
t0=$SECONDS
. "$ROOT/tools/gpu-gsl.sh"
echo "GSL: $GSL_NOTE" | tee "$OUTDIR/env.txt"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
  "$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'; } \
    >>"$OUTDIR/env.txt" 2>&1

rm -rf "$site"
(cd "$ROOT" && FLASHSAMPLE_CUDA=1 FLASHSAMPLE_BUILD_DIR="$BUILD" "$py" -m pip install -v \
    --no-build-isolation --no-deps --no-index --target "$site" ./python) >"$OUTDIR/pip.log" 2>&1
rc=$?
echo "pip install (CUDA engine): rc=$rc ($((SECONDS - t0)) s)"
[ $rc -eq 0 ] || { tail -30 "$OUTDIR/pip.log"; exit 1; }
if ninja -C "$BUILD" tools/flashsample >"$OUTDIR/cli.log" 2>&1; then
    export FLASHSAMPLE_TOOL="$BUILD/tools/flashsample"
fi
echo "command line: ${FLASHSAMPLE_TOOL:-not built} ($((SECONDS - t0)) s)"
cd /
PYTHONPATH="$site" "$py" -m pytest -q -rs -p no:cacheprovider "$here/tests" 2>&1 | tee "$OUTDIR/pytest.log"
rc=${PIPESTATUS[0]}
echo "pytest: rc=$rc ($((SECONDS - t0)) s)"
exit $rc
