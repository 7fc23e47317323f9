"""audit_tokens: the external-token audit (docs/AUDIT.md) from Python.

The audit (fls_audit_tokens) belongs to the statistics library, which needs GSL and is not part of
libflashsample.so; the bindings therefore run the `flashsample audit --logits L.npy --tokens T.npy`
command line on temporary .npy files and read back its --json report. Every input is checked here
first (shapes, dtypes, per-row lengths, ranges, NaN), so a bad input raises before any file is
written; the temporary folder is removed whatever happens.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import json
import math
import operator
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, List, Optional

import numpy as np

from ._arrays import is_array_like
from ._errors import FlashSampleError, FlashSampleTypeError, FlashSampleValueError

ERR_SHAPE, ERR_DTYPE, ERR_NAN, ERR_ALL_MASKED, ERR_PARAM = -4, -5, -7, -8, -9
ERR_UNSUPPORTED, ERR_IO, ERR_INTERNAL = -11, -15, -17
_FN = "audit_tokens"

_HOW_TO_GET = (
    "the audit runs the `flashsample` command line (it needs GSL, which libflashsample.so does not "
    "have): pass tool='/path/to/flashsample', set FLASHSAMPLE_TOOL, or put it on PATH. Build it from "
    "the repository with `meson setup build -Dcuda=disabled && ninja -C build tools/flashsample` "
    "(Debian: apt-get install meson ninja-build pkg-config libgsl-dev); it is then "
    "build/tools/flashsample"
)


class FlashSampleAuditError(FlashSampleError):
    """The audit could not run: the command line is missing (status FLS_ERR_UNSUPPORTED), it
    refused the input (exit status 2; status FLS_ERR_PARAM, the tool's message in the text), or it
    failed in another way (FLS_ERR_INTERNAL). A test that fails is not an error: the result's
    `passed` is False.

    Attributes beyond FlashSampleError's: exit_status (the command line's, or None when it did not
    run), tool_message (its standard error), command (the argument list, with the temporary paths
    it had).
    """

    def __init__(
        self,
        status: int,
        text: str,
        exit_status: Optional[int] = None,
        tool_message: str = "",
        command: Optional[List[str]] = None,
    ):
        super().__init__(status, _FN, text)
        self.exit_status = exit_status
        self.tool_message = tool_message
        self.command = list(command) if command else []
        self.args = ("%s: %s" % (_FN, text),)


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One test of the audit (a row of the table; docs/AUDIT.md says what each tests).

    name ("tokens/gof", "tokens/tail15", ...), kind ("gof", "tail", "pairs", "ties", ...),
    statistic (chi-square or the test's own), dof, p_value, alpha (this test's level), passed,
    draws, V; for binned tests bins, min_mass and tv_caught (the smallest total-variation error
    caught with probability 0.999); for tail tests tail_t (nats below the head), tail_mass,
    expected, observed, deficit_caught, excess_caught (relative; None: none can be caught);
    note. Values the tool writes as non-finite are None.

    verdict: "pass", "fail" or "untested"; untested: the test could not test anything with these
    inputs (one draw per row: no pairs; no tied logits; a tail where no deficit or excess can
    show; ...; the note says why). A row not tested has passed False and p_value None, and is not
    a failure either: it is never counted as a pass (docs/AUDIT.md, "Rows not tested").
    """

    name: str
    kind: str
    statistic: Optional[float]
    dof: int
    p_value: Optional[float]
    alpha: Optional[float]
    passed: bool
    draws: int
    V: int
    bins: int
    min_mass: Optional[float]
    tv_caught: Optional[float]
    tail_t: Optional[float]
    tail_mass: Optional[float]
    expected: Optional[float]
    observed: Optional[float]
    deficit_caught: Optional[float]
    excess_caught: Optional[float]
    note: str
    verdict: str = ""
    untested: bool = False

    @classmethod
    def from_json(cls, r: dict) -> "AuditRow":
        verdict = r.get("verdict")
        if verdict not in ("pass", "fail", "untested"):  # the JSON of a tool without verdicts
            verdict = "untested" if r.get("untested") else ("pass" if r.get("pass") else "fail")
        return cls(
            name=r.get("test", ""),
            kind=r.get("kind", ""),
            statistic=r.get("chi2"),
            dof=int(r.get("dof") or 0),
            p_value=r.get("p"),
            alpha=r.get("alpha"),
            passed=bool(r.get("pass")),
            draws=int(r.get("draws") or 0),
            V=int(r.get("V") or 0),
            bins=int(r.get("bins") or 0),
            min_mass=r.get("min_mass"),
            tv_caught=r.get("tv_caught"),
            tail_t=r.get("tail_t"),
            tail_mass=r.get("tail_mass"),
            expected=r.get("expected"),
            observed=r.get("observed"),
            deficit_caught=r.get("deficit_caught"),
            excess_caught=r.get("excess_caught"),
            note=r.get("note", ""),
            verdict=verdict,
            untested=verdict == "untested",
        )


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """What audit_tokens returns.

    passed: every tested row passed and at least one row was tested (exit status 0); rows not
    tested are in `untested`, never counted as passes, so an audit that tested nothing has passed
    False (exit status 3); exit_status: 0, 1 when a test failed, 3 when nothing was tested;
    rows: the tests (AuditRow), failed: the tested rows that failed, untested: the rows that
    tested nothing (verdict "untested"; not failures); power: the power statement
    (what these draws can catch, one sentence per line); alpha: the level of each test (the
    family-wise budget 1e-4 shared by the tests); report: the path of report.md (report_dir), else
    None; output: the table as the command line printed it (also str(result)); json: the whole
    --json document (inputs, family, the figures' data under "groups"); command: the command run.
    """

    passed: bool
    exit_status: int
    rows: List[AuditRow]
    power: List[str]
    alpha: Optional[float]
    report: Optional[str]
    output: str
    json: dict
    command: List[str]

    @property
    def failed(self) -> List[AuditRow]:
        return [r for r in self.rows if r.verdict == "fail"]

    @property
    def untested(self) -> List[AuditRow]:
        return [r for r in self.rows if r.verdict == "untested"]

    def row(self, name: str) -> AuditRow:
        """The row whose name is `name` or ends with '/' + name (row('gof'), row('tail15'))."""
        for r in self.rows:
            if r.name == name or r.name.endswith("/" + name):
                return r
        raise KeyError("no audit row %r (rows: %s)" % (name, ", ".join(r.name for r in self.rows)))

    def __str__(self) -> str:
        return self.output


