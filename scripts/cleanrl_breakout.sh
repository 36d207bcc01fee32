#!/usr/bin/env bash
# CleanRL's side of the Breakout comparison (docs/results.md): runs CleanRL's own dqn_atari.py, unchanged, with the
# settings of our --preset cleanrl-short, and commits-ready files of its training games.
#
#     bash scripts/cleanrl_breakout.sh SEED [STEPS]     # SEED 1, 2 or 3; STEPS 150000 by default
#     THREADS=2 bash scripts/cleanrl_breakout.sh SEED   # torch's CPU threads (OMP_NUM_THREADS), 1 by default
#
# Needs the package index (and GitHub for CleanRL's files, see scripts/cleanrl_source.sh). Builds its own
# environment in .cleanrl/ (git-ignored): CleanRL's pins where they install here (gymnasium 0.29.1, numpy 1,
# tyro 0.5.10), with ale-py 0.9.1 instead of 0.8.1 (0.9 bundles the ROMs, which 0.8.1 fetches through AutoROM) and
# this project's torch 2.13.0 (CPU). ale-py >= 0.9 registers its games only when imported, so the script runs
# dqn_atari.py through a two-line wrapper that imports ale_py first. The run's TensorBoard scalars
# charts/episodic_return and charts/episodic_length become results/breakout/cleanrl-seed<SEED>/episodes.csv
# (step,return,frames: a whole game's raw score and its length in emulator frames), with run.json beside it: the command, CleanRL's commit, the package versions, the machine.
set -euo pipefail

SEED=${1:?usage: bash scripts/cleanrl_breakout.sh SEED [STEPS]}
STEPS=${2:-150000}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-1}  # one thread per run is the most steps per core; the count changes the numerics: run.json says it

cd "$(dirname "$0")/.."
WORK=.cleanrl
VENV=$WORK/venv
SRC=$WORK/src
OUT=results/breakout/cleanrl-seed$SEED
mkdir -p "$WORK"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0
    "$VENV/bin/pip" install -q gymnasium==0.29.1 ale-py==0.9.1 numpy==1.26.4 tyro==0.5.10 tensorboard \
        opencv-python-headless
fi

[ -s "$SRC/COMMIT" ] || bash scripts/cleanrl_source.sh "$SRC"

# --preset cleanrl-short in CleanRL's terms: epsilon from 1 to 0.01 over 100,000 steps is an exploration fraction of
# 100000 / STEPS of the run.
FRACTION=$("$VENV/bin/python" -c "print(100000 / $STEPS)")
ARGS=(--env-id BreakoutNoFrameskip-v4 --seed "$SEED" --total-timesteps "$STEPS" --learning-starts 20000
    --buffer-size 100000 --batch-size 32 --train-frequency 4 --target-network-frequency 1000 --learning-rate 1e-4
    --start-e 1 --end-e 0.01 --exploration-fraction "$FRACTION")
RUN=$WORK/run-seed$SEED
rm -rf "$RUN" && mkdir -p "$RUN"
start=$(date +%s)
(cd "$RUN" && OMP_NUM_THREADS=$THREADS ../venv/bin/python ../src/dqn_atari_ale.py "${ARGS[@]}") >"$RUN/stdout.log" 2>&1
seconds=$(($(date +%s) - start))

mkdir -p "$OUT"
"$VENV/bin/python" - "$RUN" "$OUT" "$(cat "$SRC/COMMIT")" "$seconds" "$THREADS" "${ARGS[@]}" <<'EOF'
import json, os, platform, sys
from importlib.metadata import version
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run, out, commit = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
seconds, threads, args = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
(events,) = [path.parent for path in run.glob("runs/*/events.out.tfevents.*")]
scalars = EventAccumulator(str(events), size_guidance={"scalars": 0}).Reload()
returns, lengths = scalars.Scalars("charts/episodic_return"), scalars.Scalars("charts/episodic_length")
rows = ["step,return,frames"] + [f"{r.step},{r.value:g},{int(l.value)}" for r, l in zip(returns, lengths, strict=True)]
(out / "episodes.csv").write_text("\n".join(rows) + "\n")
packages = ("torch", "gymnasium", "ale-py", "numpy", "tyro", "tensorboard", "opencv-python-headless")
(out / "run.json").write_text(json.dumps({
    "command": "python cleanrl/dqn_atari.py " + " ".join(args),
    # CleanRL's RecordEpisodeStatistics wraps the game below its frame skip and its life-loss episodes: a
    # game's return and length are over all its lives, the length in emulator frames; the step is the agent
    # step at which dqn_atari.py logged the game.
    "columns": {"step": "agent steps", "return": "raw score of the whole game", "frames": "emulator frames"},
    "cleanrl_commit": commit,
    "run_through": "a wrapper that imports ale_py and runs dqn_atari.py unchanged (scripts/cleanrl_breakout.sh)",
    "packages": {name: version(name) for name in packages},
    "python": platform.python_version(),
    "cpus": len(os.sched_getaffinity(0)),
    "torch_threads": threads,
    "wall_seconds": seconds,
    "games": len(rows) - 1,
}, indent=2) + "\n")
print(f"{out}: {len(rows) - 1} games, {seconds / 60:.1f} min")
EOF
