"""Shared fixtures: a 2-thread CPU context, a seeded generator, the command-line tool."""

import os
import pathlib
import shutil

import numpy as np
import pytest

import flashsample as fs

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def ctx():
    with fs.Context(engine="cpu", threads=2) as c:
        yield c


@pytest.fixture
def rng():
    return np.random.default_rng(20260101)


def logits(rng, B, V, scale=2.0, dtype=np.float32):
    return (scale * rng.standard_normal((B, V))).astype(dtype)


def find_tool():
    """(path, None) or (None, why): $FLASHSAMPLE_TOOL, else a built build*/tools/flashsample of this
    checkout (python/build/cli first: python/run-tests.sh builds it there)."""
    env = os.environ.get("FLASHSAMPLE_TOOL")
    if env:
        if os.access(env, os.X_OK):
            return env, None
        return None, "FLASHSAMPLE_TOOL=%s is not an executable" % env
    cands = [REPO / "python" / "build" / "cli" / "tools" / "flashsample"]
    cands += sorted(REPO.glob("build*/tools/flashsample"), key=lambda p: -p.stat().st_mtime)
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c), None
    on_path = shutil.which("flashsample")
    if on_path:
        return on_path, None
    return None, (
        "the flashsample command line was not found: set FLASHSAMPLE_TOOL, or build it "
        "(python/run-tests.sh does: meson setup python/build/cli -Dcuda=disabled -Dtests=false "
        "&& ninja -C python/build/cli tools/flashsample)"
    )


@pytest.fixture(scope="session")
def tool():
    path, why = find_tool()
    if path is None:
        pytest.skip(why)
    return path
