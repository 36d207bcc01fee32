#!/usr/bin/env bash
# CleanRL's dqn_atari.py and the cleanrl_utils modules it imports, at one pinned commit, into DEST, with a two-line
# wrapper DEST/dqn_atari_ale.py that runs it unchanged after importing ale_py: ale-py >= 0.9 registers its Atari
# games (BreakoutNoFrameskip-v4, ...) only when imported, and gymnasium 0.29.1 does not import it. Used by
# fetch_gpu_wheels.sh and cleanrl_breakout.sh; DEST/COMMIT names the commit.
#
#     bash scripts/cleanrl_source.sh DEST [CLEANRL_GIT_DIR]
#
# From CLEANRL_GIT_DIR (a git dir holding the commit: the second argument, else the environment variable) where one is
# given, else from GitHub.
set -euo pipefail

DEST=${1:?usage: bash scripts/cleanrl_source.sh DEST [CLEANRL_GIT_DIR]}
# 2025-07-08, "Remove SB3 as a necessary module (#505)": the last commit to change cleanrl/dqn_atari.py.
COMMIT=004f8a086a892a2a180f4dd332b90d83a968aa7a
CLEANRL_GIT_DIR=${2:-${CLEANRL_GIT_DIR:-}}

mkdir -p "$DEST/cleanrl_utils/evals"
FILES=(cleanrl/dqn_atari.py cleanrl_utils/__init__.py cleanrl_utils/atari_wrappers.py cleanrl_utils/buffers.py
    cleanrl_utils/evals/__init__.py cleanrl_utils/evals/dqn_eval.py)  # evals/dqn_eval.py only with --save-model
for f in "${FILES[@]}"; do
    out=$DEST/${f#cleanrl/}
    if [ -n "$CLEANRL_GIT_DIR" ] && git --git-dir="$CLEANRL_GIT_DIR" cat-file -e "$COMMIT:$f" 2>/dev/null; then
        git --git-dir="$CLEANRL_GIT_DIR" show "$COMMIT:$f" >"$out.tmp"
    else
        curl -fsSL "https://raw.githubusercontent.com/vwxyzjn/cleanrl/$COMMIT/$f" -o "$out.tmp"
    fi
    mv "$out.tmp" "$out"
done

cat >"$DEST/dqn_atari_ale.py" <<'EOF'
# Runs CleanRL's dqn_atari.py (same folder, same arguments) after importing ale_py: ale-py >= 0.9 registers its
# Atari envs (BreakoutNoFrameskip-v4, ...) only when imported, and gymnasium 0.29.1 does not import it.
import os
import runpy
import sys

import ale_py  # noqa: F401

script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dqn_atari.py")
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
EOF
echo "$COMMIT" >"$DEST/COMMIT"
