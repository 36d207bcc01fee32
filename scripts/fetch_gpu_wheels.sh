#!/usr/bin/env bash
# Downloads, into the git-ignored .whl/ folder, the wheels needed to run this project and CleanRL's DQN baseline
# (cleanrl/dqn_atari.py) on a bare, offline x86-64 GPU machine with CPython 3.12 that already has torch, numpy,
# numba, tqdm, pillow, matplotlib, imageio, opencv-python-headless, tensorboard, rich, typing-extensions,
# cloudpickle, pyyaml and pandas. Needs internet access: PyPI, and raw.githubusercontent.com for CleanRL's files
# unless a local clone is given in CLEANRL_GIT_DIR (a git dir holding the pinned commit).
#   .whl/ours/     gymnasium 1.4.0, ale-py 0.12.1 (ROMs bundled), farama-notifications
#   .whl/cleanrl/  gymnasium 0.29.1, ale-py 0.9.1 (ROMs bundled), numpy 1.26.4 (gymnasium 0.29.1 uses np.bool8),
#                  farama-notifications, tyro 0.8.14, docstring-parser, shtab; and CleanRL's dqn_atari.py with the
#                  cleanrl_utils modules it imports (this commit needs no stable-baselines3).
# CleanRL is pinned at commit 004f8a086a892a2a180f4dd332b90d83a968aa7a (2025-07-08, "Remove SB3 as a necessary
# module (#505)", the last commit to touch cleanrl/dqn_atari.py).
# Install on the GPU machine with: pip install --no-index --no-deps .whl/<folder>/*.whl (numpy 1.26.4 only into a
# separate environment for CleanRL). ale-py >= 0.9 registers its Atari envs only when imported and gymnasium 0.29.1
# does not import it, so run CleanRL through .whl/cleanrl/dqn_atari_ale.py (written below), which imports ale_py first.
set -euo pipefail

PYTHON=${PYTHON:-python3}

cd "$(dirname "$0")/.."
OURS=.whl/ours
CLEANRL=.whl/cleanrl
mkdir -p "$OURS" "$CLEANRL"

download() {  # download DEST REQUIREMENT...: CPython 3.12 manylinux x86-64 wheels, without dependencies
    local dest=$1
    shift
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --dest "$dest" "$@"
}

# Our project (requirements.txt: gymnasium[atari]>=1.0, ale-py>=0.10; these are the newest releases).
download "$OURS" gymnasium==1.4.0 ale-py==0.12.1 farama-notifications==0.0.6

# CleanRL: gymnasium as CleanRL's requirements pin it; tyro 0.8.14, not the pinned 0.5.10, whose argparse
# override unpacks the 3-tuples of Python <= 3.12.2 and fails on 3.12.3's 4-tuples ("too many values to unpack
# (expected 3)", seen on the GPU machine's Python 3.12.3), with docstring-parser 0.16 and shtab 1.6.4 (rich and
# typing-extensions are on the GPU machine); ale-py 0.9.1 instead of 0.8.1 (no CPython 3.12 wheels, and needs
# AutoROM); numpy 1.26.4 (the newest numpy 1).
download "$CLEANRL" gymnasium==0.29.1 ale-py==0.9.1 numpy==1.26.4 farama-notifications==0.0.6 \
    tyro==0.8.14 docstring-parser==0.16 shtab==1.6.4

# CleanRL's script, the cleanrl_utils modules it imports and the wrapper that runs it.
bash scripts/cleanrl_source.sh "$CLEANRL"

du -sh "$OURS" "$CLEANRL"
