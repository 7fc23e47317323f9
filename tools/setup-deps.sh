#!/usr/bin/env bash
# Installs what flashsample and its tests need from Debian's packages (tested
# on Debian 12; idempotent; quiet when everything is already there). Used by
# the two quick-start scripts.
#   build: meson ninja-build pkg-config gcc libgsl-dev
#   tests: libcriterion-dev valgrind clang-format (14 on Debian 12, the
#          version .clang-format is checked with);
#          python3-numpy (numpy interop test), python3-matplotlib
#          (paper_repro/report.py's figures and `flashsample audit --report`);
#          python3-venv (python/run-tests.sh: the bindings, their tests and the
#          notebooks run in a fresh venv, their Python packages from PyPI);
#          clang-14 libclang-rt-14-dev (libFuzzer and the sanitizers' runtime
#          for tests/fuzz/run.sh).
# The tests use /usr/bin/python3 (where apt installs numpy) even when another
# python3 comes first on PATH.
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc libgsl-dev libcriterion-dev python3 valgrind clang-format
    python3-numpy python3-matplotlib python3-venv
    clang-14 libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