# ---- the tool -----------------------------------------------------------------------------------


def find_tool(tool: Any = None) -> str:
    """The flashsample command line: `tool`, else $FLASHSAMPLE_TOOL, else `flashsample` on PATH.
    Raises FlashSampleAuditError (FLS_ERR_UNSUPPORTED), saying how to get it, when none is found."""
    if tool is not None:
        path, where = os.fspath(tool), "tool=%r" % os.fspath(tool)
    elif os.environ.get("FLASHSAMPLE_TOOL"):
        path = os.environ["FLASHSAMPLE_TOOL"]
        where = "FLASHSAMPLE_TOOL=%s" % path
    else:
        found = shutil.which("flashsample")
        if found is None:
            raise FlashSampleAuditError(
                ERR_UNSUPPORTED, "the flashsample command line was not found; " + _HOW_TO_GET
            )
        return found
    if os.sep not in path and not os.path.exists(path):  # a bare name: look it up on PATH
        found = shutil.which(path)
        if found:
            return found
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise FlashSampleAuditError(
            ERR_UNSUPPORTED, "%s is not an executable file; %s" % (where, _HOW_TO_GET)
        )
    return path


# ---- input checks -------------------------------------------------------------------------------


def _host(x: Any, name: str) -> np.ndarray:
    """A numpy array from numpy, a list, a torch tensor (any device) or a cupy array."""
    t = type(x)
    if t.__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()  # exact
        return x.numpy()
    if hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray):
        if hasattr(x, "get"):
            return x.get()
        raise FlashSampleTypeError(
            ERR_DTYPE, _FN, "%s: pass a numpy array or a torch tensor (copied to the host)" % name
        )
    return np.asarray(x)


