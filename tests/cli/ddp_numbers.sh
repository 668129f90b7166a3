#!/usr/bin/env bash
# tests/cli/ddp_numbers.sh BUILD_DIR — the main job checks data-parallel numbers (docs/ddp.md
# "Numbers: n ranks against one"): scenarios/ddp_onestep.json compares
# every 2-rank case (over mpi, the ci profile) with one rank that trains the batch of both
# (`ranks=1`): the loss and the gradient norm at every step (parity) and the step-1
# gradients the optimizer consumed (dump_match), within the measured tolerances.
#  1. the tree as it is: exit 0, every 2-rank case PASS with the three comparisons made
#     against its own ranks=1 case; the 2-rank dump's gradients are those training applied
#     (their norm is the grad_norm metrics.jsonl logged for step 1, also with grad_accum 2,
#     where a replay of the first micro-batch would differ);
#  2. planted data-parallel bugs, each in a temporary copy of the sources (never in this
#     tree) built CPU-only with MPI and run with --trainer: every one makes the run exit 1,
#     FAILs the 2-rank cases naming the check and the step or tensor, and the diagnosis says
#     what kind of error it is:
#       double       the gradient mean divided by the world size twice (the planted change:
#                    the loss moves by ~5e-7, AdamW hides a uniform scale)
#                    -> grad_norm at step 1, grads.lm_head.weight first, "0.5× ... divided by
#                    the world size once too often"
#       bucket_twice bucket 2 all-reduced twice -> only its gradient differs, 2× ("reduced twice")
#       rank0_alone  rank 0's gradients broadcast instead of the sum (the weights stay equal
#                    on every rank) -> "not by one factor"
#       every_micro  the buckets reduced after every micro-batch of an accumulating step
#                    -> the grad_accum 2 cases FAIL ("before the step's last micro-batch"),
#                    static_graph (grad_accum 1) PASSes
# ~1.5 min on 2 cores (one CPU-only build of nsa-train, then one file and 10 tiny cases per
# plant). SKIP (77) without mpirun or an nsa-train built with MPI.
set -u
BUILD=${1:?usage: ddp_numbers.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
SRC=$(pwd)
H="$BUILD/nsa-harness"
SCEN=scenarios/ddp_onestep.json
if [ ! -x "$H" ] || [ ! -x "$BUILD/nsa-train" ]; then echo "SKIP: $H or nsa-train not built"; exit 77; fi
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
"$BUILD/nsa-train" --print-env | grep -q '"mpi": null' && { echo "SKIP: nsa-train built without MPI"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, has, finish
# the 2-rank cases over mpi (and their ranks=1 references, which the runner adds)
run() { local name=$1 want=$2; shift 2
  "$H" run "$SCEN" --profile ci --filter 'transport=mpi,*ranks=2' --quiet "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; tail -5 "$TMP/err"; fi; }
verdicts() { python3 -c '
import json, sys
print(" ".join("%s:%s" % (c["case"].split(",")[1][5:] + "/" + c["case"].split(",")[2][7:], c["verdict"])
               for c in json.load(open(sys.argv[1]))["cases"] if c["case"].endswith("ranks=2")))' "$1/summary.json"; }

# ---- 1. the tree as it is ------------------------------------------------------------------
run "clean: ddp_onestep over mpi" 0 --out "$TMP/clean"
check "clean: 5 two-rank cases and their 5 one-rank references PASS" python3 - "$TMP/clean/summary.json" <<'PY'
import json, sys
cs = json.load(open(sys.argv[1]))["cases"]
assert len(cs) == 10 and all(c["verdict"] == "PASS" for c in cs), [(c["case"], c["verdict"]) for c in cs]
for c in cs:
    if not c["case"].endswith("ranks=2"):
        continue
    f, ref = c["facts"], c["case"][:-len("ranks=2")] + "ranks=1"
    assert f["parity_reference"] == f["parity_reference_grad_norm"] == f["dump_reference"] == ref, (c["case"], f)
    assert 0 <= f["parity_max_rel"] <= f["parity_tolerance"] and 0 <= f["dump_worst_rel"] <= f["dump_tolerance"], f
    assert 0 <= f["parity_max_rel_grad_norm"] <= f["parity_tolerance_grad_norm"], f
    print("      %-45s loss %.2g, grad norm %.2g, step-1 gradients %.2g" %
          (c["case"], f["parity_max_rel"], f["parity_max_rel_grad_norm"], f["dump_worst_rel"]))
PY
check "clean: the report's table of the numbers against one rank" has "$TMP/clean/RESULTS.md" "## ddp_onestep — n ranks against one rank with the batch of all"
# the dump under data parallel holds what the optimizer consumed: its norm is step 1's grad_norm
check "clean: the 2-rank dumps hold the gradients training applied (their norm = step 1's grad_norm)" \
  python3 - "$TMP/clean" <<'PY'
import glob, json, math, subprocess, sys
n = 0
for d in sorted(glob.glob(sys.argv[1] + "/ddp_onestep/*ranks=2")):
    j = json.loads(subprocess.run([sys.executable, "tools/st_dump.py", "--json", "-n", "-1", d + "/step1.safetensors"],
                                  capture_output=True, text=True, check=True).stdout)
    norm = math.sqrt(sum(v * v for t in j["tensors"] if t["name"].startswith("grads.") for v in t["values"]))
    g1 = json.loads(open(d + "/metrics.jsonl").readline())["grad_norm"]
    assert abs(norm - g1) <= 1e-6 * g1, (d, norm, g1)
    n += 1
assert n == 5, n
PY

# ---- 2. planted changes, in a temporary copy -------------------------------------------------
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
mkdir -p "$TMP/src"
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$SRC" ls-files -z --cached --others --exclude-standard | (cd "$SRC" && xargs -0 tar -cf - 2>/dev/null) |
    tar -xf - -C "$TMP/src"
else
  tar -C "$SRC" --exclude=./build --exclude=./reports -cf - . | tar -xf - -C "$TMP/src"
fi
t0=$(date +%s)
if ! CC=$(cache CMAKE_C_COMPILER) cmake -S "$TMP/src" -B "$TMP/b" -DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=ON \
     -DCMAKE_BUILD_TYPE="$(cache CMAKE_BUILD_TYPE)" -DNSA_NATIVE="$(cache NSA_NATIVE)" >"$TMP/cfg.log" 2>&1 ||
   ! cmake --build "$TMP/b" -j"$(nproc)" --target nsa-train >"$TMP/build.log" 2>&1; then
  bad "CPU-only build of the copy"; tail -n 20 "$TMP/cfg.log" "$TMP/build.log"
  finish
fi
echo "      CPU-only build of the copy: $(( $(date +%s) - t0 )) s"

# plant NAME FILE: replace the exact text $OLD by $NEW in the copy's FILE (exactly one
# occurrence), rebuild, run ddp_onestep's mpi cases with that trainer into $TMP/p_NAME
# (exit 1 wanted), restore the file
plant() { local name=$1 file=$2
  cp "$TMP/src/$file" "$TMP/orig"
  if ! OLD=$OLD NEW=$NEW python3 - "$TMP/src/$file" <<'PY'
import os, sys
p = sys.argv[1]; s = open(p).read(); old, new = os.environ["OLD"], os.environ["NEW"]
if s.count(old) != 1:
    sys.exit("the planted text occurs %d times in %s" % (s.count(old), p))
open(p, "w").write(s.replace(old, new))
PY
  then bad "plant $name: the source changed (update the plant)"; return 1; fi
  echo "      plant $name ($file): $(printf '%s' "$NEW" | head -1 | sed 's/^ *//')"
  if cmake --build "$TMP/b" --target nsa-train >"$TMP/build.log" 2>&1; then
    run "plant $name: ddp_onestep FAIL" 1 --trainer "$TMP/b/nsa-train" --out "$TMP/p_$name"
  else bad "plant $name: rebuild"; tail -5 "$TMP/build.log"; fi
  cp "$TMP/orig" "$TMP/src/$file"
  touch "$TMP/src/$file"
}
# verdict_line NAME CASE TEXT: the case's verdict-table row says TEXT
row() { if grep -F "| $2 |" "$TMP/p_$1/RESULTS.md" | grep -qF -- "$3"; then ok "plant $1: $2 says \"$3\""
  else bad "plant $1: $2 lacks \"$3\""; grep -F "| $2 |" "$TMP/p_$1/RESULTS.md" | cut -c1-400; fi; }
diag() { if grep -qF -- "$2" "$TMP/p_$1/RESULTS.md"; then ok "plant $1: RESULTS.md says \"$2\""
  else bad "plant $1: RESULTS.md lacks \"$2\""; sed -n '/^## Diagnosis/,/^## ddp/p' "$TMP/p_$1/RESULTS.md" | head -6 | cut -c1-400; fi; }
C=transport=mpi,mode=default,branch=none,ranks=2

# the planted change: the mean divided by the world size twice
OLD='R.dscale = 1.0 / ((double)R.B * R.T * R.cfg->grad_accum * R.world);'
NEW='R.dscale = 1.0 / ((double)R.B * R.T * R.cfg->grad_accum * R.world * R.world);'
plant double trainer/train.c
check "plant double: every 2-rank case FAIL" test "$(verdicts "$TMP/p_double")" = \
  "default/none:FAIL find_unused/none:FAIL find_unused/sel:FAIL static_graph/none:FAIL static_graph/sel:FAIL"
row double "$C" "grad_norm diverges from transport=mpi,mode=default,branch=none,ranks=1 at step 1"
row double "$C" "37 of 37 tensors differ from transport=mpi,mode=default,branch=none,ranks=1; first differing tensor: \`grads.lm_head.weight\`"
diag double "every step-1 gradient (37 tensors) is 0.5× one rank's"
diag double "the mean over the ranks is divided by the world size once too often"

# one bucket all-reduced twice (synchronously, so the ranks stay in step)
OLD='    if (comm_allreduce_start(d->comm, k, g, b->n, d->eb)) fail(d, k, comm_error(d->comm));'
NEW='    if (k == 2) { int st = 0; if (!comm_allreduce_start(d->comm, k, g, b->n, d->eb)) while (comm_test(d->comm, k, &st) == 0) {} }
    if (comm_allreduce_start(d->comm, k, g, b->n, d->eb)) fail(d, k, comm_error(d->comm));'
plant bucket_twice trainer/ddp.c
row bucket_twice "$C" "1 of 37 tensors differ from transport=mpi,mode=default,branch=none,ranks=1; first differing tensor: \`grads.blocks.1.mlp.up_proj.weight\`"
diag bucket_twice "only 1 of 37 step-1 gradients differ, each 2× one rank's: \`grads.blocks.1.mlp.up_proj.weight\` (bucket 2 of 12)"
diag bucket_twice "a bucket reduced twice"

# rank 0's gradients alone: a broadcast from rank 0 in place of the sum
OLD='MPI_Iallreduce(MPI_IN_PLACE, host, (int)n, elem_bytes == 8 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, c->data,'
NEW='MPI_Ibcast(host, (int)n, elem_bytes == 8 ? MPI_DOUBLE : MPI_FLOAT, 0, c->data,'
plant rank0_alone trainer/comm.c
check "plant rank0_alone: every 2-rank case FAIL" test "$(verdicts "$TMP/p_rank0_alone")" = \
  "default/none:FAIL find_unused/none:FAIL find_unused/sel:FAIL static_graph/none:FAIL static_graph/sel:FAIL"
row rank0_alone "$C" "grad_norm diverges from transport=mpi,mode=default,branch=none,ranks=1 at step 1"
diag rank0_alone "37 of 37 step-1 gradients differ from one rank's and not by one factor"

# the buckets reduced after every micro-batch, not only the step's last
OLD='ddp_begin_backward(R->ddp, k == R->cfg->grad_accum - 1);'
NEW='ddp_begin_backward(R->ddp, 1);'
plant every_micro trainer/train.c
check "plant every_micro: the grad_accum 2 cases FAIL, static_graph (grad_accum 1) PASS" test "$(verdicts "$TMP/p_every_micro")" = \
  "default/none:FAIL find_unused/none:FAIL find_unused/sel:FAIL static_graph/none:PASS static_graph/sel:PASS"
diag every_micro "or a reduction before the step's last micro-batch (grad_accum 2"

finish
