#!/usr/bin/env bash
# tools/mutation-table.sh [WORKDIR] [--only SUBSTRING]
#
# A developer script (not run in CI): the mutation table of the rules' cuts.
# For every rule's cut in variants/ (filters.h: min-p, top-k, top-p;
# top_nsigma.h; epsilon.h) it applies each mutant of the list below to a COPY
# of the source tree (WORKDIR/src, default /tmp/fls-mutation), builds a
# CPU-only library with the tests there (-Dcuda=disabled, one build folder,
# rebuilt incrementally), runs the unit tests `boundary`
# (tests/unit/test_boundary.c) and `rules` (tests/unit/test_rules.c) and
# records whether the mutant is caught and by which, then writes the table
# to docs/MUTATIONS.md of the checkout it was run from (FLS_MUTATION_OUT
# overrides the path). The working tree itself is never modified.
#
# A mutant is one or more exact text replacements (each must match as many
# times as it says, else the script stops: the mutant no longer applies to
# the source and needs updating). Needs meson, ninja, python3, Criterion.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="/tmp/fls-mutation"
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    *) WORK="$1"; shift ;;
    esac
done
OUT="${FLS_MUTATION_OUT:-$ROOT/docs/MUTATIONS.md}"
SRC="$WORK/src"
BUILD="$WORK/build"
mkdir -p "$WORK"

# the copy: tracked and untracked-but-not-ignored files of the checkout; a
# file is rewritten only when its content changed (the build stays incremental)
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard) | python3 -c '
import os, shutil, sys
root, dst = sys.argv[1:3]
for f in sys.stdin.buffer.read().decode().split("\0"):
    s = os.path.join(root, f)
    if not f or not os.path.isfile(s) or os.path.islink(s):
        continue
    d = os.path.join(dst, f)
    if os.path.isfile(d) and open(s, "rb").read() == open(d, "rb").read():
        continue
    os.makedirs(os.path.dirname(d), exist_ok=True)
    shutil.copyfile(s, d)
    shutil.copymode(s, d)
' "$ROOT" "$SRC"

if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" "$SRC" -Dcuda=disabled -Dtests=true --buildtype=release >"$WORK/setup.log" 2>&1 ||
        { cat "$WORK/setup.log"; exit 1; }
fi

ONLY="$ONLY" python3 - "$SRC" "$BUILD" "$OUT" "$WORK" <<'PYEOF'
import os, re, subprocess, sys, time

src, build, out_path, work = sys.argv[1:5]
only = os.environ.get("ONLY", "")
F, N, E = "variants/filters.h", "variants/top_nsigma.h", "variants/epsilon.h"

MINP = "*c = fls_cut_max(c_prev, fls_cut_from_offset(st->m, log(p)));"
TOPK = "*c = fls_cut_max(c_prev, st->top[k - 1].x);"
TPT = "const double target = p * Z;"
TPCMP = "if (!(A < target)) {"
NSC = "*c = fls_cut_max(c_prev, fls_cut_from_threshold(st->m - n * sigma));"
EPC = "float t = fls_cut_from_offset(st->m, log(Z) + log(eps));"
REV = ("FLS_HD double fls_mut_rev_(const fls_filter_stats *st, int64_t n)\n{\n    double s = 0.0;\n"
       "    for (int64_t j = n; j-- > 0;)\n        s += fls_top_w(st, j);\n    return s;\n}\n\n"
       "FLS_HD int fls_top_p_cut(")

