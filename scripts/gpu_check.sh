#!/usr/bin/env bash
# The GPU check, on a machine with a CUDA GPU and PyTorch where nothing can be downloaded:
#
#     bash scripts/fetch_gpu_wheels.sh     # first, where the internet is: the wheels and CleanRL's script into .whl/
#     bash scripts/gpu_check.sh OUT        # then on the GPU machine, with .whl/ beside the checkout
#
# It installs our wheels and CleanRL's, each into a folder of its own (CleanRL's pins gymnasium 0.29.1,
# ale-py 0.9.1 and numpy 1), runs the tests marked cuda (the memories on the device, the loop end to end,
# a resume across devices, an evaluation, Catch learnt on the GPU, C51 and noisy layers in graphs), then bench.py --gpu: the learning step,
# where a step's time goes, our loop with uniform and prioritized replay, frames on the device and in host
# RAM, beside CleanRL's dqn_atari.py with the same settings, alternating. It writes OUT/gpu_check.json (the
# figures, with the GPU, the host's CPU model and the commit: GPU_CHECK_COMMIT where the tree has no history) and
# OUT/gpu_check.log (everything printed). The 28 cuda tests alone took 251 s on an H100 (run 6 of docs/gpu.md): with
# them, a bench part or two runs past one 10-minute call, so select tests with GPU_CHECK_TESTS or run them in a call
# of their own. The bench parts, without the tests (runs 3 and 4, with 24 quicker tests):
# side about 5 minutes, atari100k about 3. To try it without a GPU:
# GPU_CHECK_QUICK=1 (a short, rough bench) and WHEELS=FOLDER (wheels for this machine's Python). GPU_CHECK_TESTS=EXPR
# runs only the cuda tests that pytest -k EXPR selects; GPU_CHECK_PARTS='side atari100k' (both, the default)
# picks bench.py's parts: our loop beside CleanRL's, and the Atari 100k preset eager and graphed; 'envs' (about 8
# minutes, not in the default) our loop at one game and at 128 over 15 workers (with and without
# --learn-while-playing), five rounds; 'evaluation' (under a minute) a trained agent's evaluation, the file
# GPU_CHECK_AGENT names (python -c "import dqn; dqn.load_agent('RUN/model_005.pt').save('.whl/agent.pt')");
# 'cleanrl' (about two minutes a round on an H200, run 8) CleanRL's loop with and without --torch-deterministic
# beside ours at one game, five rounds (GPU_CHECK_CLEANRL_ROUNDS=R runs R, as many as a call has time for).
# GPU_CHECK_TESTS=none runs no test; GPU_CHECK_BENCH_SECONDS (480) bounds bench.py, whose rounds reach the log as
# they come.
set -uo pipefail
OUT=${1:?usage: bash scripts/gpu_check.sh OUT}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
PYTHON=${PYTHON:-python3}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
WHEELS=${WHEELS:-.whl}
QUICK=${GPU_CHECK_QUICK:+--quick}
export PYTHONUNBUFFERED=1

install() {  # install FOLDER SITE: the wheels of .whl/FOLDER into SITE, offline
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$2" "$WHEELS/$1"/*.whl
}
install ours "$WORK/ours" || { echo "gpu_check: cannot install $WHEELS/ours (scripts/fetch_gpu_wheels.sh fetches it)"; exit 1; }
install cleanrl "$WORK/cleanrl" || { echo "gpu_check: cannot install $WHEELS/cleanrl"; exit 1; }
export PYTHONPATH=$WORK/ours

GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
# The commit checked: the checkout's, or GPU_CHECK_COMMIT where the tree came without its history.
COMMIT=${GPU_CHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
echo "GPU: ${GPU:-none}; commit $COMMIT"
"$PYTHON" -c "import torch, gymnasium, ale_py; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'gymnasium', gymnasium.__version__, 'ale-py', ale_py.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"

start=$SECONDS
tests_status=0
if [ "${GPU_CHECK_TESTS:-}" != none ]; then
    timeout 300 "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda tests/test_device.py tests/test_learning.py \
        ${GPU_CHECK_TESTS:+-k "$GPU_CHECK_TESTS"} --junitxml "$WORK/cuda_tests.xml"
    tests_status=$?
fi
tests_seconds=$((SECONDS - start))

start=$SECONDS
timeout "${GPU_CHECK_BENCH_SECONDS:-480}" "$PYTHON" bench.py --gpu $QUICK ${GPU_CHECK_PARTS:+--gpu-parts $GPU_CHECK_PARTS} --cleanrl "$WHEELS/cleanrl/dqn_atari_ale.py" --cleanrl-path "$WORK/cleanrl" \
    ${GPU_CHECK_AGENT:+--eval-agent "$GPU_CHECK_AGENT"} ${GPU_CHECK_CLEANRL_ROUNDS:+--cleanrl-rounds "$GPU_CHECK_CLEANRL_ROUNDS"} --json >"$WORK/bench.json"
bench_status=$?
bench_seconds=$((SECONDS - start))

"$PYTHON" - "$WORK" "$OUT/gpu_check.json" $tests_status $tests_seconds $bench_status $bench_seconds "$GPU" "$COMMIT" <<'EOF'
import json, sys, xml.etree.ElementTree as ElementTree
from pathlib import Path

work, out = Path(sys.argv[1]), Path(sys.argv[2])
tests_status, tests_seconds, bench_status, bench_seconds = map(int, sys.argv[3:7])
cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
host = {"gpu": sys.argv[7], "commit": sys.argv[8], "cpu_model": models[0] if models else "unknown", "cpus": len(models)}
tests = {"exit_status": tests_status, "seconds": tests_seconds}
if (work / "cuda_tests.xml").exists():
    suite = ElementTree.parse(work / "cuda_tests.xml").getroot().find("testsuite")
    tests.update({key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")})
try:
    bench = json.loads((work / "bench.json").read_text())
except (OSError, ValueError) as error:
    bench = {"error": f"no figures ({type(error).__name__})"}
for key in ("profile_table", "profile_table_prioritized"):
    table = bench.pop(key, None)
    if table:
        print(key, table, sep="\n")
result = {"host": host, "cuda_tests": tests, "bench": {"exit_status": bench_status, "seconds": bench_seconds, **bench}}
out.write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
EOF
[ "$tests_status" -eq 0 ] && [ "$bench_status" -eq 0 ]
