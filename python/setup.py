"""Builds libflashsample.so with Meson from the repository's root meson.build and installs it inside
the `flashsample` package (flashsample/_lib/), next to the ctypes bindings.

Environment variables (read at build time):
  FLASHSAMPLE_CUDA        unset/"0"/"disabled": -Dcuda=disabled (the default: a fast CPU-only
                          build); "1"/"enabled": -Dcuda=enabled (needs nvcc); "auto": Meson's
                          choice (the CUDA engine when nvcc is found).
  FLASHSAMPLE_MESON_ARGS  further arguments for `meson setup` (e.g. -Dnccl_dir=/path).
  FLASHSAMPLE_BUILD_DIR   the Meson build folder (default python/build/meson-<version>-<cuda>).
  FLASHSAMPLE_LIBRARY     a libflashsample.so built elsewhere: packaged as is, Meson not run.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(msg):
    print("flashsample build: " + msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    subprocess.check_call(cmd, **kw)


def cuda_option():
    v = os.environ.get("FLASHSAMPLE_CUDA", "").strip().lower()
    if v in ("", "0", "no", "off", "false", "disabled"):
        return "disabled"
    if v in ("1", "yes", "on", "true", "enabled"):
        return "enabled"
    if v == "auto":
        return "auto"
    raise SystemExit("FLASHSAMPLE_CUDA=%r: expected 0, 1 or auto" % v)


def find_tool(name):
    # pip's isolated build environment puts its scripts first on PATH; also look beside python.
    path = shutil.which(name)
    if path is None:
        cand = os.path.join(os.path.dirname(sys.executable), name)
        if os.path.exists(cand):
            path = cand
    return path


def meson_build():
    """Configures and builds the shared library; returns the files to package."""
    if not os.path.exists(os.path.join(ROOT, "meson.build")) or not os.path.exists(
        os.path.join(ROOT, "lib", "include", "flashsample.h")
    ):
        raise SystemExit(
            "flashsample build: the repository (meson.build, lib/include/flashsample.h) was not found "
            "above %s; build from a checkout (`python3 -m pip install ./python` from the "
            "repository root) or set FLASHSAMPLE_LIBRARY to a built libflashsample.so" % HERE
        )
    meson = find_tool("meson")
    if meson is None:
        raise SystemExit(
            "flashsample build: meson not found (pip installs it from PyPI in its isolated build "
            "environment; with --no-build-isolation install Debian's meson and ninja-build)"
        )
    mver = subprocess.check_output([meson, "--version"], text=True).strip()
    cuda = cuda_option()
    bdir = os.environ.get("FLASHSAMPLE_BUILD_DIR") or os.path.join(
        HERE, "build", "meson-%s-cuda-%s" % (mver, cuda)
    )
    args = ["-Dcuda=" + cuda, "-Dtests=false", "--buildtype=release"]
    args += shlex.split(os.environ.get("FLASHSAMPLE_MESON_ARGS", ""))
    if os.path.exists(os.path.join(bdir, "meson-private", "coredata.dat")):
        setup_cmd = [meson, "setup", "--reconfigure", bdir, ROOT] + args
    else:
        setup_cmd = [meson, "setup", bdir, ROOT] + args
    try:
        run(setup_cmd)
    except subprocess.CalledProcessError:
        raise SystemExit(
            "flashsample build: `meson setup` failed (its log: %s/meson-logs/meson-log.txt). "
            "The root meson.build needs a C11 compiler, pkg-config and GSL (Debian: "
            "apt-get install gcc pkg-config libgsl-dev) even for the library; the CUDA engine "
            "needs nvcc (FLASHSAMPLE_CUDA=1)." % bdir
        ) from None
    targets = json.loads(subprocess.check_output([meson, "introspect", "--targets", bdir]))
    libs = [
        t
        for t in targets
        if t["type"] == "shared library" and t["name"] in ("flashsample", "flashsample_nccl")
    ]
    if not any(t["name"] == "flashsample" for t in libs):
        raise SystemExit("flashsample build: no shared library target 'flashsample' in %s" % bdir)
    files = [t["filename"][0] for t in libs]
    ninja = find_tool("ninja")
    rel = [os.path.relpath(f, bdir) for f in files]
    if ninja:
        run([ninja, "-C", bdir] + rel)
    else:
        run([meson, "compile", "-C", bdir] + ["%s" % r for r in rel])
    return files


def packaged_name(path):
    # libflashsample.so.0.4.0 -> libflashsample.so.0 (its soname: libflashsample_nccl needs it)
    base = os.path.basename(path)
    stem, _, rest = base.partition(".so")
    major = rest.strip(".").split(".")[0] if rest.strip(".") else ""
    return stem + ".so" + ("." + major if major else "")


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        prebuilt = os.environ.get("FLASHSAMPLE_LIBRARY")
        if prebuilt:
            files = [prebuilt]
            log("packaging FLASHSAMPLE_LIBRARY=%s (Meson not run)" % prebuilt)
        else:
            files = meson_build()
        dest = os.path.join(self.build_lib, "flashsample", "_lib")
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        os.makedirs(dest)
        for f in files:
            target = os.path.join(dest, packaged_name(f))
            shutil.copyfile(os.path.realpath(f), target)
            log("packaged %s as flashsample/_lib/%s" % (f, os.path.basename(target)))


class PlatformWheel(bdist_wheel):
    """The wheel holds a shared library but no Python extension: py3-none-<platform>."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel})
