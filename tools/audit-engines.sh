#!/usr/bin/env bash
# tools/audit-engines.sh DEVICE OUTDIR [FLASHSAMPLE]
#
# Audits our own engines end to end with the external-token audit (docs/AUDIT.md), as a
# user would audit any sampler: the command line samples tokens on DEVICE (cpu or cuda),
# then `flashsample audit --logits --tokens --report` tests them against the exact
# distribution, with its figures. Seven runs, each its own report folder in OUTDIR:
#   logits    from materialized logits: 8 hard rows of V = 2048 (a head with a tail 10-25
#             nats below it, masked tokens, peaked, flat, Zipf, ties, a row with one live
#             token, a wide spread), T = 0.7, N draws per row
#   fused     the fused matmul: W (V x D) and H with small integer multiples of 1/8, so
#             the logits H W^T are exact in fp32 whatever the summation order and W is
#             exact in bf16 (--weights-dtype bf16): the audit's logits are the kernel's
#   grouped   the fused matmul, --method grouped (its own noise domain)
#   streamed  the streaming API from logits: chunks of 777 tokens (boundaries split Philox
#             pairs), 3 shards serialized and merged
#   streamed-grouped  the fused streaming API, --method grouped --group-size 64, chunks of
#             100 rows of W (boundaries split groups), 2 shards
#   rules     from logits under --min-p 0.02 --top-k 200 --top-p 0.95 (the rules' exact
#             distribution, with the boundary test)
#   rules-fused  the fused matmul under --min-p 0.05 --top-k 100
# FLASHSAMPLE: the command line (default build/tools/flashsample); FLS_AUDIT_N: draws per
# row (default 200000); a python3 with numpy (FLASHSAMPLE_PYTHON or /usr/bin/python3)
# writes the inputs. Exit status: 0 every audit passed, 1 one failed, 2 bad usage.
set -uo pipefail
if [ $# -lt 2 ] || { [ "$1" != cpu ] && [ "$1" != cuda ]; }; then
    echo "usage: tools/audit-engines.sh cpu|cuda OUTDIR [FLASHSAMPLE]" >&2
    exit 2
fi
DEV=$1
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FS=${3:-$ROOT/build/tools/flashsample}
N=${FLS_AUDIT_N:-200000}
PY=${FLASHSAMPLE_PYTHON:-}
if [ -z "$PY" ]; then
    for p in /usr/bin/python3 python3; do
        if "$p" -c 'import numpy' 2>/dev/null; then PY=$(command -v "$p"); break; fi
    done
fi
[ -x "$FS" ] || { echo "audit-engines: no command line at $FS (build it: ninja -C build)" >&2; exit 2; }
[ -n "$PY" ] || { echo "audit-engines: no python3 with numpy (Debian: python3-numpy)" >&2; exit 2; }
export FLASHSAMPLE_PYTHON=$PY
IN="$OUT/inputs"
mkdir -p "$IN"
"$PY" - "$IN" <<'EOF'
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(20261201)
V = 2048
L = np.full((8, V), -np.inf, dtype=np.float64)
L[0] = rng.normal(0, 1, V); L[0, 1:200] = L[0, 0] - rng.uniform(10, 25, 199) * 0.7  # head + deep tail (nats at T=0.7)
L[1] = rng.normal(0, 2, V); L[1, ::3] = -np.inf                                         # masked tokens
L[2] = rng.normal(0, 1, V); L[2, 7] = 12.0                                              # peaked
L[3] = 0.0                                                                              # flat (all ties)
L[4] = -1.1 * np.log(np.arange(1, V + 1))                                               # Zipf
L[5, 100] = 3.0                                                                         # one live token
L[6] = rng.normal(0, 1, V); L[6, 10:20] = 5.0                                           # ties at the head
L[7] = rng.normal(0, 4, V)                                                              # wide spread
np.save(f"{d}/L.npy", L.astype(np.float32))
# The fused case: exact logits. W, H in multiples of 1/8 with |entries| <= 2: the products
# are multiples of 1/64, their sums over D = 64 exact in fp32, and W exact in bf16.
D, Vf, B = 64, 1024, 8
W = rng.integers(-16, 17, size=(Vf, D)).astype(np.float32) / 8
H = rng.integers(-4, 5, size=(B, D)).astype(np.float32) / 8
W[:, 0] = np.where(np.arange(Vf) < 8, 16 / 8, W[:, 0])
np.save(f"{d}/W.npy", W)
np.save(f"{d}/H.npy", H)
Lf = (H.astype(np.float64) @ W.astype(np.float64).T)
assert np.all(Lf == (H @ W.T)), "the fused logits must be exact in fp32"
np.save(f"{d}/Lf.npy", Lf.astype(np.float32))
EOF
[ $? -eq 0 ] || { echo "audit-engines: writing the inputs failed" >&2; exit 2; }

status=0
run() { # NAME, then the sample arguments; then -- and the audit arguments
    local name=$1
    shift
    local sargs=() aargs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do sargs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    aargs=("$@")
    echo "== $name ($DEV): sample ${sargs[*]}"
    if ! "$FS" sample --device "$DEV" "${sargs[@]}" --seed 12 --samples "$N" --out "$IN/T_$name.npy" \
        >"$OUT/sample_$name.log" 2>&1; then
        cat "$OUT/sample_$name.log"
        status=1
        return
    fi
    "$FS" audit --tokens "$IN/T_$name.npy" "${aargs[@]}" --json "$OUT/audit_$name.json" \
        --report "$OUT/report_$name" >"$OUT/audit_$name.txt" 2>&1
    local rc=$?
    tail -4 "$OUT/audit_$name.txt"
    echo "== $name: audit exit $rc"
    [ $rc -eq 0 ] || status=1
}
run logits --logits "$IN/L.npy" --temperature 0.7 -- --logits "$IN/L.npy" --temperature 0.7
run fused --weights "$IN/W.npy" --hidden "$IN/H.npy" --weights-dtype bf16 --temperature 0.7 \
    -- --logits "$IN/Lf.npy" --temperature 0.7
run grouped --weights "$IN/W.npy" --hidden "$IN/H.npy" --weights-dtype bf16 --temperature 0.7 \
    --method grouped --group-size 128 -- --logits "$IN/Lf.npy" --temperature 0.7
# the streaming API (docs/GROUPED.md): chunk boundaries that split Philox pairs and groups,
# shards serialized and merged
run streamed --logits "$IN/L.npy" --temperature 0.7 --stream-chunk 777 --shards 3 \
    -- --logits "$IN/L.npy" --temperature 0.7
run streamed-grouped --weights "$IN/W.npy" --hidden "$IN/H.npy" --weights-dtype bf16 --temperature 0.7 \
    --method grouped --group-size 64 --stream-chunk 100 --shards 2 -- --logits "$IN/Lf.npy" --temperature 0.7
run rules --logits "$IN/L.npy" --temperature 0.7 --min-p 0.02 --top-k 200 --top-p 0.95 \
    -- --logits "$IN/L.npy" --temperature 0.7 --min-p 0.02 --top-k 200 --top-p 0.95
run rules-fused --weights "$IN/W.npy" --hidden "$IN/H.npy" --weights-dtype bf16 --temperature 0.7 \
    --min-p 0.05 --top-k 100 -- --logits "$IN/Lf.npy" --temperature 0.7 --min-p 0.05 --top-k 100
rm -f "$IN"/T_*.npy
echo "audit-engines ($DEV): $([ $status -eq 0 ] && echo 'every audit passed' || echo 'an audit FAILED'); reports in $OUT"
exit $status