# (rule, mutant, [(file, old, new, count)], note)
M = [
    ("min-p", "strict: x - m > ln p", [(F, MINP,
        "{ float c0_ = fls_cut_from_offset(st->m, log(p)); if ((double)c0_ - st->m == log(p)) "
        "c0_ = nextafterf(c0_, INFINITY); *c = fls_cut_max(c_prev, c0_); }", 1)], ""),
    ("min-p", "threshold ln p + 1 ulp", [(F, MINP, MINP.replace("log(p)", "nextafter(log(p), INFINITY)"), 1)], ""),
    ("min-p", "threshold ln p - 1 ulp", [(F, MINP, MINP.replace("log(p)", "nextafter(log(p), -INFINITY)"), 1)], ""),
    ("min-p", "cut + 1 float ulp", [(F, MINP, "*c = fls_cut_max(c_prev, nextafterf(fls_cut_from_offset(st->m, log(p)), INFINITY));", 1)], ""),
    ("min-p", "cut - 1 float ulp", [(F, MINP, "*c = fls_cut_max(c_prev, nextafterf(fls_cut_from_offset(st->m, log(p)), -INFINITY));", 1)], ""),
    ("min-p", "ln p x 1.001", [(F, MINP, MINP.replace("log(p)", "log(p) * 1.001"), 1)], ""),
    ("min-p", "ln p x 0.999", [(F, MINP, MINP.replace("log(p)", "log(p) * 0.999"), 1)], ""),
    ("min-p, epsilon", "fls_cut_from_offset strict (> instead of >=)", [(F, "- m >= L", "- m > L", 4)], "the doc comment's formula too"),
    ("top-k", "strict: x > k-th value (= cut + 1 float ulp)", [(F, TOPK, "*c = fls_cut_max(c_prev, nextafterf(st->top[k - 1].x, INFINITY));", 1)], ""),
    ("top-k", "cut - 1 float ulp", [(F, TOPK, "*c = fls_cut_max(c_prev, nextafterf(st->top[k - 1].x, -INFINITY));", 1)], ""),
    ("top-k", "k-th value x 1.001", [(F, TOPK, "*c = fls_cut_max(c_prev, (float)((double)st->top[k - 1].x * 1.001));", 1)], ""),
    ("top-k", "k-th value x 0.999", [(F, TOPK, "*c = fls_cut_max(c_prev, (float)((double)st->top[k - 1].x * 0.999));", 1)], ""),
    ("top-k", "off by one: the (k+1)-th value", [(F, TOPK, "*c = fls_cut_max(c_prev, st->top[k < st->ntop ? k : k - 1].x);", 1)], ""),
    ("top-k", "off by one: the (k-1)-th value", [(F, TOPK, "*c = fls_cut_max(c_prev, st->top[k >= 2 ? k - 2 : 0].x);", 1)], ""),
    ("top-p", "strict: head mass <= p Z kept", [(F, TPCMP, "if (!(A <= target)) {", 1), (F, "if (st->pw[mid] < target)", "if (st->pw[mid] <= target)", 1)], ""),
    ("top-p", "target p Z + 1 ulp", [(F, TPT, "const double target = nextafter(p * Z, INFINITY);", 1)], ""),
    ("top-p", "target p Z - 1 ulp", [(F, TPT, "const double target = nextafter(p * Z, -INFINITY);", 1)], ""),
    ("top-p", "target x 1.001", [(F, TPT, "const double target = p * Z * 1.001;", 1)], ""),
    ("top-p", "target x 0.999", [(F, TPT, "const double target = p * Z * 0.999;", 1)], ""),
    ("top-p", "wrong boundary: the token's own mass counted", [(F, TPCMP, "if (!(A + fls_top_w(st, i) < target)) {", 1)], ""),
    ("top-p", "wrong order: head mass summed from the boundary up", [(F, "FLS_HD int fls_top_p_cut(", REV, 1), (F, TPCMP, "if (!(fls_mut_rev_(st, i) < target)) {", 1)],
     "the loop only (the CPU engine's; pw, the CUDA engine's prefix sums, unchanged)"),
    ("top-p", "wrong Z: the row's sum after an earlier cut", [(F, "if (c_prev == -INFINITY) {\n        Z = fls_lse_term", "if (1) {\n        Z = fls_lse_term", 1)], ""),
    ("top-p", "ties split: one token at a time", [(F, "} while (i < n && t[i].x == xg);", "} while (0);", 1)],
     "the same support on every row (ties share the float cut); rules' top_p_prefix_sums_same_cut sees the cut's value differ: the last group's x instead of c_prev when the nucleus ends the list"),
    ("top-n-sigma", "strict: x > m - n sigma", [(N, NSC,
        "{ float c0_ = fls_cut_from_threshold(st->m - n * sigma); if ((double)c0_ == st->m - n * sigma) "
        "c0_ = nextafterf(c0_, INFINITY); *c = fls_cut_max(c_prev, c0_); }", 1)], ""),
    ("top-n-sigma", "threshold + 1 ulp", [(N, NSC, NSC.replace("st->m - n * sigma", "nextafter(st->m - n * sigma, INFINITY)"), 1)], ""),
    ("top-n-sigma", "threshold - 1 ulp", [(N, NSC, NSC.replace("st->m - n * sigma", "nextafter(st->m - n * sigma, -INFINITY)"), 1)], ""),
    ("top-n-sigma", "cut + 1 float ulp", [(N, NSC, "*c = fls_cut_max(c_prev, nextafterf(fls_cut_from_threshold(st->m - n * sigma), INFINITY));", 1)], ""),
    ("top-n-sigma", "cut - 1 float ulp", [(N, NSC, "*c = fls_cut_max(c_prev, nextafterf(fls_cut_from_threshold(st->m - n * sigma), -INFINITY));", 1)], ""),
    ("top-n-sigma", "n sigma x 1.001", [(N, NSC, NSC.replace("n * sigma", "n * sigma * 1.001"), 1)], ""),
    ("top-n-sigma", "n sigma x 0.999", [(N, NSC, NSC.replace("n * sigma", "n * sigma * 0.999"), 1)], ""),
    ("top-n-sigma", "sigma with n - 1 (sample std)", [(N, "st->mom_n > 0.0 ? st->mom_m2 / st->mom_n : 0.0",
        "st->mom_n > 1.0 ? st->mom_m2 / (st->mom_n - 1.0) : 0.0", 1)], ""),
    ("top-n-sigma", "fls_cut_from_threshold strict (> instead of >=)", [(F, "if ((double)c < t)", "if ((double)c <= t)", 1),
        (F, "(double)nextafterf(c, -INFINITY) >= t", "(double)nextafterf(c, -INFINITY) > t", 1)], ""),
    ("epsilon", "strict: x - m > log Z + ln eps", [(E, EPC, EPC + " if ((double)t - st->m == log(Z) + log(eps)) t = nextafterf(t, INFINITY);", 1)], ""),
    ("epsilon", "threshold + 1 ulp", [(E, EPC, EPC.replace("log(Z) + log(eps)", "nextafter(log(Z) + log(eps), INFINITY)"), 1)], ""),
    ("epsilon", "threshold - 1 ulp", [(E, EPC, EPC.replace("log(Z) + log(eps)", "nextafter(log(Z) + log(eps), -INFINITY)"), 1)], ""),
    ("epsilon", "cut + 1 float ulp", [(E, EPC, EPC + " t = nextafterf(t, INFINITY);", 1)], ""),
    ("epsilon", "cut - 1 float ulp", [(E, EPC, EPC + " t = nextafterf(t, -INFINITY);", 1)], ""),
    ("epsilon", "threshold x 1.001", [(E, EPC, EPC.replace("log(Z) + log(eps)", "(log(Z) + log(eps)) * 1.001"), 1)], ""),
    ("epsilon", "threshold x 0.999", [(E, EPC, EPC.replace("log(Z) + log(eps)", "(log(Z) + log(eps)) * 0.999"), 1)], ""),
    ("epsilon", "Z over the support instead of the row", [(E, "const double Z = fls_lse_term(st->lse_s, st->lse_m, st->m);",
        "const double Z = (c_prev > -INFINITY && st->top && st->ntop > 0) ? fls_top_sum(st, fls_top_count_ge(st, c_prev)) "
        ": fls_lse_term(st->lse_s, st->lse_m, st->m);", 1)], ""),
    ("epsilon", "the maximum not always kept", [(E, "t = t < m ? t : m;", "(void)m;", 1)], ""),
]

