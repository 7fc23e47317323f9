"""The ctypes mirror of lib/include/flashsample.h has the C layout: sizes through the library's own
*_default functions (the struct_size they write), and every field's offset through a tiny C
program compiled against the header (where a C compiler and the header are present)."""

import ctypes
import shutil
import subprocess

import pytest

import flashsample as fs
from flashsample import _capi

from conftest import REPO

# ctypes field names that differ from C's (C keywords of Python)
C_NAME = {"async_": "async"}

GROWING = [
    (_capi.fls_context_config, _capi.fls_context_config_default),
    (_capi.fls_params, _capi.fls_params_default),
    (_capi.fls_counters, _capi.fls_counters_default),
]
ALL = [
    _capi.fls_context_config,
    _capi.fls_params,
    _capi.fls_counters,
    _capi.fls_matrix,
    _capi.fls_outputs,
]


@pytest.mark.parametrize("cls,default", GROWING, ids=lambda x: getattr(x, "__name__", ""))
def test_struct_size_matches_the_library(cls, default):
    assert _capi.default_struct_size(cls, default) == ctypes.sizeof(cls)


def test_filled_structs_carry_the_mirror_size_and_defaults():
    p = _capi.new_params()
    assert p.struct_size == ctypes.sizeof(_capi.fls_params)
    assert (p.method, p.temperature_value, p.draws, p.top_p, p.top_k) == (0, 1.0, 1, 1.0, 0)
    assert not p.temperature and not p.row_seeds and p.filter is None
    c = _capi.new_config()
    assert (c.engine, c.threads, c.simd, c.tile_v) == (0, 0, 0, 0)
    assert _capi.new_counters().struct_size == ctypes.sizeof(_capi.fls_counters)


def test_header_version_matches_the_header():
    text = (REPO / "lib" / "include" / "flashsample.h").read_text() if (REPO / "lib").is_dir() else None
    if text is None:
        pytest.skip("lib/include/flashsample.h not found (not a checkout)")
    got = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        line = [ln for ln in text.splitlines() if ln.startswith("#define FLS_VERSION_" + part)][0]
        got.append(int(line.split()[-1]))
    assert tuple(got) == fs.HEADER_VERSION
    assert fs.version() == "%d.%d.%d" % tuple(got)


def test_offsets_match_a_compiled_c_program(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    header = REPO / "lib" / "include" / "flashsample.h"
    if cc is None or not header.is_file():
        pytest.skip("no C compiler or no lib/include/flashsample.h: offsets not checked")
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        '#include "flashsample.h"',
        "int main(void) {",
    ]
    for cls in ALL:
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (cls.__name__, cls.__name__))
        for name, _ in cls._fields_:
            lines.append(
                'printf("%s %s %%zu\\n", offsetof(%s, %s));'
                % (cls.__name__, name, cls.__name__, C_NAME.get(name, name))
            )
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", str(header.parent), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    seen = {}
    for line in out.splitlines():
        struct, field, value = line.split()
        seen[(struct, field)] = int(value)
    for cls in ALL:
        assert seen[(cls.__name__, "sizeof")] == ctypes.sizeof(cls), cls.__name__
        for name, _ in cls._fields_:
            assert seen[(cls.__name__, name)] == getattr(cls, name).offset, (cls.__name__, name)