def _logits(x: Any) -> tuple:
    """(float32 (B, V) C-contiguous, whether the input was one row (V,))."""
    a = _host(x, "logits")
    dt = a.dtype
    if dt == np.float64:
        raise FlashSampleTypeError(
            ERR_DTYPE,
            _FN,
            "logits is float64, which the audit does not read: pass logits.astype(np.float32) (the "
            "values the sampler used)",
        )
    if not (dt in (np.float32, np.float16) or (dt.name == "bfloat16" and dt.itemsize == 2)):
        raise FlashSampleTypeError(
            ERR_DTYPE,
            _FN,
            "logits has dtype %s; expected float32, float16 or bfloat16 (bf16 bits in a uint16 "
            "array: pass flashsample.from_bf16(bits))" % dt,
        )
    one_row = a.ndim == 1
    if one_row:
        a = a[None, :]
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise FlashSampleValueError(
            ERR_SHAPE, _FN, "logits must be (B, V) with B, V >= 1, got shape %s" % (a.shape,)
        )
    a = np.ascontiguousarray(a, dtype=np.float32)  # float16 and bf16 convert exactly
    bad = np.isnan(a) | (a == np.inf)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise FlashSampleValueError(
            ERR_NAN,
            _FN,
            "logits[%d, %d] is %s%s"
            % (r, c, a[r, c], "" if np.isnan(a[r, c]) else " (mask a token with -inf)"),
        )
    dead = np.where(np.all(a == -np.inf, axis=1))[0]
    if dead.size:
        raise FlashSampleValueError(
            ERR_ALL_MASKED, _FN, "row %d of logits is all -inf (no token can be drawn)" % dead[0]
        )
    return a, one_row


def _tokens(x: Any, B: int, K: int, one_row: bool) -> np.ndarray:
    a = _host(x, "tokens")
    if a.dtype.kind not in "iu":
        raise FlashSampleTypeError(
            ERR_DTYPE,
            _FN,
            "tokens must hold integers (token indices), got dtype %s" % a.dtype,
        )
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise FlashSampleValueError(ERR_PARAM, _FN, "tokens holds values beyond int64")
    want = 3 if K else 2
    if one_row and a.ndim == want - 1:  # 1-D logits: one row of draws
        a = a[None]
    if K:
        ok = a.ndim == 3 and a.shape[0] == B and a.shape[2] == K
        expect = "(B, N, K) = (%d, N, %d) with without_replacement=%d" % (B, K, K)
    else:
        ok = a.ndim == 2 and a.shape[0] == B
        expect = "(B, N) = (%d, N): one row of draws per row of logits" % B
        if a.ndim == 3:
            expect += " (a 3-D array: tokens without replacement need without_replacement=K)"
    if not ok:
        raise FlashSampleValueError(
            ERR_SHAPE, _FN, "tokens must be %s, got shape %s" % (expect, a.shape)
        )
    if a.shape[1] < 1:
        raise FlashSampleValueError(ERR_SHAPE, _FN, "tokens has no draws (N = 0)")
    return np.ascontiguousarray(a, dtype=np.int64)


def _number(value: Any, name: str) -> float:
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise FlashSampleTypeError(ERR_PARAM, _FN, "%s must be a number, got %r" % (name, value))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise FlashSampleTypeError(
            ERR_PARAM, _FN, "%s must be a number, got %r" % (name, value)
        ) from None


def _integer(value: Any, name: str) -> int:
    if isinstance(value, (bool, float, str, bytes)) or value is None:
        raise FlashSampleTypeError(ERR_PARAM, _FN, "%s must be an integer, got %r" % (name, value))
    try:
        return operator.index(value)
    except TypeError:
        raise FlashSampleTypeError(
            ERR_PARAM, _FN, "%s must be an integer, got %r" % (name, value)
        ) from None


def _rows(value: Any, B: int, dtype: Any, name: str) -> np.ndarray:
    a = _host(value, name)
    if a.ndim != 1 or a.shape[0] != B:
        raise FlashSampleValueError(
            ERR_SHAPE,
            _FN,
            "%s must have one entry per row: shape (%d,), got %s" % (name, B, a.shape),
        )
    if np.dtype(dtype).kind == "i":
        if a.dtype.kind not in "iu":
            raise FlashSampleTypeError(
                ERR_DTYPE, _FN, "%s must hold integers, got dtype %s" % (name, a.dtype)
            )
    elif a.dtype.kind not in "fiu":
        raise FlashSampleTypeError(
            ERR_DTYPE, _FN, "%s must hold numbers, got dtype %s" % (name, a.dtype)
        )
    return np.ascontiguousarray(a, dtype=dtype)


def _f32(v: float, name: str) -> float:
    """v as the float32 the command line will parse (strtof), refusing what does not fit."""
    with np.errstate(over="ignore"):
        f = np.float32(v)
    if not np.isfinite(f):
        raise FlashSampleValueError(ERR_PARAM, _FN, "%s = %r is not a finite float32" % (name, v))
    if v != 0.0 and f == 0.0:
        raise FlashSampleValueError(ERR_PARAM, _FN, "%s = %r underflows float32 to 0" % (name, v))
    return float(f)


