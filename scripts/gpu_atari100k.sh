#!/usr/bin/env bash
# Runs of the Atari 100k sweep on a GPU machine where neither Ray nor the internet is, several at once:
#
#     bash scripts/gpu_atari100k.sh OUT Freeway-seed2 KungFuMaster-seed2 ...
#
# Each GAME-seedK gets the command line sweep.py gives it (`sweep.py --envs GAME --seeds K --preset atari100k
# --out results/atari100k`: main.py --env GAME --seed K --out FOLDER --preset atari100k --threads 1), on the GPU
# (--device auto). Our wheels come from .whl/ours (scripts/fetch_gpu_wheels.sh). The run folders, without their
# checkpoints and replay memories, come back in OUT/runs.tar.gz: `tar -xzf OUT/runs.tar.gz -C results/atari100k`
# puts them where the sweep counts them as done. OUT/runs.log says where each ran, its exit status and wall time.
# On an H100 one run trains in about 4.4 minutes (docs/gpu.md, run 4), its 100 evaluation games aside; a whole
# KungFuMaster run alone, install and both evaluations included, took longer than one 10-minute call (run 5).
# GPU_RUNS_FLAGS: more main.py flags, for a trial (--steps 3000). Without a GPU it runs them on the CPU.
set -uo pipefail
OUT=${1:?usage: bash scripts/gpu_atari100k.sh OUT GAME-seedK ...}
shift
[ $# -gt 0 ] || { echo "gpu_atari100k: name at least one run, as GAME-seedK"; exit 2; }
for run in "$@"; do
    [[ $run =~ ^[A-Za-z]+-seed[0-9]+$ ]] || { echo "gpu_atari100k: $run is not GAME-seedK"; exit 2; }
done
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
WORK=${GPU_RUNS_WORK:-/tmp/gpu-runs}
WHEELS=${WHEELS:-.whl}
export PYTHONUNBUFFERED=1

"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$WHEELS"/ours/*.whl || { echo "gpu_atari100k: cannot install $WHEELS/ours"; exit 1; }
export PYTHONPATH=$WORK/site
mkdir -p "$WORK/runs"
pids=()
for run in "$@"; do
    game=${run%-seed*} seed=${run##*-seed}
    (
        start=$SECONDS
        # shellcheck disable=SC2086  # GPU_RUNS_FLAGS holds several flags
        "$PYTHON" main.py --env "$game" --seed "$seed" --out "$WORK/runs/$run" --preset atari100k --threads 1 \
            ${GPU_RUNS_FLAGS:-} >"$WORK/$run.out" 2>&1
        status=$?
        where=$(grep -o -m1 'device [a-z]*' "$WORK/$run.out")
        echo "$run: exit $status, $((SECONDS - start)) s, ${where:-device unknown}; $(tr '\r' '\n' <"$WORK/$run.out" | grep -v '^ *$' | tail -1)"
    ) >>"$OUT/runs.log" &
    pids+=($!)
done
wait "${pids[@]}"
nvidia-smi --query-gpu=name --format=csv,noheader >>"$OUT/runs.log" 2>/dev/null
tar -czf "$OUT/runs.tar.gz" -C "$WORK/runs" --exclude='*.pt' --exclude=.lock .
cat "$OUT/runs.log"
! grep -q ': exit [1-9]' "$OUT/runs.log"
