#!/usr/bin/env bash
# Installs what flashsample needs from Debian's packages (idempotent; quiet when
# everything is already there). Used by the two quick-start scripts.
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc libgsl-dev libcriterion-dev python3 valgrind clang-format)
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