TESTS = [("boundary", "tests/unit/unit_boundary"), ("rules", "tests/unit/unit_rules")]
env = dict(os.environ, FLS_KAT_PATH=os.path.join(src, "tests", "kat_philox.txt"))


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, cwd=build, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode("utf-8", "replace") + "\nTIMEOUT"


def run_tests():
    res = {}
    for name, exe in TESTS:
        rc, log = run([os.path.join(build, exe), "--jobs", "1"], 600)
        m = re.search(r"BOUNDARY total: (\d+) of (\d+) checks failed", log)
        s = re.search(r"Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)", log)
        if name == "boundary" and m:
            per = re.findall(r"BOUNDARY (\S+): (\d+) of (\d+) checks failed", log)
            detail = "%s of %s checks" % (m.group(1), m.group(2))
            bad = ["%s %s" % (r, n) for r, n, _ in per if r != "total" and n != "0"]
            if bad:
                detail += " (" + ", ".join(bad) + ")"
        elif s:
            detail = "%d of %s tests" % (int(s.group(3)) + int(s.group(4)), s.group(1))
        else:
            detail = "rc %d" % rc
        res[name] = (rc != 0, detail, log)
    return res


def build_targets():
    rc, log = run(["ninja", "-C", build] + [exe for _, exe in TESTS], 1800)
    return rc, log