def _check_rows(a: np.ndarray, ok: np.ndarray, name: str, what: str) -> None:
    bad = np.where(~ok)[0]
    if bad.size:
        raise FlashSampleValueError(
            ERR_PARAM, _FN, "%s: row %d has %s; %s" % (name, bad[0], a[bad[0]], what)
        )


# a rule parameter: its flag, its per-row flag, the per-row array's dtype, the range check
# (None: an integer in [0, V]) and the range in words
_Rule = collections.namedtuple("_Rule", ["flag", "row_flag", "dtype", "check", "what"])

_RULES = {
    "min_p": _Rule(
        "--min-p", "--min-p-per-row", np.float32, lambda v: (v >= 0) & (v <= 1), "in [0, 1]"
    ),
    "top_p": _Rule(
        "--top-p", "--top-p-per-row", np.float32, lambda v: (v > 0) & (v <= 1), "in (0, 1]"
    ),
    "top_k": _Rule("--top-k", "--top-k-per-row", np.int64, None, "an integer in [0, V]"),
}


def _flags(
    B: int,
    V: int,
    temperature: Any,
    min_p: Any,
    top_k: Any,
    top_p: Any,
    filter: Any,
    filter_value: Any,
    row_min_p: Any,
    row_top_k: Any,
    row_top_p: Any,
    row_filter_value: Any,
    without_replacement: Any,
) -> tuple:
    """The command line's flags: (scalar flags [(flag, text)], per-row arrays [(flag, array)], K)."""
    flags, arrays = [], []

    # temperature: one value, or one per row
    if temperature is None:
        temperature = 1.0
    if is_array_like(temperature):
        t = _rows(temperature, B, np.float32, "temperature")
        _check_rows(t, np.isfinite(t) & (t >= 0), "temperature", "T must be finite and >= 0")
        arrays.append(("--temperature-per-row", t))
    else:
        T = _number(temperature, "temperature")
        if not (math.isfinite(T) and T >= 0):
            raise FlashSampleValueError(
                ERR_PARAM, _FN, "temperature = %r: must be finite and >= 0 (0 is greedy)" % T
            )
        flags.append(("--temperature", repr(_f32(T, "temperature"))))

    # filter: (name, value), "name=value", or a name with filter_value / row_filter_value
    given = {"min_p": (min_p, row_min_p), "top_k": (top_k, row_top_k), "top_p": (top_p, row_top_p)}
    fname, fvalue = None, None
    if filter is not None:
        if isinstance(filter, (tuple, list)) and len(filter) == 2:
            fname, fvalue = filter
        elif isinstance(filter, str):
            fname, eq, rest = filter.partition("=")
            fvalue = rest if eq else None
        else:
            raise FlashSampleTypeError(
                ERR_PARAM,
                _FN,
                "filter must be (name, value), 'name=value' or a rule's name with filter_value, "
                "got %r" % (filter,),
            )
        if not isinstance(fname, str) or not fname.strip() or "=" in fname or " " in fname:
            raise FlashSampleValueError(
                ERR_PARAM, _FN, "filter: %r is not a rule's name (e.g. 'top-nsigma')" % (fname,)
            )
        fname = fname.strip().lower().replace("_", "-")
        if isinstance(fvalue, str):
            try:
                fvalue = int(fvalue) if fname == "top-k" else float(fvalue)
            except ValueError:
                raise FlashSampleValueError(
                    ERR_PARAM, _FN, "filter %s=%s: the value is not a number" % (fname, fvalue)
                ) from None
        for extra, label in (
            (filter_value, "filter_value"),
            (row_filter_value, "row_filter_value"),
        ):
            if extra is not None:
                if fvalue is not None:
                    raise FlashSampleValueError(
                        ERR_PARAM,
                        _FN,
                        "filter %s: its value is given twice (%s too)" % (fname, label),
                    )
                fvalue = extra
        if fvalue is None:
            raise FlashSampleValueError(
                ERR_PARAM,
                _FN,
                "filter %s needs a value: filter=(%r, value) or filter_value=" % (fname, fname),
            )
        own = fname.replace("-", "_")
        if own in given:  # min-p, top-k, top-p through filter: their own parameters
            if given[own][0] is not None or given[own][1] is not None:
                raise FlashSampleValueError(
                    ERR_PARAM, _FN, "filter %s and %s both set %s: give one" % (fname, own, fname)
                )
            given[own] = (fvalue, None)
            fname = None
    elif filter_value is not None or row_filter_value is not None:
        raise FlashSampleValueError(
            ERR_PARAM,
            _FN,
            "filter_value / row_filter_value need filter=NAME to say which registry rule they set",
        )

    for key, (value, row_value) in given.items():
        rule = _RULES[key]
        if value is not None and is_array_like(value):
            if row_value is not None:
                raise FlashSampleValueError(
                    ERR_PARAM, _FN, "give per-row values once: row_%s or an array %s" % (key, key)
                )
            value, row_value = None, value
        if row_value is not None:
            a = _rows(row_value, B, rule.dtype, "row_" + key)
            ok = (a >= 0) & (a <= V) if rule.check is None else rule.check(a)
            _check_rows(a, ok, "row_" + key, rule.what)
            arrays.append((rule.row_flag, a))
        if value is not None:
            if rule.dtype == np.int64:
                k = _integer(value, key)
                if not 0 <= k <= V:
                    raise FlashSampleValueError(
                        ERR_PARAM, _FN, "%s = %d: %s (V = %d; 0 = off)" % (key, k, rule.what, V)
                    )
                flags.append((rule.flag, str(k)))
            else:
                v = _number(value, key)
                if not (math.isfinite(v) and bool(rule.check(np.float32(v)))):
                    raise FlashSampleValueError(ERR_PARAM, _FN, "%s = %r: %s" % (key, v, rule.what))
                flags.append((rule.flag, repr(_f32(v, key))))

    if fname is not None:
        if is_array_like(fvalue):
            a = _rows(fvalue, B, np.float64, "row_filter_value")
            _check_rows(a, np.isfinite(a) & (a >= 0), "row_filter_value", "finite and >= 0")
            flags.append(("--filter", fname))
            arrays.append(("--filter-value-per-row", a))
        else:
            v = _number(fvalue, "filter value")
            if not (math.isfinite(v) and v >= 0):
                raise FlashSampleValueError(
                    ERR_PARAM, _FN, "filter %s=%r: the value must be finite and >= 0" % (fname, v)
                )
            flags.append(("--filter", "%s=%r" % (fname, v)))

    K = 0
    if without_replacement is not None:
        if is_array_like(without_replacement):
            raise FlashSampleValueError(
                ERR_UNSUPPORTED,
                _FN,
                "without_replacement: per-row K is not audited by the command line; give one K "
                "(the tokens' last dimension)",
            )
        K = _integer(without_replacement, "without_replacement")
        if not 0 <= K <= V:
            raise FlashSampleValueError(
                ERR_PARAM, _FN, "without_replacement = %d: K is in [1, V = %d] (0 = off)" % (K, V)
            )
        if K:
            flags.append(("--without-replacement", str(K)))
    return flags, arrays, K


