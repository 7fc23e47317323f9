"""flashsample.audit_tokens: the external-token audit (docs/AUDIT.md) through the command line.

The tests that run an audit need the flashsample tool ($FLASHSAMPLE_TOOL, else a build of this
checkout, as test_cli_identity.py finds it) and skip, saying why, without one; the input checks
and the missing-tool errors run everywhere. Every audit here runs at the audit's own family-wise
budget (1e-4) with fixed seeds, so the outcomes are deterministic."""

import json
import os
import sys
import tempfile

import numpy as np
import pytest

import flashsample as fs
from flashsample import _audit

from conftest import logits


@pytest.fixture
def tmp_clean(tmp_path, monkeypatch):
    """Temporary files of audit_tokens go under tmp_path/tmp, checked empty afterwards."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    yield d
    assert list(d.iterdir()) == [], "audit_tokens left temporary files behind"


def softmax(L, scale):
    z = L.astype(np.float64) * scale
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def draw(rng, P, N):
    """N independent draws per row of the (B, V) probabilities P, by inverse CDF in numpy."""
    c = np.cumsum(P, axis=1)
    c /= c[:, -1:]
    u = rng.random((P.shape[0], N))
    return np.stack(
        [
            np.minimum(np.searchsorted(c[b], u[b], side="right"), P.shape[1] - 1)
            for b in range(len(P))
        ]
    ).astype(np.int64)


# ---- the library's own tokens pass; wrong samplers fail --------------------------------------


def test_library_tokens_pass(tool, ctx, rng, tmp_clean):
    L = logits(rng, 4, 1000)
    s = ctx.sample_logits(L, temperature=0.7, seed=3, draws=5000)
    r = fs.audit_tokens(L, s.tokens, temperature=0.7, tool=tool)
    assert isinstance(r, fs.AuditResult)
    assert r.passed and r.exit_status == 0 and r.failed == []
    names = [x.name for x in r.rows]
    assert names[0] == "tokens/gof" and "tokens/tail15" in names and "tokens/pairs-draws" in names
    gof = r.row("gof")
    assert gof.passed and gof.p_value > gof.alpha and gof.draws == 4 * 5000 and gof.bins >= 2
    assert 0 < r.alpha < 1e-4 and all(x.alpha == r.alpha for x in r.rows)
    assert r.power and "total-variation" in r.power[0]
    assert r.json["inputs"]["B"] == 4 and r.json["inputs"]["V"] == 1000
    # rows that tested nothing (a tail with no mass at these logits, no tied logits) are listed as
    # not tested, never as passes: the verdict is then "every tested row passed", not "all pass"
    assert (" 0 failed" in str(r)) and r.report is None
    assert ("all pass" in str(r)) == (r.untested == [])
    assert all(not x.passed and x.p_value is None and x not in r.failed for x in r.untested)


def test_one_draw_per_row_leaves_pairs_not_tested(tool, ctx, rng, tmp_clean):
    """With one draw per row there is no pair of draws: pairs-draws tested nothing. It is in
    `untested`, not a pass and not a failure; the audit passes on the rows that were tested."""
    L = logits(rng, 4, 300)
    s = ctx.sample_logits(L, temperature=0.7, seed=5, draws=1)
    r = fs.audit_tokens(L, s.tokens, temperature=0.7, tool=tool)
    pd = r.row("pairs-draws")
    assert pd.verdict == "untested" and pd.untested and not pd.passed and pd.p_value is None
    assert "no pairs" in pd.note
    assert pd in r.untested and pd not in r.failed
    assert r.row("gof").verdict == "pass" and r.row("gof") not in r.untested
    assert r.passed and r.exit_status == 0 and r.failed == []
    assert r.json["verdict"] == "pass" and r.json["untested"] == len(r.untested) >= 1
    assert "not tested" in str(r) and "all pass" not in str(r)
    # a token outside the support (masked): the gof fails; pairs-draws is still not tested, not failed
    bad = s.tokens.copy()
    bad[0, 0] = 17
    L2 = L.copy()
    L2[0, 17] = -np.inf
    r = fs.audit_tokens(L2, bad, temperature=0.7, tool=tool)
    assert not r.passed and r.exit_status == 1 and r.row("gof") in r.failed
    assert r.row("pairs-draws") in r.untested and r.row("pairs-draws") not in r.failed
    # a token outside [0, V) is bad input: refused (exit 2) with the first one, nothing audited
    bad[0, 0] = 300
    with pytest.raises(fs.FlashSampleError, match="out of range"):
        fs.audit_tokens(L, bad, temperature=0.7, tool=tool)


def _fake_tool(tmp_path, rows, exit_status):
    """A stand-in for the command line that writes an audit JSON with these rows and exits so."""
    doc = {
        "tool": "flashsample audit",
        "mode": "external",
        "all_pass": exit_status == 0,
        "verdict": {0: "pass", 1: "fail", 3: "untested"}[exit_status],
        "family": {"tests": len(rows), "budget": 1e-4, "alpha": 1e-4 / len(rows)},
        "power": [],
        "rows": rows,
    }
    script = tmp_path / "fake-flashsample"
    script.write_text(
        "#!%s\nimport sys\nargs = sys.argv\nopen(args[args.index('--json') + 1], 'w').write(%r)\n"
        "print('fake audit')\nsys.exit(%d)\n" % (sys.executable, json.dumps(doc), exit_status)
    )
    script.chmod(0o755)
    return script


def test_nothing_tested_is_not_a_pass(rng, tmp_path, tmp_clean):
    """An audit in which no row tested anything is not a success: the tool exits 3 and the result
    has passed False (and even a report whose rows are all untested with exit 0 is not passed)."""
    L = logits(rng, 2, 10)
    t = np.zeros((2, 1), dtype=np.int64)
    untested = [
        {"test": "tokens/" + name, "kind": kind, "pass": False, "verdict": "untested", "p": None}
        for name, kind in (("pairs-draws", "pairs"), ("ties", "ties"))
    ]
    r = fs.audit_tokens(L, t, tool=_fake_tool(tmp_path, untested, 3))
    assert not r.passed and r.exit_status == 3
    assert len(r.untested) == 2 and r.failed == []
    r = fs.audit_tokens(L, t, tool=_fake_tool(tmp_path, untested, 0))
    assert not r.passed, "nothing tested is never a pass"
    # a JSON without verdicts (an older tool): a row that did not pass is a failure
    old = [{"test": "tokens/gof", "kind": "gof", "pass": False, "p": 0.0}]
    r = fs.audit_tokens(L, t, tool=_fake_tool(tmp_path, old, 1))
    assert not r.passed and [x.name for x in r.failed] == ["tokens/gof"] and r.untested == []


def test_per_row_temperature_one_row_and_pairs_rows(tool, ctx, rng, tmp_clean):
    L = logits(rng, 4, 700)
    T = np.array([0.5, 1.0, 1.7, 0.9], dtype=np.float32)
    s = ctx.sample_logits(L, temperature=T, seed=9, draws=4000)
    r = fs.audit_tokens(L, s.tokens, temperature=T, pairs_rows=True, tool=tool)
    assert r.passed, str(r)
    assert "tokens/pairs-rows" in [x.name for x in r.rows]
    # the same tokens under one temperature for every row: the wrong reference
    assert not fs.audit_tokens(L, s.tokens, temperature=1.0, tool=tool).passed
    # a 1-D row and its draws; greedy
    s1 = ctx.sample_logits(L[1], temperature=1.0, seed=4, draws=3000)
    assert s1.tokens.shape == (1, 3000)
    assert fs.audit_tokens(L[1], s1.tokens[0], tool=tool).passed
    g = ctx.sample_logits(L, temperature=0, draws=10)
    assert fs.audit_tokens(L, g.tokens, temperature=0, tool=tool).passed


def test_temperature_multiplied_fails(tool, rng, tmp_clean):
    """numpy drawing from softmax(l * T) where softmax(l / T) is meant (docs/AUDIT.md's gallery):
    a failed test is passed=False with exit status 1, not an exception."""
    L = logits(rng, 4, 1000)
    T = 0.7
    good = draw(rng, softmax(L, 1 / T), 2000)
    assert fs.audit_tokens(L, good, temperature=T, tool=tool).passed
    bad = draw(rng, softmax(L, T), 2000)
    r = fs.audit_tokens(L, bad, temperature=T, tool=tool)
    assert not r.passed and r.exit_status == 1
    assert r.row("gof") in r.failed and r.row("gof").p_value < r.row("gof").alpha
    assert "FAILED" in str(r)


def test_deep_tail_cut_fails(tool, rng, tmp_clean):
    """A sampler that never draws a token more than 10 nats below the head (a truncated candidate
    list) fails the tail test; the same numpy sampler without the cut passes."""
    B, V = 2, 2000
    L = np.zeros((B, V), dtype=np.float32)
    L[:, 1:8] = rng.uniform(-3, -1, (B, 7))
    L[:, 8:] = rng.uniform(-13, -10.5, (B, V - 8))  # ~1 % of the mass, 10.5..13 nats down
    P = softmax(L, 1.0)
    N = 20000
    assert fs.audit_tokens(L, draw(rng, P, N), tool=tool).passed
    cut = np.where(np.log(P) < np.log(P.max(axis=1, keepdims=True)) - 10, 0.0, P)
    r = fs.audit_tokens(L, draw(rng, cut, N), tool=tool)
    assert not r.passed and r.exit_status == 1
    tail10 = r.row("tail10")
    assert not tail10.passed and tail10.observed == 0 and tail10.expected > 100


# ---- the rule flags pass through -----------------------------------------------------------


def test_top_k_passes_under_its_k_and_fails_under_another(tool, ctx, rng, tmp_clean):
    L = logits(rng, 3, 800, scale=1.0)
    s = ctx.sample_logits(L, seed=5, draws=3000, top_k=20)
    r = fs.audit_tokens(L, s.tokens, top_k=20, tool=tool)
    assert r.passed, str(r)
    assert "tokens/boundary" in [x.name for x in r.rows]
    assert not fs.audit_tokens(L, s.tokens, top_k=10, tool=tool).passed  # outside the support
    assert not fs.audit_tokens(L, s.tokens, top_k=40, tool=tool).passed  # mass 21..40 missing
    assert not fs.audit_tokens(L, s.tokens, tool=tool).passed  # no rule at all


def test_per_row_rules_filter_and_temperature(tool, ctx, rng, tmp_clean):
    L = logits(rng, 4, 600, scale=3.0)
    k = np.array([1, 5, 0, 30], dtype=np.int64)
    p = np.array([0.5, 1.0, 0.8, 0.95], dtype=np.float32)
    s = ctx.sample_logits(L, seed=2, draws=3000, temperature=0.8, top_k=k, top_p=p)
    assert fs.audit_tokens(L, s.tokens, temperature=0.8, row_top_k=k, top_p=p, tool=tool).passed
    k2 = k.copy()
    k2[3] = 15
    assert not fs.audit_tokens(L, s.tokens, temperature=0.8, top_k=k2, top_p=p, tool=tool).passed

    kw = dict(min_p=0.01, top_p=0.9, filter="top-nsigma", filter_value=1.0)
    s = ctx.sample_logits(L, seed=7, draws=3000, **kw)
    for flt in (("top-nsigma", 1.0), "top-nsigma=1.0"):
        r = fs.audit_tokens(L, s.tokens, min_p=0.01, top_p=0.9, filter=flt, tool=tool)
        assert r.passed, str(r)
    assert fs.audit_tokens(L, s.tokens, tool=tool, **kw).passed
    v = np.array([1.0, 1.0, 1.0, 1.0])
    assert fs.audit_tokens(
        L, s.tokens, min_p=0.01, top_p=0.9, filter="top-nsigma", row_filter_value=v, tool=tool
    ).passed
    assert not fs.audit_tokens(L, s.tokens, min_p=0.01, top_p=0.9, tool=tool).passed


def test_without_replacement(tool, ctx, rng, tmp_clean):
    L = logits(rng, 3, 6, scale=1.0)  # small V: the whole-tuple test runs too
    s = ctx.sample_logits(L, seed=4, draws=4000, without_replacement_k=3)
    assert s.tokens.shape == (3, 4000, 3)
    r = fs.audit_tokens(L, s.tokens, without_replacement=3, tool=tool)
    assert r.passed, str(r)
    names = [x.name for x in r.rows]
    assert "tokens/pl-cond" in names and "tokens/pl-tuples" in names
    # positions drawn with replacement (independent draws side by side) fail
    w = np.stack([draw(rng, softmax(L, 1.0), 4000) for _ in range(3)], axis=2)
    assert not fs.audit_tokens(L, w, without_replacement=3, tool=tool).passed


# ---- report_dir -------------------------------------------------------------------------------


def test_report_dir(tool, ctx, rng, tmp_path, tmp_clean):
    L = logits(rng, 2, 500)
    s = ctx.sample_logits(L, seed=1, draws=2000)
    out = tmp_path / "report"
    try:
        r = fs.audit_tokens(L, s.tokens, report_dir=out, tool=tool)
    except fs.FlashSampleAuditError as e:
        if "matplotlib" in str(e):
            pytest.skip("no python3 with matplotlib for the report's figures: %s" % e)
        raise
    assert r.passed and r.report == str(out / "report.md")
    assert (out / "report.md").is_file() and (out / "audit.json").is_file()
    assert list(out.glob("*.png"))
    assert "gof" in (out / "report.md").read_text()


# ---- errors -----------------------------------------------------------------------------------


def test_the_tools_refusal_raises_with_its_message(tool, rng, tmp_clean):
    """Exit 2 (bad input the command line sees, here a rule it has no reference for) raises
    FlashSampleAuditError with the tool's message; the temporary files are removed."""
    L = logits(rng, 2, 100)
    t = np.zeros((2, 10), dtype=np.int64)
    with pytest.raises(fs.FlashSampleAuditError) as e:
        fs.audit_tokens(L, t, filter=("no-such-rule", 1.0), tool=tool)
    assert e.value.exit_status == 2 and e.value.status_name == "FLS_ERR_PARAM"
    assert "no-such-rule" in str(e.value) and "no-such-rule" in e.value.tool_message
    assert isinstance(e.value, fs.FlashSampleError)


def test_missing_tool(rng, tmp_path, monkeypatch, tmp_clean):
    L = logits(rng, 2, 100)
    t = np.zeros((2, 10), dtype=np.int64)
    with pytest.raises(fs.FlashSampleAuditError) as e:
        fs.audit_tokens(L, t, tool=tmp_path / "no" / "flashsample")
    assert e.value.status_name == "FLS_ERR_UNSUPPORTED" and e.value.exit_status is None
    assert "FLASHSAMPLE_TOOL" in str(e.value) and "ninja -C build tools/flashsample" in str(e.value)
    monkeypatch.delenv("FLASHSAMPLE_TOOL", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(fs.FlashSampleAuditError, match="was not found.*FLASHSAMPLE_TOOL"):
        fs.audit_tokens(L, t)
    monkeypatch.setenv("FLASHSAMPLE_TOOL", str(tmp_path / "nothing"))
    with pytest.raises(fs.FlashSampleAuditError, match="FLASHSAMPLE_TOOL=.*not an executable"):
        fs.audit_tokens(L, t)


def _bad_inputs(rng):
    L = logits(rng, 3, 50)
    t = np.zeros((3, 20), dtype=np.int64)
    nan = L.copy()
    nan[1, 17] = np.nan
    dead = L.copy()
    dead[2] = -np.inf
    return [
        # (exception, message fragment, args, kwargs)
        (TypeError, "float64", (L.astype(np.float64), t), {}),
        (TypeError, "dtype int32", (L.astype(np.int32), t), {}),
        (ValueError, r"logits must be \(B, V\)", (L[None], t), {}),
        (ValueError, r"logits\[1, 17\] is nan", (nan, t), {}),
        (ValueError, "row 2 of logits is all -inf", (dead, t), {}),
        (TypeError, "tokens must hold integers", (L, t.astype(np.float32)), {}),
        (ValueError, r"\(B, N\) = \(3, N\)", (L, t[:2]), {}),
        (ValueError, "need without_replacement", (L, t[:, :, None]), {}),
        (ValueError, r"\(B, N, K\) = \(3, N, 2\)", (L, t), {"without_replacement": 2}),
        (ValueError, r"\(B, N, K\) = \(3, N, 2\)", (L, t[:, :, None]), {"without_replacement": 2}),
        (ValueError, "no draws", (L, t[:, :0]), {}),
        (ValueError, "temperature = -1", (L, t), {"temperature": -1.0}),
        (ValueError, "temperature must have one entry per row", (L, t), {"temperature": [1, 2]}),
        (ValueError, "temperature: row 1 has nan", (L, t), {"temperature": [1, np.nan, 1]}),
        (TypeError, "temperature must be a number", (L, t), {"temperature": "hot"}),
        (ValueError, "top_k = 51", (L, t), {"top_k": 51}),
        (TypeError, "top_k must be an integer", (L, t), {"top_k": 2.5}),
        (ValueError, "row_top_k: row 0 has -1", (L, t), {"row_top_k": [-1, 1, 1]}),
        (ValueError, "row_top_k must have one entry per row", (L, t), {"top_k": [1, 2]}),
        (
            ValueError,
            "give per-row values once",
            (L, t),
            {"top_k": [1, 2, 3], "row_top_k": [1] * 3},
        ),
        (ValueError, "top_p = 0.0", (L, t), {"top_p": 0.0}),
        (ValueError, "min_p = 1.5", (L, t), {"min_p": 1.5}),
        (ValueError, "row_top_p: row 2 has 1.5", (L, t), {"row_top_p": [1, 1, 1.5]}),
        (ValueError, "needs a value", (L, t), {"filter": "top-nsigma"}),
        (ValueError, "need filter=NAME", (L, t), {"filter_value": 1.0}),
        (ValueError, "must be finite and >= 0", (L, t), {"filter": ("top-nsigma", -1.0)}),
        (ValueError, "row_filter_value must have one", (L, t), {"filter": ("top-nsigma", [1.0])}),
        (ValueError, "both set top-k", (L, t), {"filter": ("top-k", 5), "top_k": 5}),
        (TypeError, "filter must be", (L, t), {"filter": 3}),
        (ValueError, "per-row K", (L, t), {"without_replacement": [1, 2, 2]}),
        (ValueError, "without_replacement = 51", (L, t), {"without_replacement": 51}),
        (ValueError, "seed = -1", (L, t), {"seed": -1}),
    ]


def test_bad_inputs_raise_before_any_file_is_written(rng, tmp_path, monkeypatch, tmp_clean):
    def no_files(*a, **k):
        raise AssertionError("audit_tokens wrote a file before refusing the input")

    monkeypatch.setattr(_audit.np, "save", no_files)
    monkeypatch.setattr(_audit.tempfile, "TemporaryDirectory", no_files)
    monkeypatch.setattr(_audit.subprocess, "run", no_files)
    for exc, match, args, kw in _bad_inputs(rng):
        with pytest.raises(exc, match=match) as e:
            # a tool that does not exist: the input is refused before the tool is looked for
            fs.audit_tokens(*args, tool=tmp_path / "absent", **kw)
        assert isinstance(e.value, fs.FlashSampleError) and e.value.function == "audit_tokens"
        assert not isinstance(e.value, fs.FlashSampleAuditError)
    assert os.listdir(tmp_path) == ["tmp"]