rc, log = build_targets()
if rc:
    sys.exit("the unmutated tree does not build:\n" + log[-4000:])
base = run_tests()
for name, (failed, detail, log) in base.items():
    if failed:
        sys.exit("unit_%s fails on the unmutated tree (%s):\n%s" % (name, detail, log[-4000:]))

rows = []
for rule, name, edits, note in M:
    if only and only not in rule + " " + name:
        continue
    originals = {}
    try:
        for f, old, new, count in edits:
            path = os.path.join(src, f)
            text = originals.get(f)
            if text is None:
                text = originals[f] = open(path).read()
            cur = open(path).read()
            if cur.count(old) != count:
                raise SystemExit("mutant '%s: %s': '%s' occurs %d times in %s, expected %d" %
                                 (rule, name, old, cur.count(old), f, count))
            open(path, "w").write(cur.replace(old, new))
        t0 = time.time()
        rc, log = build_targets()
        if rc:
            rows.append((rule, name, edits, "does not build", "", note))
            print("%-12s %-50s does not build" % (rule, name), flush=True)
            continue
        res = run_tests()
        caught = [n for n, (failed, _, _) in res.items() if failed]
        detail = "; ".join("%s: %s" % (n, res[n][1]) for n in caught)
        rows.append((rule, name, edits, ", ".join(caught) if caught else "NOT CAUGHT", detail, note))
        print("%-12s %-50s %-16s %s (%.0fs)" % (rule, name, ", ".join(caught) or "NOT CAUGHT", detail, time.time() - t0),
              flush=True)
    finally:
        for f, text in originals.items():
            open(os.path.join(src, f), "w").write(text)
# rebuild the unmutated tree, so the build folder matches the copy
build_targets()


def patch_line(edits):
    parts = []
    for f, old, new, count in edits:
        o = " ".join(old.split())
        n = " ".join(new.split())
        parts.append("`%s`: `%s` → `%s`%s" % (os.path.basename(f), o.replace("|", "\\|"), n.replace("|", "\\|"),
                                              " (×%d)" % count if count > 1 else ""))
    return "; ".join(parts)


with open(out_path, "w") as o:
    o.write("# Mutation table of the rules' cuts\n\n")
    o.write("Each row is a mutant of a rule's cut in `variants/` (a copy of the tree, never the checkout),\n"
            "built CPU-only (`-Dcuda=disabled`) and run against the unit tests `boundary`\n"
            "(`tests/unit/test_boundary.c`: every registry rule's threshold exactly at, one ulp below and\n"
            "one ulp above a logit, against a brute force from docs/RULES.md) and `rules`\n"
            "(`tests/unit/test_rules.c`). \"Caught by\" lists the tests that fail; \"failed\" counts the\n"
            "failing boundary checks (a case on one path, from logits or fused) or the failing Criterion\n"
            "tests of `rules`.\n\n")
    o.write("Regenerate (a few minutes; the working tree is not touched):\n\n"
            "    tools/mutation-table.sh            # copy + build in /tmp/fls-mutation, writes docs/MUTATIONS.md\n"
            "    tools/mutation-table.sh --only top-p   # a subset (then the table holds only that subset)\n\n")
    o.write("| rule | mutant | patch | caught by | failed |\n|---|---|---|---|---|\n")
    for rule, name, edits, caught, detail, note in rows:
        c = caught if not note else "%s (%s)" % (caught, note)
        o.write("| %s | %s | %s | %s | %s |\n" % (rule, name, patch_line(edits), c, detail))
    nc = [r for r in rows if r[3] == "NOT CAUGHT"]
    o.write("\n%d mutants, %d caught by a unit test, %d not caught.\n" % (len(rows), len(rows) - len(nc), len(nc)))
    if nc:
        o.write("\nNot caught:\n\n")
        for rule, name, edits, caught, detail, note in nc:
            o.write("- %s, %s%s\n" % (rule, name, ": " + note if note else ""))
print("wrote", out_path)
PYEOF