# ---- the call -----------------------------------------------------------------------------------


def audit_tokens(
    logits: Any,
    tokens: Any,
    *,
    temperature: Any = 1.0,
    min_p: Any = None,
    top_k: Any = None,
    top_p: Any = None,
    filter: Any = None,
    filter_value: Any = None,
    row_min_p: Any = None,
    row_top_k: Any = None,
    row_top_p: Any = None,
    row_filter_value: Any = None,
    without_replacement: Any = None,
    pairs_rows: bool = False,
    seed: Optional[int] = None,
    report_dir: Any = None,
    tool: Any = None,
    timeout: Optional[float] = None,
) -> AuditResult:
    """Audits tokens drawn by any sampler against the exact distribution of the logits they were
    drawn from (docs/AUDIT.md): `flashsample audit --logits L.npy --tokens T.npy ... --json`.

    logits: (B, V) float32 (float16 and bfloat16 are converted exactly; float64 is refused), or
      (V,) for one row; numpy, a list or a torch tensor.
    tokens: integers (B, N), N draws per row; (B, N, K) with without_replacement=K (-1 past the
      support, as the library writes them).
    temperature: the sampler's T, one value or one per row (0 = greedy).
    min_p, top_k, top_p: the rules (docs/RULES.md), each a scalar or a per-row array (or
      row_min_p, row_top_k, row_top_p); filter: a registry rule as (name, value), 'name=value', or
      a name with filter_value / row_filter_value (e.g. ('top-nsigma', 1.0)).
    without_replacement: K distinct tokens per draw (Gumbel-top-k).
    pairs_rows: also test rows 2i and 2i+1 for independence (only for rows drawn independently).
    seed: the audit's transform seed (default: its fixed one).
    report_dir: also write report_dir/report.md with figures (needs matplotlib in this Python or
      in a python3 the tool finds; FLASHSAMPLE_PYTHON chooses one).
    tool: the flashsample command line; default $FLASHSAMPLE_TOOL, else `flashsample` on PATH.

    Returns an AuditResult (passed, rows, power, ...): a failed test is passed=False, not an
    exception; a test that could not test anything with these inputs is in result.untested (not
    a pass, not a failure), and an audit in which nothing was tested is passed=False. Raises FlashSampleValueError / FlashSampleTypeError for inputs refused here (before
    any file is written) and FlashSampleAuditError when the tool is missing or refuses the input.
    """
    L, one_row = _logits(logits)
    B, V = L.shape
    flags, arrays, K = _flags(
        B,
        V,
        temperature,
        min_p,
        top_k,
        top_p,
        filter,
        filter_value,
        row_min_p,
        row_top_k,
        row_top_p,
        row_filter_value,
        without_replacement,
    )
    T = _tokens(tokens, B, K, one_row)
    if seed is not None:
        s = _integer(seed, "seed")
        if not 0 <= s < 1 << 64:
            raise FlashSampleValueError(ERR_PARAM, _FN, "seed = %d is not a uint64" % s)
        flags.append(("--seed", str(s)))
    report = None
    if report_dir is not None:
        report = os.path.abspath(os.fspath(report_dir))
        if os.path.exists(report) and not os.path.isdir(report):
            raise FlashSampleValueError(
                ERR_PARAM, _FN, "report_dir=%s exists and is not a folder" % report
            )
    path = find_tool(tool)

    env = dict(os.environ)
    if report is not None and not env.get("FLASHSAMPLE_PYTHON"):
        # the report's figures: this Python when it has matplotlib (else the tool looks for one)
        if importlib.util.find_spec("matplotlib") is not None:
            env["FLASHSAMPLE_PYTHON"] = sys.executable

    with tempfile.TemporaryDirectory(prefix="flashsample-audit-") as work:
        lp, tp, jp = (os.path.join(work, n) for n in ("logits.npy", "tokens.npy", "audit.json"))
        np.save(lp, L)
        np.save(tp, T)
        cmd = [path, "audit", "--logits", lp, "--tokens", tp, "--json", jp]
        for flag, text in flags:
            cmd += [flag, text]
        for i, (flag, a) in enumerate(arrays):
            ap = os.path.join(work, "row%d_%s.npy" % (i, flag.strip("-")))
            np.save(ap, a)
            cmd += [flag, ap]
        if pairs_rows:
            cmd.append("--pairs-rows")
        if report is not None:
            cmd += ["--report", report]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except OSError as e:
            raise FlashSampleAuditError(
                ERR_UNSUPPORTED, "cannot run %s: %s; %s" % (path, e, _HOW_TO_GET), command=cmd
            ) from None
        except subprocess.TimeoutExpired:
            raise FlashSampleAuditError(
                ERR_INTERNAL, "flashsample audit ran past timeout=%s s" % timeout, command=cmd
            ) from None
        message = r.stderr.strip()
        if r.returncode == 2:
            raise FlashSampleAuditError(
                ERR_PARAM,
                "flashsample audit refused the input (exit 2): %s" % (message or r.stdout.strip()),
                exit_status=2,
                tool_message=r.stderr,
                command=cmd,
            )
        doc = None
        if r.returncode in (0, 1, 3) and os.path.exists(jp):
            try:
                with open(jp) as f:
                    doc = json.load(f)
            except ValueError as e:
                message = "its --json file cannot be read (%s); %s" % (e, message)
        if doc is None:
            raise FlashSampleAuditError(
                ERR_INTERNAL,
                "flashsample audit failed (exit %d) without a report: %s"
                % (r.returncode, message or r.stdout.strip()[-2000:]),
                exit_status=r.returncode,
                tool_message=r.stderr,
                command=cmd,
            )
    rows = [AuditRow.from_json(x) for x in doc.get("rows", [])]
    # a tested row that failed, or nothing tested at all: not passed (untested rows are not passes)
    tested = [x for x in rows if x.verdict != "untested"]
    passed = (
        r.returncode == 0
        and bool(doc.get("all_pass"))
        and bool(tested)
        and all(x.passed for x in tested)
    )
    return AuditResult(
        passed=passed,
        exit_status=r.returncode,
        rows=rows,
        power=list(doc.get("power", [])),
        alpha=(doc.get("family") or {}).get("alpha"),
        report=os.path.join(report, "report.md") if report is not None else None,
        output=r.stdout,
        json=doc,
        command=cmd,
    )
