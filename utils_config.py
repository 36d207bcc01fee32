"""main.py's command line: the flags, their checks, and their merge with a saved run's
configuration for ``--resume`` and ``--evaluate``.

Every check runs before anything is created or played, and a bad value ends in one
argparse-style line (``main.py: error: ...``, exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import importlib.util
import io
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import numba
import numpy as np
import torch

from dqn_atari.utils_drl import AUGMENTATIONS
from dqn_atari.utils_env import (
    FRAME_SIZE,
    FRAME_SKIP,
    NOOP_UNITS,
    STACK_DEPTH,
    EnvironmentFailed,
    GymEnv,
    ale_id_note,
    env_label,
    env_layout,
    game_name,
    is_atari,
    resolve_env_id,
    saved_env_refusal,
)
from dqn_atari.utils_model import NETWORKS, NOISY_SIGMA0, network_size, smallest_input
from dqn_atari.utils_run import (
    MEMORY_FILE,
    REWARDS_FILE,
    CheckpointError,
    load_newest_checkpoint,
    playable_checkpoint,
)

# Options that may differ when a run is resumed; all others must match the saved run. Evaluations change nothing
# in training (each plays games seeded by (seed, index) with generators of their own), so their schedule, size and
# games at once may change too, and so may the processes that step the training games (the same games either way).
RESUMABLE_OPTIONS = {
    "steps", "device", "memory_device", "cuda_graphs", "threads", "render", "save_memory", "tensorboard", "resume",
    "track", "wandb_project_name", "wandb_entity",
    "keep_checkpoints", "eval_every", "eval_episodes", "eval_envs", "env_workers",
    "replay_ratio", "weights_every", "chunk_steps", "actor_timeout", "ray_address",
}  # fmt: skip
# Options that reach the network (the Ray cluster an Ape-X learner joins, and ships this project's code to): the
# user gives them on each start. A saved run's value is never read back, so a checkpoint someone else made cannot
# choose the host this machine connects to (--resume, --evaluate and dqn.load_agent drop it).
PER_START_OPTIONS = {"ray_address"}
FLOAT32_MAX = float(np.finfo(np.float32).max)  # the networks compute in float32
# Options that --evaluate takes from the user (sticky actions and the game cap try an agent under another protocol:
# --max-episode-frames 18000 is Nature's 5-minute evaluation games); the others come from the checkpoint. Of these, a
# playback's own (not the run's) unless given: the number of games, whether to save frames, and the processes that
# step them (this machine's, not the training machine's).
PLAYBACK_OPTIONS = {
    "evaluate", "eval_episodes", "eval_envs", "eval_epsilon", "render", "device", "threads", "seed", "out",
    "sticky_actions", "max_episode_frames", "env_workers",
}  # fmt: skip
PLAYBACK_DEFAULTS = ("eval_episodes", "render", "env_workers")
# Which games a run's evaluations play (--eval-games): it changes nothing in training, and a run keeps one
# scheme from its first evaluation to its last.
EVALUATION_SCHEMES = ("seeded", "serial")
MEMORY_DEVICES = ("auto", "host", "device")
# Evaluation games at once by default: the fastest of 1, 16, 32 and 100 on the CPU (bench.py --at-once, 2.4 times
# one at a time; docs/performance.md); a game machine takes about 1 MB.
EVAL_ENVS = 32
SCALAR_BYTES = 7  # a step's action, reward, terminal and game-start flags, besides its frame
GAME_BYTES = 2**20  # RAM of one game machine, at least: 100 ALE emulators took 0.96 MiB each here (resident memory)
# GPU memory left for the two networks, Adam's moments, a batch's activations and cuDNN's workspaces.
DEVICE_HEADROOM = 2 * 2**30
# Up to 30 no-op frames and a FIRE start a game; 100 frames leave at least 16 agent steps to learn from.
MIN_EPISODE_FRAMES = 100
MIN_PLAY_FRAMES = FRAME_SKIP * (1 + 16)  # after the most no-ops: a FIRE step and 16 agent steps
MAX_EPISODE_FRAMES = 2**31 - 4  # the ALE holds the limit in a C int; a multiple of the frame skip
UNIT_INTERVAL = ("gamma", "eps_start", "eps_end", "eval_epsilon", "sticky_actions", "beta0", "beta_end")
POSITIVE_FLOATS = ("lr", "adam_eps", "priority_eps")
POSITIVE_INTS = (
    "steps", "memory_size", "batch_size", "train_every", "target_every", "eval_every", "eval_episodes", "n_step",
    "weights_every", "chunk_steps", "envs",
)  # fmt: skip
NON_NEGATIVE_INTS = (
    "seed", "learning_starts", "eps_decay_steps", "eps_decay_start", "actors", "noop_max", "keep_checkpoints",
    "env_workers",
)  # fmt: skip

# Named recipes: --preset NAME sets these options, each still overridable by its own flag; the
# README's protocol table and docs/results.md list each value with its source.
PRESETS: dict[str, dict[str, Any]] = {
    # Mnih et al. (2015), Nature, "Human-level control through deep reinforcement learning", Extended Data Table 1 and
    # Methods. DeepMind's code (github.com/deepmind/dqn at 9d9b1d1) where the paper leaves it open: the target synced
    # every 10,000 agent steps (NeuralQLearner.lua line 356; the table counts parameter updates), a lost life terminal
    # for learning (train_agent.lua lines 87 and 119). This project's, not the paper's: Adam at 1e-4 (CleanRL's) for
    # their RMSProp at 2.5e-4; the gradient-norm clip at 10 (Stable-Baselines3's, dqn/dqn.py line 97 at e05d2db), kept
    # as the default every committed run learnt with (--grad-clip inf drops it); the FIRE press; no-ops of one frame
    # each (DeepMind's code plays action 0 up to 30 times, train_agent.lua lines 24-25); games cut at 30 minutes
    # (108,000 frames), where the paper's evaluation games stopped at 5 (--max-episode-frames 18000).
    "nature": {
        "steps": 12_500_000,  # 50M frames
        "memory_size": 1_000_000,
        "batch_size": 32,
        "learning_starts": 50_000,
        "train_every": 4,
        "target_every": 10_000,
        "gamma": 0.99,
        "n_step": 1,
        "loss": "huber",  # "error clipping" of the TD error to [-1, 1]
        "eps_start": 1.0,
        "eps_end": 0.1,
        "eps_decay_steps": 1_000_000,
        "eps_decay_start": 0,
        "double": False,
        "dueling": False,
        "prioritized": False,
        "augment": "none",
        "sticky_actions": 0.0,
        "noop_max": 30,
        "life_loss_terminal": True,
        "full_action_space": False,
        "eval_epsilon": 0.05,
    },
    # The learning benchmark's (bench.py --learning, the Breakout table of docs/results.md): CleanRL's
    # dqn_atari.py as it was run for the comparison on this kind of machine, for runs of a few
    # hundred thousand steps.
    "cleanrl-short": {
        "steps": 250_000,
        "memory_size": 100_000,
        "batch_size": 32,
        "learning_starts": 20_000,
        "train_every": 4,
        "target_every": 1_000,
        "eps_end": 0.01,
        "eps_decay_steps": 100_000,
        "eval_every": 50_000,
        "eval_episodes": 10,
    },
    # Machado et al. (2018), "Revisiting the Arcade Learning Environment": their recommended
    # protocol, sticky actions 0.25 as the randomness, the full action space, and no game-specific
    # knowledge (no lost life as a terminal; here also no FIRE press, and no no-op starts).
    "machado": {
        "sticky_actions": 0.25,
        "full_action_space": True,
        "life_loss_terminal": False,
        "fire_reset": False,
        "noop_max": 0,
    },
    # MinAtar's own DQN (Young & Tian 2019): the constants of examples/dqn.py in kenjyoung/MinAtar (commit
    # 4241f24, 2024-12-19), by line. Adam stands in for its centered RMSProp (line 282) at the same step size,
    # with the Adam epsilon of Dopamine's MinAtar DQN (dopamine/labs/environments/minatar/dqn_breakout.gin,
    # lines 20-22, commit 9f616b9). For MinAtar's games (--env MinAtar/Breakout-v1); their frames are agent steps.
    "minatar": {
        "steps": 5_000_000,  # NUM_FRAMES (line 40)
        "memory_size": 100_000,  # REPLAY_BUFFER_SIZE (37)
        "batch_size": 32,  # BATCH_SIZE (36)
        "learning_starts": 5_000,  # REPLAY_START_SIZE (42): a uniformly random policy until then (163-165)
        "train_every": 1,  # TRAINING_FREQ (39)
        "target_every": 1_000,  # TARGET_NETWORK_UPDATE_FREQ (38)
        "lr": 2.5e-4,  # STEP_SIZE (44)
        "adam_eps": 3.125e-4,  # Dopamine's gin, line 22
        "gamma": 0.99,  # GAMMA (47)
        "n_step": 1,
        "loss": "huber",  # smooth_l1_loss (240)
        "grad_clip": math.inf,  # no clipping
        "clip_rewards": False,  # the rewards go into the buffer as they are (343)
        "eps_start": 1.0,  # EPSILON (48)
        "eps_end": 0.1,  # END_EPSILON (43)
        "eps_decay_steps": 100_000,  # FIRST_N_FRAMES (41), from the end of the random start (168-171)
        "eps_decay_start": 5_000,
        "double": False,
        "dueling": False,
        "prioritized": False,
        "network": "minatar",  # QNetwork (62-87): one 16-channel 3x3 convolution, 128 hidden units
    },
    # Atari 100k (Kaiser et al. 2020): 100k agent steps, no sticky actions. The recipe is DrQ(eps)
    # (Agarwal et al. 2021) as Dopamine runs it: the values of dopamine/labs/atari_100k/configs/
    # DrQ_eps.gin, and the defaults of the code it names (atari_100k_runner.py, atari_100k_rainbow_agent.py,
    # dopamine/jax/networks.py, dopamine/discrete_domains/atari_lib.py). docs/results.md's table cites each.
    # That code changed after 2021: the replay memory (stored once per step, n-step windows cut at a terminal),
    # the longest game and the one evaluation follow its 2021 code (8de9df0); the no-op agent steps, a crop per
    # image and independent uniform minibatches its current code (5873f54). docs/results.md says which, item by item.
    "atari100k": {
        "steps": 100_000,
        "memory_size": 100_000,  # every step (Dopamine: 1M, "a proxy for unbounded memory")
        "learning_starts": 1_600,
        "train_every": 1,
        "target_every": 1,  # the target network is the online network
        "n_step": 10,
        "gamma": 0.99,
        "batch_size": 32,
        "lr": 1e-4,
        "adam_eps": 1.5e-4,
        "loss": "huber",
        "grad_clip": math.inf,  # Dopamine's optimizer does not clip
        "eps_start": 1.0,
        "eps_end": 0.01,
        "eps_decay_steps": 5_000,
        "eps_decay_start": 1_600,  # Dopamine holds epsilon at 1 until learning starts
        "double": True,
        "dueling": True,
        "network": "dopamine",
        "prioritized": False,
        "augment": "dopamine",
        "sticky_actions": 0.0,
        "noop_max": 30,  # 0 to 29 no-op agent steps at each game's start, training and evaluation (current runner)
        "noop_unit": "steps",
        "fire_reset": False,
        "life_loss_terminal": True,
        "stack_fill": "zeros",
        "stack_per_life": True,
        "max_episode_frames": 108_000,  # 27,000 agent steps
        "eval_every": 100_000,  # one evaluation after training (and the untrained one, line 0)
        "eval_episodes": 100,
        "eval_epsilon": 0.001,
        "save_memory": True,  # so that an interrupted run resumes as the same experiment (0.7 GB at 100k)
    },
}
# Data-Efficient Rainbow (van Hasselt et al. 2019) as Dopamine runs it for Atari 100k: the values of
# dopamine/labs/atari_100k/configs/DER.gin (commit 5873f54), by line, and of the code it names. Its pipeline, replay
# memory and evaluation are the atari100k preset's (the same gin lines and runner); these are what DER changes.
PRESETS["der"] = {
    **PRESETS["atari100k"],
    "target_every": 2_000,  # target_update_period (line 15): every 2,000 updates, one per step (line 14)
    "augment": "none",  # Atari100kRainbowAgent.data_augmentation = False (line 29)
    "distributional": True,  # JaxFullRainbowAgent's default (full_rainbow_agent.py, line 257)
    "atoms": 51,  # num_atoms (line 24)
    "v_min": -10.0,  # -vmax (full_rainbow_agent.py, line 316)
    "v_max": 10.0,  # vmax (line 25)
    "noisy": True,  # line 21; with it the training epsilon is 0 (zero_epsilon, full_rainbow_agent.py line 335)
    "noisy_sigma0": 0.1,  # NoisyNetwork's sigma_init, 0.1 / sqrt(inputs) (dopamine/jax/networks.py, line 504)
    "prioritized": True,  # replay_scheme (line 26)
    # Priorities sqrt(loss + 1e-10) and loss weights 1 / sqrt(P), divided by the batch's largest
    # (atari_100k_rainbow_agent.py, lines 190-191 and 221): exponents 0.5, beta held at 0.5.
    "alpha": 0.5,
    "priority_eps": 1e-10,
    "beta0": 0.5,
    "beta_end": 0.5,
}
# Rainbow (Hessel et al. 2018): the values of the paper's Table 1, and where it gives none, of Dopamine's
# dopamine/jax/agents/full_rainbow/configs/full_rainbow.gin (commit 5873f54), by line. Of the paper's protocol: no
# sticky actions (Dopamine adds them, line 32) and up to 30 no-op frames (its "no-ops" starts). Dopamine's: a lost
# life is no terminal (the paper does not say; DeepMind's DQN, Mnih et al. 2015, ended a training episode there, as
# Dopamine's atari_lib.py lines 193-194 note). This project's: the FIRE press, which neither the paper nor Dopamine's
# AtariPreprocessing makes (Dopamine presses FIRE in its PPO preprocessing alone, atari_lib.py lines 145-146).
# Dopamine's noisy layers start at sigma0 0.1 (networks.py, line 504), the paper's at 0.5.
PRESETS["rainbow"] = {
    "steps": 50_000_000,  # 200M frames (the paper; full_rainbow.gin lines 36-37: 200 iterations of 250,000 steps)
    "memory_size": 1_000_000,  # ReplayBuffer.max_capacity (line 41)
    "batch_size": 32,  # line 42
    "learning_starts": 20_000,  # "min history to start learning": 80K frames (Table 1; line 11)
    "train_every": 4,  # update_period (line 12)
    "target_every": 8_000,  # "target network period": 32K frames (Table 1; line 13)
    "gamma": 0.99,  # line 9
    "n_step": 3,  # "multi-step returns n" (Table 1; line 10)
    "lr": 6.25e-5,  # Adam's learning rate (Table 1; line 27)
    "adam_eps": 1.5e-4,  # Adam's epsilon (Table 1; line 28)
    "grad_clip": math.inf,  # Dopamine's optimizer does not clip
    "double": True,  # line 21
    "dueling": True,  # line 20
    "network": "nature",  # the paper's convolutions and dueling streams (Dopamine's FullRainbowNetwork shares one layer)
    "distributional": True,  # line 22: 51 atoms on [-10, 10] (Table 1)
    "atoms": 51,
    "v_min": -10.0,
    "v_max": 10.0,  # line 23
    "noisy": True,  # line 19: exploration by noise, epsilon 0 (Table 1)
    "noisy_sigma0": 0.5,  # "noisy nets sigma0" (Table 1)
    "prioritized": True,  # line 24: proportional (Table 1)
    "alpha": 0.5,  # "prioritization exponent omega" (Table 1)
    "beta0": 0.4,  # "prioritization importance sampling beta": 0.4 to 1 (Table 1)
    "beta_end": 1.0,
    "augment": "none",
    "sticky_actions": 0.0,
    "life_loss_terminal": False,  # Dopamine's AtariPreprocessing default (dopamine/discrete_domains/atari_lib.py, line 184)
    "fire_reset": True,  # this project's default, kept (see above)
    "max_episode_frames": 108_000,  # Runner.max_steps_per_episode, 27,000 steps (line 39)
    "eval_epsilon": 0.001,  # epsilon_eval (line 15)
}


def program(script: str) -> str:
    """The name to sign messages with: the dqn-* command that started this process (``dqn-train``),
    else ``script``."""
    name = Path(sys.argv[0]).name
    return name if name.startswith("dqn-") else script


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each flag's default, where it has one to show (not None, not off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """Refuses bad input in one line, ``main.py: error: ...``, without the usage block (``--help``
    has it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A value such as -1e3 or -.5e-2 is a number, as -1 and -1.5 are to argparse itself, not an unknown flag.
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=program("main.py"),
        description="Train Nature DQN on an Atari game.",
        formatter_class=DefaultsShown,
    )
    add = parser.add_argument

    def switch(flag: str, meaning: str, default: bool = False) -> None:
        """A flag with its --no- form, so that a preset's switch can be turned off."""
        add(flag, action=argparse.BooleanOptionalAction, default=default, help=meaning)

    add(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="a named recipe: sets its options (see the README, Atari 100k); flags given beside it override them",
    )
    add(
        "--env",
        default="Breakout",
        help="Atari game name (Breakout, pong, space_invaders) or ALE id (ALE/Breakout-v5: the game, played with these "
        "flags; v5's sticky actions are --sticky-actions 0.25); or any other gymnasium "
        "environment with image observations and discrete actions: a registered id (MinAtar/Breakout-v1) or "
        "module:Class",
    )
    add("--steps", type=int, default=10_000_000, help="training agent steps (4 frames each), over all --envs games")
    add(
        "--envs",
        type=int,
        default=1,
        help="training games played at once, each with its own seed and replay memory stream, their actions from "
        "one forward pass; every step count (--train-every, --target-every, epsilon, --eval-every) counts the "
        "steps of all of them",
    )
    add(
        "--env-workers",
        type=int,
        default=0,
        help="processes that step the --envs games, each its share at once (0: this process steps them in turn), "
        "and the evaluations' games too; the same run either way, bit for bit",
    )
    switch(
        "--learn-while-playing",
        "a round's gradient steps and target syncs run while its games play (in --env-workers, or on a GPU while "
        "this process steps them), so they sample the replay memory as it stood before the round: faster there; "
        "without it each step can be sampled from its own gradient step on",
    )
    add("--seed", type=int, default=0, help="seeds the game, the network, exploration and replay sampling")
    add(
        "--out",
        default=None,
        help="run folder (default: runs/<game>-seed<seed>[-per][-double][-dueling][-nN][-apexN][-<preset>])",
    )
    add("--device", default="auto", help="auto picks cuda, then mps, then cpu")
    switch(
        "--cuda-graphs",
        "on a CUDA device, replay the learning step (its augmentation's draws made on the host, as on the CPU) and the greedy action each as one CUDA graph; "
        "no effect elsewhere",
        default=True,
    )
    add(
        "--memory-device",
        choices=MEMORY_DEVICES,
        default="auto",
        help="where the replay memory's frames live: host RAM, or the training device (--device); auto: a CUDA "
        "device when they fit in its free memory, else host RAM",
    )
    add(
        "--threads",
        type=threads_option,
        default="auto",
        help="CPU threads for torch (and numba); auto: the CPUs this process may run on (affinity, cgroup quota)",
    )
    add(
        "--resume",
        default=None,
        metavar="RUN_FOLDER",
        help="continue the run in this folder from its newest checkpoint",
    )
    switch("--save-memory", f"also save the replay memory ({MEMORY_FILE}) at each checkpoint")
    # Preprocessing (Machado et al. 2018 protocol: --sticky-actions 0.25).
    add("--sticky-actions", type=float, default=0.0, help="probability of repeating the previous action")
    add(
        "--max-episode-frames",
        type=int,
        default=108_000,
        help="cut episodes after this many frames; another gymnasium environment's after this / 4 steps",
    )
    add(
        "--noop-max",
        type=int,
        default=30,
        help="no-op starts (0: none): each game starts with 1 to this many no-op frames, or 0 to this many less one "
        "agent steps with --noop-unit steps",
    )
    add(
        "--noop-unit",
        choices=NOOP_UNITS,
        default="frames",
        help="what --noop-max counts: emulator frames (Mnih et al. 2015) or agent steps (Dopamine's Atari 100k runner)",
    )
    switch(
        "--fire-reset",
        "press FIRE at the start of each game and after each lost life, in games that wait for it",
        default=True,
    )
    switch(
        "--life-loss-terminal",
        "a lost life ends the n-step window and the bootstrap, as a game's end does (the game goes on)",
        default=True,
    )
    switch("--full-action-space", "all 18 joystick actions, not only the game's own")
    add(
        "--stack-fill",
        choices=("repeat", "zeros"),
        default="repeat",
        help="what fills a new frame stack before its first frame: copies of it, or zeros (Dopamine)",
    )
    switch(
        "--stack-per-life",
        "a lost life starts a new frame stack (Dopamine, with --life-loss-terminal), not only a new game",
    )
    # Replay and learning: Mnih et al. 2015 defaults, with Adam (as CleanRL) in place of RMSProp.
    add("--memory-size", type=int, default=1_000_000, help="replay memory capacity, in agent steps")
    add("--batch-size", type=int, default=32, help="transitions per gradient step")
    add("--learning-starts", type=int, default=50_000, help="random-policy steps before learning")
    add("--train-every", type=int, default=4, help="agent steps per gradient step")
    add("--target-every", type=int, default=10_000, help="agent steps between target network syncs")
    add("--lr", type=float, default=1e-4, help="Adam learning rate (CleanRL's; also with --prioritized)")
    add(
        "--adam-eps",
        type=float,
        default=1e-8,
        help="Adam epsilon (PyTorch's and CleanRL's; Dopamine's 1.5e-4 learns Breakout several times slower here)",
    )
    add("--gamma", type=float, default=0.99, help="discount factor")
    switch(
        "--clip-rewards",
        "learn from each reward's sign, -1, 0 or 1 (Mnih et al. 2015); scores are always the game's own",
        default=True,
    )
    add("--n-step", type=int, default=1, help="steps of reward in each target (multi-step returns; 1 is Nature DQN)")
    add("--loss", choices=("huber", "mse"), default="huber", help="TD loss: Huber (Nature's error clip) or squared")
    add("--grad-clip", type=float, default=10.0, help="max gradient norm (Stable-Baselines3's; inf turns clipping off)")
    add("--eps-start", type=float, default=1.0, help="exploration epsilon at the start")
    add("--eps-end", type=float, default=0.1, help="exploration epsilon after its linear decay")
    add("--eps-decay-steps", type=int, default=1_000_000, help="agent steps over which epsilon decays")
    add("--eps-decay-start", type=int, default=0, help="steps at --eps-start before epsilon starts to decay")
    switch("--double", "Double DQN targets (van Hasselt et al. 2016)")
    switch("--dueling", "dueling network head (Wang et al. 2016)")
    switch(
        "--distributional",
        "C51 (Bellemare et al. 2017): each action's return as a distribution over --atoms values from --v-min to "
        "--v-max, a cross-entropy loss (also the priority), actions on the expected return",
    )
    add("--atoms", type=int, default=51, help="--distributional: the support's atoms")
    add("--v-min", type=float, default=-10.0, help="--distributional: the support's lowest return")
    add("--v-max", type=float, default=10.0, help="--distributional: the support's highest return")
    switch(
        "--noisy",
        "noisy networks (Fortunato et al. 2018): factorised Gaussian noise in every fully connected layer, drawn "
        "anew for each action choice and each learning step; training epsilon 0; evaluations on the mean weights",
    )
    add(
        "--noisy-sigma0",
        type=float,
        default=NOISY_SIGMA0,
        help="--noisy: the noise's initial scale, sigma0 / sqrt(inputs) (Fortunato et al.'s; Dopamine's Rainbow "
        "and DER use 0.1)",
    )
    add(
        "--network",
        choices=tuple(NETWORKS),
        default="nature",
        help="nature: the paper's network; dopamine: Dopamine's Atari 100k one (SAME padding, one hidden layer "
        "shared by the dueling outputs, Glorot-uniform weights); minatar: Young & Tian's (2019) for small frames "
        "(one 16-channel 3x3 convolution, 128 units)",
    )
    add(
        "--augment",
        choices=tuple(AUGMENTATIONS),
        default="none",
        help="shift: learn on frames shifted by -4..4 pixels, a new shift per sample (DrQ, Kostrikov et al. 2020); "
        "dopamine: shifts of -4..3 and a random intensity per sample, as Dopamine's DrQ(eps)",
    )
    # Prioritized replay (Schaul et al. 2016, proportional variant).
    switch("--prioritized", "proportional prioritized experience replay")
    add("--alpha", type=float, default=0.6, help="priority exponent")
    add("--beta0", type=float, default=0.4, help="initial importance-sampling exponent, annealed to --beta-end")
    add("--beta-end", type=float, default=1.0, help="importance-sampling exponent at --steps (--beta0's: held fixed)")
    add("--priority-eps", type=float, default=1e-6, help="added to |TD error| so no priority is zero")
    # Ape-X (Horgan et al. 2018): actor processes on Ray feed this process's learner.
    add("--actors", type=int, default=0, help="Ape-X actor processes on Ray (0: this process plays and learns)")
    add(
        "--replay-ratio",
        choices=("fixed", "free"),
        default="fixed",
        help="Ape-X: fixed holds one gradient step per --train-every steps; free lets actors and learner run flat out",
    )
    add("--weights-every", type=int, default=100, help="Ape-X: actor steps between fetches of the newest weights")
    add("--chunk-steps", type=int, default=50, help="Ape-X: steps an actor sends at once")
    add("--actor-timeout", type=float, default=300.0, help="Ape-X: stop when no actor delivers for this many seconds")
    add("--ray-address", default=None, help="Ape-X: join this running Ray cluster instead of starting one here")
    # Evaluation.
    add("--eval-every", type=int, default=250_000, help="agent steps between evaluations")
    add("--eval-episodes", type=int, default=10, help="games per evaluation")
    add(
        "--eval-envs",
        type=int,
        default=None,
        help=f"evaluation games played at once, their actions from one forward pass (default {EVAL_ENVS}; the "
        "same games however many; 1 with --eval-games serial)",
    )
    add(
        "--eval-games",
        choices=EVALUATION_SCHEMES,
        default="seeded",
        help="seeded: each evaluation game on its own game machine, seeded by (--seed, evaluation, game); serial: "
        "one machine plays them in turn, one at a time (runs from before --eval-envs)",
    )
    add(
        "--keep-checkpoints",
        type=int,
        default=0,
        help="keep only the newest N evaluation checkpoints (model_NNN.pt); 0 keeps them all",
    )
    add("--eval-epsilon", type=float, default=0.05, help="exploration epsilon of evaluation games")
    switch("--render", "save each evaluation's first episode as eval_NNN/*.png")
    switch("--tensorboard", "log scalars under RUN/tensorboard (needs the tensorboard package)")
    switch(
        "--track",
        "follow the run on Weights & Biases, as CleanRL's --track (pip install .[wandb]): its configuration and "
        "versions, TensorBoard's scalars, the evaluations' videos with --render; files under RUN/wandb; a resume "
        "goes on in the same W&B run (WANDB_MODE=offline: sync later with `wandb sync RUN/wandb/offline-run-*`)",
    )
    add("--wandb-project-name", default="dqn-atari", help="the W&B project of --track")
    add("--wandb-entity", default=None, help="the W&B team or user of --track (default: yours)")
    add(
        "--evaluate",
        default=None,
        metavar="CHECKPOINT",
        help="play --eval-episodes games with a saved network instead of training: a model_NNN.pt, or a run folder "
        "(its newest checkpoint)",
    )
    return parser


def parse_config(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Any] | None]:
    """Parse and check the flags; with --resume or --evaluate, merge them into the saved
    configuration. Returns the options and the checkpoint to start from (None for a new run)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.out == "":  # Path("") is the current folder
        parser.error("--out is empty: name a folder, or leave --out out")
    if args.resume is None and args.evaluate is None:  # else the saved run's options hold
        apply_preset(parser, args, argv)
    if args.evaluate is not None:
        return playback_config(parser, args, argv)
    checkpoint = None
    if args.resume is not None:
        given = explicit_options(parser, argv)
        if "out" in given and Path(given["out"]).resolve() != Path(args.resume).resolve():
            parser.error(f"--out {given['out']} is not --resume {args.resume}: a resumed run stays in its folder")
        try:
            resume_from, checkpoint, notes = load_newest_checkpoint(Path(args.resume))
        except CheckpointError as error:
            parser.exit(2, f"{parser.prog}: error: cannot resume: {error}\n")
        for note in notes:
            print(f"Note: {note}", flush=True)
        args = merge_saved(parser, checkpoint["config"], given, RESUMABLE_OPTIONS, "cannot change on resume")
        args.out = args.resume
        step = checkpoint["run"]["step"]
        if args.steps < step or (args.steps == step and not checkpoint["run"].get("evaluation_due", False)):
            parser.error(f"--steps {args.steps} must exceed the checkpoint's step {step}")
    typed_env = args.env
    check_values(parser, args)
    check_training(parser, args, resuming=checkpoint is not None)
    ale_note = ale_id_note(typed_env, args.sticky_actions, args.full_action_space) if checkpoint is None else None
    if ale_note:
        print(f"Note: {ale_note}", flush=True)
    if checkpoint is not None:
        due = ""
        if checkpoint["run"].get("evaluation_due", False):
            games = len((checkpoint["run"].get("evaluation_games") or {}).get("scores", []))
            done = f", {games} of its {args.eval_episodes} games done" if games else ""
            due = f", its evaluation first{done}"
        print(f"Resuming from {resume_from} (step {checkpoint['run']['step']:,}{due})", flush=True)
        saved_steps = checkpoint["config"]["steps"]
        if args.prioritized and args.steps != saved_steps and args.beta0 != args.beta_end:
            print(
                f"Note: --steps {args.steps:,} (was {saved_steps:,}): prioritized replay's beta now reaches "
                f"{args.beta_end:g} at step "
                f"{args.steps:,}, not {saved_steps:,}, so from here it anneals on another schedule",
                flush=True,
            )
    return args, checkpoint


def learning_config(options: dict[str, Any]) -> dict[str, Any]:
    """The options that decide what the replay memory holds: all but those a resume may change, and the
    evaluations' scheme."""
    left_out = RESUMABLE_OPTIONS | {"out", "evaluate", "resume", "eval_games"}
    return {k: v for k, v in options.items() if k not in left_out}


def saved_options(saved: dict[str, Any]) -> dict[str, Any]:
    """A run's saved configuration as a new start takes it: main.py's defaults for the options newer than the run,
    and for ``PER_START_OPTIONS``, which come from the user on each start, never from a file."""
    kept = {name: value for name, value in saved.items() if name not in PER_START_OPTIONS}
    if saved and "eval_games" not in saved:  # a run from before --eval-envs evaluates as it always did
        kept["eval_games"] = "serial"
    return {**vars(build_parser().parse_args([])), **kept}


def settings_differences(theirs: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """How the settings ``theirs`` differ from ``mine`` (learning_config's, say), as flags: '--lr 0.001, not
    0.0001; ...' (the first three, and how many more), or None where they agree. A preset's name is left out:
    the settings it gives are compared one by one."""
    differing = [name for name in sorted(mine) if name != "preset" and mine[name] != theirs.get(name)]
    if not differing:
        return None
    shown = [f"--{name.replace('_', '-')} {theirs.get(name)!r}, not {mine[name]!r}" for name in differing[:3]]
    return "; ".join(shown) + (f"; and {len(differing) - 3} more" if len(differing) > 3 else "")


def learning_defaults() -> dict[str, Any]:
    """The learning options' defaults: the values of options newer than a saved run (each plays as
    the program did before it)."""
    return learning_config(saved_options({}))


def apply_preset(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None) -> None:
    """Set the options of ``--preset`` (if any) that ``argv`` does not give explicitly."""
    if args.preset is not None:
        given = explicit_options(parser, argv)
        for name, value in PRESETS[args.preset].items():
            if name not in given:
                setattr(args, name, value)


def options_of(argv: list[str]) -> argparse.Namespace:
    """main.py's options for ``argv`` (unknown flags ignored), the preset applied, unchecked: for
    tools that pass flags through to main.py and need to know some of them."""
    parser = build_parser()
    args = parser.parse_known_args(argv)[0]
    apply_preset(parser, args, argv)
    return args


def playback_config(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """--evaluate: the checkpoint's configuration, with the playback options the user gave."""
    if args.resume is not None:
        parser.error("--evaluate plays a checkpoint; it does not go with --resume")
    try:
        source, checkpoint, notes = playable_checkpoint(Path(args.evaluate))
    except CheckpointError as error:
        parser.exit(2, f"{parser.prog}: error: cannot evaluate: {error}\n")
    for note in notes:
        print(f"Note: {note}", flush=True)
    args = playback_options(parser, checkpoint["config"], explicit_options(parser, argv))
    args.evaluate = str(source)  # the checkpoint played, named in what it prints and its frames' folder
    return args, checkpoint


def playback_options(
    parser: argparse.ArgumentParser, saved: dict[str, Any], given: dict[str, Any]
) -> argparse.Namespace:
    """A checkpoint's saved configuration under the playback options ``given``, checked as a new run's flags are
    (a crafted ``noop_max`` of 1e9 would play no-ops for minutes): ``--evaluate``'s and ``dqn.load_agent``'s."""
    args = merge_saved(parser, saved, given, PLAYBACK_OPTIONS, "does not apply to --evaluate")
    for name in PLAYBACK_DEFAULTS:
        if name not in given:
            setattr(args, name, parser.get_default(name))
    args.out = given.get("out")
    check_values(parser, args)
    return args


def saved_playback_options(saved: dict[str, Any], trusted_env: bool) -> argparse.Namespace:
    """``playback_options`` for the Python API: ValueError with main.py's one line. ``trusted_env``: the saved
    environment may name code to import (as giving ``--env`` again does on the command line)."""
    with refusals_as_value_errors():
        given = {"evaluate": "dqn.load_agent"}  # a playback's checks, not a training run's (its replay memory's)
        return playback_options(build_parser(), saved, {**given, "env": saved.get("env")} if trusted_env else given)


@contextlib.contextmanager
def refusals_as_value_errors() -> Iterator[None]:
    """The parser's one-line refusals (``main.py: error: ...``, SystemExit) raised as ValueError(the line)."""
    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal):
            yield
    except SystemExit:
        raise ValueError(refusal.getvalue().strip().split(": error: ", 1)[-1]) from None


def merge_saved(
    parser: argparse.ArgumentParser, saved: dict[str, Any], given: dict[str, Any], overridable: set[str], refusal: str
) -> argparse.Namespace:
    """A saved configuration (less its ``PER_START_OPTIONS``) over the defaults (for options newer
    than the saved run), under the ``overridable`` options the user typed. Any other typed option
    must equal its saved value: one that differs is refused with ``refusal`` rather than silently
    ignored. A saved value that its flag cannot give (a damaged checkpoint) is refused too."""
    options = {action.dest: action for action in parser._actions}
    for name, value in saved.items():  # a value no flag gives would raise in the checks below, or later
        if name in options and not takes(options[name], value):
            flag = "--" + name.replace("_", "-")
            parser.error(f"the saved run's {flag} is {value!r}, not a value of {flag}: its checkpoint is damaged")
    untrusted = saved_env_refusal(str(saved.get("env", "")))
    if untrusted and "env" not in given:
        parser.error(
            f"{untrusted}: if you trust where the run came from, give --env again with its value (config.json's)"
        )
    if "env" in given:  # compare game ids, not spellings
        with contextlib.suppress(ValueError):
            given["env"] = resolve_env_id(given["env"])
    for name, value in given.items():
        if name not in overridable and name != "out" and saved.get(name) != value:
            parser.error(f"--{name.replace('_', '-')} {refusal} (the run used {saved.get(name)!r})")
    chosen = {k: v for k, v in given.items() if k in overridable}
    return argparse.Namespace(**{**saved_options(saved), **chosen})


def takes(action: argparse.Action, value: Any) -> bool:
    """Whether ``value`` is one that ``action``'s flag gives (a saved configuration's, read back)."""
    if value is None or isinstance(action, argparse.BooleanOptionalAction):
        return value is action.default or isinstance(value, bool)
    if action.choices is not None:
        return value in action.choices
    if action.type is threads_option:
        return value == "auto" or (type(value) is int and value >= 1)
    if action.type in (int, float):
        return type(value) is int or (action.type is float and type(value) is float)
    return isinstance(value, str)


def check_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every option's value on its own and against the others, and the device against this torch."""

    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    try:
        args.env = resolve_env_id(args.env)
    except ValueError as error:
        parser.error(f"--env: {error}")
    if not is_atari(args.env):
        check_gym_env(parser, args)
    for name in POSITIVE_INTS:
        if getattr(args, name) <= 0:
            parser.error(f"{flag(name)} must be positive, got {getattr(args, name)}")
    for name in NON_NEGATIVE_INTS:
        if getattr(args, name) < 0:
            parser.error(f"{flag(name)} must be 0 or more, got {getattr(args, name)}")
    for name in UNIT_INTERVAL:
        if not 0.0 <= getattr(args, name) <= 1.0:  # also refuses nan
            parser.error(f"{flag(name)} must be within [0, 1], got {getattr(args, name)}")
    for name in POSITIVE_FLOATS:
        if not 0.0 < getattr(args, name) < math.inf:
            parser.error(f"{flag(name)} must be positive and finite, got {getattr(args, name)}")
    if not 0.0 <= args.alpha < math.inf:
        parser.error(f"--alpha must be 0 or more and finite, got {args.alpha}")
    if not args.grad_clip > 0.0:
        parser.error(f"--grad-clip must be positive (inf turns clipping off), got {args.grad_clip}")
    if args.atoms < 2:
        parser.error(f"--atoms must be 2 or more, got {args.atoms}")
    if not -math.inf < args.v_min < args.v_max < math.inf:
        parser.error(f"--v-min {args.v_min} must be below --v-max {args.v_max}, both finite")
    # The support is float32: its ends, their difference and each of its --atoms values must be float32 numbers.
    with np.errstate(over="ignore"):  # a float64 beyond float32 becomes inf, refused below
        low, high = np.float32(args.v_min), np.float32(args.v_max)
        spacing = (high - low) / np.float32(args.atoms - 1)
    if not (np.isfinite(spacing) and spacing > np.spacing(max(abs(low), abs(high)))):
        parser.error(
            f"--v-min {args.v_min} and --v-max {args.v_max} must make {args.atoms} distinct float32 atoms (--atoms), "
            f"the range below {FLOAT32_MAX:.2g}: choose a narrower or a wider range"
        )
    if args.distributional and args.loss != "huber":
        parser.error(f"--loss {args.loss} is the scalar head's: --distributional learns by its cross-entropy")
    if not 0.0 < args.noisy_sigma0 < FLOAT32_MAX:
        parser.error(f"--noisy-sigma0 must be positive and below {FLOAT32_MAX:.2g} (float32), got {args.noisy_sigma0}")
    frames = args.max_episode_frames
    if not MIN_EPISODE_FRAMES <= frames <= MAX_EPISODE_FRAMES or frames % FRAME_SKIP:
        parser.error(
            f"--max-episode-frames must be a multiple of {FRAME_SKIP} (the frame skip) from {MIN_EPISODE_FRAMES}, "
            f"so that a game has steps to learn from, to {MAX_EPISODE_FRAMES:,} (the emulator's limit); got {frames}"
        )
    most_noop_frames = args.noop_max if args.noop_unit == "frames" else FRAME_SKIP * max(args.noop_max - 1, 0)
    if most_noop_frames + MIN_PLAY_FRAMES > frames:
        parser.error(
            f"--noop-max {args.noop_max} ({args.noop_unit}) can take up to {most_noop_frames:,} frames of no-ops, "
            f"which leaves less than {MIN_PLAY_FRAMES} of --max-episode-frames {frames:,} to play"
        )
    if args.stack_per_life and not args.life_loss_terminal:
        parser.error("--stack-per-life needs --life-loss-terminal: a new stack starts where learning sees a terminal")
    depth = env_layout(args.env)[0]
    if args.memory_size <= depth + args.n_step:
        parser.error(
            f"--memory-size must exceed {depth + args.n_step} ({depth} frames and --n-step), got {args.memory_size}"
        )
    if args.batch_size > args.memory_size:
        parser.error(f"--batch-size {args.batch_size} exceeds --memory-size {args.memory_size}")
    if args.learning_starts < args.batch_size:
        parser.error(f"--learning-starts {args.learning_starts} must be at least --batch-size {args.batch_size}")
    if args.learning_starts > args.memory_size:
        parser.error(f"--learning-starts {args.learning_starts} exceeds --memory-size {args.memory_size}")
    # The first gradient step needs whole n-step windows among the steps played by then, and a
    # window cut by the frame limit (not by a game's end) is never whole.
    if args.n_step >= args.learning_starts:
        parser.error(
            f"--n-step {args.n_step} must be below --learning-starts {args.learning_starts}: learning needs "
            "whole n-step windows in the replay memory"
        )
    if args.n_step >= args.max_episode_frames // FRAME_SKIP:
        parser.error(
            f"--n-step {args.n_step} must be below the longest game, --max-episode-frames / {FRAME_SKIP} = "
            f"{args.max_episode_frames // FRAME_SKIP} steps"
        )
    if args.actors and args.evaluate is None:  # playing back an Ape-X checkpoint needs no actors
        if importlib.util.find_spec("ray") is None:
            parser.error("--actors runs on Ray, which is not installed: pip install 'ray>=2.40'")
        stripe = args.memory_size // args.actors
        if stripe <= STACK_DEPTH + args.n_step:
            parser.error(f"--memory-size {args.memory_size} is too small to give each of {args.actors} actors a stream")
        if args.chunk_steps > stripe:
            parser.error(
                f"--chunk-steps {args.chunk_steps} exceeds an actor's stream of the replay memory "
                f"({stripe:,} steps: --memory-size / --actors)"
            )
        if not 0.0 < args.actor_timeout < math.inf:
            parser.error(f"--actor-timeout must be positive and finite, got {args.actor_timeout}")
    elif args.ray_address is not None and not args.actors:
        parser.error("--ray-address goes with --actors N (Ape-X)")
    check_envs(parser, args)
    problem = device_problem(args.device)
    if problem:
        parser.error(f"--device {args.device}: {problem}")
    if getattr(args, "tensorboard", False) and importlib.util.find_spec("tensorboard") is None:
        parser.error("--tensorboard needs the tensorboard package: pip install tensorboard")
    if getattr(args, "track", False) and importlib.util.find_spec("wandb") is None:
        parser.error("--track needs the wandb package: pip install .[wandb] (or pip install wandb)")
    check_room(parser, args)


def check_envs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--envs, --eval-envs and --learn-while-playing against the other options (--eval-envs by default as many as
    the scheme allows)."""
    serial = args.eval_games == "serial" and args.evaluate is None  # a playback's games are always seeded
    if args.eval_envs is None:
        args.eval_envs = 1 if serial else EVAL_ENVS
    if args.eval_envs < 1:
        parser.error(f"--eval-envs must be positive, got {args.eval_envs}")
    if args.eval_envs > 1 and serial:
        parser.error(
            f"--eval-envs {args.eval_envs}: this run's evaluations are serial (--eval-games serial, one game machine "
            "playing the games in turn), one game at a time"
        )
    if args.learn_while_playing and args.evaluate is None:
        if args.actors:
            parser.error("--learn-while-playing goes without --actors: Ape-X's learner learns apart from its actors")
        first = max(args.batch_size, args.n_step + 1) + args.envs - 1  # the memory before the first learning round
        if args.learning_starts < first:
            parser.error(
                f"--learning-starts {args.learning_starts} must be at least {first} with --learn-while-playing: the "
                f"first learning round samples the memory before its {args.envs} steps are pushed (--batch-size, or "
                "--n-step + 1, and --envs - 1)"
            )
    if args.envs == 1 or args.evaluate is not None:
        return
    if args.actors:
        parser.error(f"--envs {args.envs} goes without --actors: Ape-X's actors each play one game")
    for name in ("steps", "eval_every"):  # a checkpoint falls between two rounds of games
        value, flag = getattr(args, name), f"--{name.replace('_', '-')}"
        if value % args.envs:
            below = value - value % args.envs
            nearest = [below, below + args.envs] if below else [args.envs]
            parser.error(
                f"{flag} {value:,} is not a multiple of --envs {args.envs} (a round plays one step of every game, and "
                f"checkpoints fall between rounds): give {flag} {' or '.join(f'{m:,}' for m in nearest)}, or an "
                f"--envs that divides {value:,}"
            )
    depth = env_layout(args.env)[0]
    if args.memory_size // args.envs <= depth + args.n_step:
        parser.error(f"--memory-size {args.memory_size} is too small to give each of {args.envs} games a stream")


def check_gym_env(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A gymnasium environment (not an Atari game) that can be made, is one this program can play,
    and whose frames the network can read."""
    name = env_label(args.env)
    if args.actors:
        parser.error(f"--actors: Ape-X plays Atari games only, {name} is a gymnasium environment")
    if args.sticky_actions and args.resume is None:  # (a resume keeps what an older run recorded, as it did)
        parser.error(
            f"--sticky-actions {args.sticky_actions}: sticky actions are the Atari emulator's, {name} is a gymnasium "
            "environment, which plays as it is made"
        )
    try:
        frame_shape = env_layout(args.env)[1]
    except ValueError as error:
        parser.error(f"--env {name}: {error}")
    except Exception as error:  # making someone else's environment can raise anything
        parser.error(f"--env {name} cannot be made ({type(error).__name__}: {error})")
    smallest = smallest_input(args.network)
    height, width = frame_shape[-2:]
    if min(frame_shape[-2:]) < smallest:
        parser.error(
            f"--network {args.network} needs frames of at least {smallest}x{smallest} pixels, {name}'s are "
            f"{height}x{width}: try --network minatar (Young & Tian 2019's, for 10x10 frames)"
        )
    if args.render:  # checked now, not at the first evaluation's first frame
        try:
            game = GymEnv(args.env, args.seed, render=True)
            game.reset()
            game.rgb()
            game.env.close()
        except EnvironmentFailed as error:
            parser.error(f"--render: {error}")
        except Exception as error:  # making someone else's environment can raise anything
            parser.error(
                f"--render: {name} cannot be made to render rgb_array images ({type(error).__name__}: {error})"
            )


def network_bytes(args: argparse.Namespace, input_shape: tuple[int, int, int]) -> int:
    """Memory, at least, that the network of --network takes on states of ``input_shape``: to train (the online
    and target networks, the online one's gradients and Adam's two moments, and a batch's activations forward in
    both networks and backward), or to play a checkpoint (one network, one state's activations)."""
    units = args.atoms if args.distributional else 1
    parameters, activations = network_size(
        1, input_shape, args.dueling, args.network, units, args.noisy
    )  # 1 action: least
    if args.evaluate is not None:
        return 4 * (parameters + activations)
    return 4 * (5 * parameters + 3 * args.batch_size * activations)


def check_room(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The run's network, games and (to train) replay memory, estimated before any is allocated against the memory
    where each would be: on a GPU, the network and with --memory-device device the memory's frames; in RAM, all the
    rest together. Refused in one line naming each part's flag, the largest first."""
    depth, frame_shape = env_layout(args.env)
    height, width = frame_shape[-2:]
    device = pick_device(args.device)
    on_device = device.type == "cuda"  # other devices share the host's RAM
    network = network_bytes(args, (depth * math.prod(frame_shape[:-2]), height, width))
    flags = f"--network {args.network}" + (f", --atoms {args.atoms:,}" if args.distributional else "")
    if args.evaluate is None:
        flags += f", --batch-size {args.batch_size:,}"
    if not is_atari(args.env):
        flags += (
            f" on {env_label(args.env)}'s {height}x{width} frames: give it smaller ones (gymnasium's ResizeObservation)"
        )
    free = device_free_memory(device)
    if on_device and network > free:
        parser.error(
            f"the network needs at least {size_text(network)} on {device} ({flags}), {size_text(free)} is free there"
        )
    parts = [] if on_device else [(network, f"the network {size_text(network)} ({flags})")]
    games = min(args.eval_envs, args.eval_episodes) + (0 if args.evaluate is not None or args.actors else args.envs)
    parts.append((games * GAME_BYTES, f"{games:,} games {size_text(games * GAME_BYTES)} (--envs, --eval-envs)"))
    if args.evaluate is None:
        memory = memory_bytes(args.memory_size, frame_shape)
        if memory_on_device(args):
            if memory + DEVICE_HEADROOM > free:
                parser.error(
                    f"--memory-size {args.memory_size:,} needs {size_text(memory)} on {device}, {size_text(free)} is "
                    f"free there and {size_text(DEVICE_HEADROOM)} stays for the networks; choose a smaller one or "
                    "--memory-device host"
                )
            memory = args.memory_size * SCALAR_BYTES  # the host keeps the scalars alone
        parts.append((memory, f"the replay memory {size_text(memory)} (--memory-size {args.memory_size:,})"))
        if args.actors and args.ray_address is None:  # the actors' processes run here too
            actors = args.actors * actor_bytes(args.chunk_steps, args.n_step)
            parts.append((actors, f"{args.actors} Ape-X actors {size_text(actors)} (--actors)"))
    needed, available = sum(size for size, _ in parts), available_memory()
    if needed > available:
        listed = "; ".join(text for _, text in sorted(parts, key=lambda part: -part[0]))
        parser.error(
            f"this run needs at least {size_text(needed)} of RAM, {size_text(available)} is available here (free "
            f"memory, within any container limit): {listed}; lower the first"
        )


def size_text(size: int) -> str:
    """Bytes as GiB with one decimal, or as MiB below a tenth of a GiB."""
    return f"{size / 2**30:,.1f} GiB" if size >= 2**30 / 10 else f"{size / 2**20:.0f} MiB"


def check_training(parser: argparse.ArgumentParser, args: argparse.Namespace, resuming: bool) -> None:
    """What training needs beyond valid values: learning that starts before the run ends, and a run folder that
    holds no other run."""
    if args.learning_starts >= args.steps and not resuming:
        parser.error(f"--learning-starts {args.learning_starts} must be below --steps {args.steps}")
    if args.out is None:
        args.out = default_out(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file, not a folder")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            parser.error(f"--out {out}: {parent} is a file, not a folder")
    if not resuming and ((out / REWARDS_FILE).exists() or any(out.glob("model_*.pt"))):
        parser.error(f"{out} already holds a run: continue it with --resume {out}, or choose another --out")


def memory_bytes(memory_size: int, frame_shape: tuple[int, ...] = (FRAME_SIZE, FRAME_SIZE)) -> int:
    """RAM of a replay memory of ``memory_size`` steps: one frame (an Atari one unless given) and 7
    bytes of scalars each."""
    return memory_size * (math.prod(frame_shape) + SCALAR_BYTES)


def memory_on_device(args: argparse.Namespace) -> bool:
    """Whether ``--memory-device`` puts the replay memory's frames on the training device."""
    if args.memory_device != "auto":
        return args.memory_device == "device"
    device = pick_device(args.device)
    needed = memory_bytes(args.memory_size, env_layout(args.env)[1]) + DEVICE_HEADROOM
    return device.type == "cuda" and needed <= device_free_memory(device)


def device_free_memory(device: torch.device) -> int:
    """Bytes free on ``device``: CUDA's own count; other devices share host RAM."""
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else available_memory()


def default_out(args: argparse.Namespace) -> str:
    """``runs/<Game>-seed<seed>``, then a tag for each learning variant the preset (if any) does
    not already set, then the preset's name: runs of different variants never share a folder."""
    recipe = PRESETS.get(args.preset, {})
    variants = (
        ("prioritized", "per"),
        ("double", "double"),
        ("dueling", "dueling"),
        ("distributional", "c51"),
        ("noisy", "noisy"),
    )
    tags = [tag for name, tag in variants if getattr(args, name) and not recipe.get(name)]
    if args.n_step != recipe.get("n_step", 1):
        tags.append(f"n{args.n_step}")
    if args.actors:
        tags.append(f"apex{args.actors}")
    return "-".join([f"runs/{game_name(args.env)}-seed{args.seed}", *tags, *([args.preset] if args.preset else [])])


def explicit_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> dict[str, Any]:
    """The options the user actually typed, with their parsed values."""
    quiet = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            kwargs = {"dest": action.dest, "default": argparse.SUPPRESS}
            options = action.option_strings
            if isinstance(action, argparse.BooleanOptionalAction):
                kwargs["action"], options = argparse.BooleanOptionalAction, options[:1]  # it adds --no-X itself
            else:
                kwargs["type"] = action.type
            quiet.add_argument(*options, **kwargs)
    return vars(quiet.parse_known_args(argv)[0])


def threads_option(text: str) -> str | int:
    """--threads: ``auto`` or a count of 1 or more."""
    if text == "auto":
        return text
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be auto or a whole number of 1 or more, got {text!r}")
    return count


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota where one is set."""
    cpus = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def cgroup_cpu_quota() -> float | None:
    """CPUs' worth of time the container may use (cgroup v2 ``cpu.max``, or v1's CFS quota), or None."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    with contextlib.suppress(OSError, ValueError):
        quota_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 else None
    return None


def use_threads(option: str | int) -> int:
    """Run torch's intra-op and inter-op pools and numba with ``option`` threads (``auto``: the
    available CPUs); return the count."""
    count = available_cpus() if option == "auto" else int(option)
    torch.set_num_threads(count)
    with contextlib.suppress(RuntimeError):  # torch fixes the inter-op pool once it has been used
        torch.set_num_interop_threads(count)
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    return count


def keep_freed_memory() -> None:
    """Make glibc's malloc keep freed blocks of up to 32 MiB for reuse instead of returning them to
    the system. A learning step allocates and frees tensors of a few MiB (a float batch of frame
    stacks is 3.6 MiB); by default glibc gives such blocks back, and each step then pays to fault
    and zero fresh pages: 3,000 page faults a step, 25% of a one-thread learning step here. Other
    C libraries are left as they are."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt  # glibc's; absent elsewhere
        m_trim_threshold, m_mmap_threshold = -1, -3
        mallopt(m_mmap_threshold, 32 * 2**20)  # blocks up to 32 MiB come from the heap, not fresh mmaps
        mallopt(m_trim_threshold, 2**30)  # and the heap keeps up to 1 GiB free at its top


def learner_threads(args: argparse.Namespace) -> str | int:
    """The --threads of the learner. ``auto`` with Ape-X actors on this machine playing flat out
    (--replay-ratio free): the available CPUs less one per actor (each runs one thread), at least
    one. With the fixed ratio the actors mostly wait for the learner, which then gets every CPU
    (measured on 2 cores, 2 actors: 2 learner threads ran 1.3 times the steps/s of 1)."""
    if args.actors and args.ray_address is None and args.threads == "auto" and args.replay_ratio == "free":
        return max(1, available_cpus() - args.actors)
    return args.threads


def available_memory(
    cgroup: Path = Path("/sys/fs/cgroup"),
    meminfo: Path = Path("/proc/meminfo"),
    membership: Path = Path("/proc/self/cgroup"),
) -> int:
    """Bytes of RAM a new run can have: what the system has available (free, or reclaimable from
    caches), and no more than the memory limit of this process's own cgroup, or of any cgroup above
    it, leaves (cgroup v2 or v1; a Slurm job's limit is on its own cgroup, not the root)."""
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(line for line in meminfo.read_text().splitlines() if line.startswith("MemAvailable:"))
        available = int(line.split()[1]) * 1024
    for folder, limit, usage in cgroup_memory_files(cgroup, membership):
        with contextlib.suppress(OSError, ValueError):
            room = int((folder / limit).read_text()) - int((folder / usage).read_text())  # "max": no limit
            available = max(0, min(available, room))
    return available


def cgroup_memory_files(cgroup: Path, membership: Path) -> list[tuple[Path, str, str]]:
    """(folder, limit file, usage file) of each cgroup from this process's own up to the root, v2
    and v1, as /proc/self/cgroup names them (the root alone where it cannot be read)."""
    paths = {"v2": "/", "v1": "/"}
    with contextlib.suppress(OSError):
        for line in membership.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                paths["v2"] = path
            elif "memory" in controllers.split(","):
                paths["v1"] = path
    found = []
    for version, base, limit, usage in (
        ("v2", cgroup, "memory.max", "memory.current"),
        ("v1", cgroup / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"),
    ):
        folder = base / paths[version].strip("/")
        while True:
            found.append((folder, limit, usage))
            if folder == base:
                break
            folder = folder.parent
    return found


ACTOR_PROCESS_BYTES = 120 * 2**20  # an actor's Ray worker with torch, the game and its network (measured: 115 MB)


def actor_bytes(chunk_steps: int, n_step: int) -> int:
    """RAM of one Ape-X actor process: the process, its recent steps and the chunk it sends."""
    return ACTOR_PROCESS_BYTES + 2 * (chunk_steps + n_step + STACK_DEPTH + 1) * FRAME_SIZE * FRAME_SIZE


def device_problem(name: str) -> str | None:
    """Why ``--device name`` cannot run with this torch build on this machine, or None."""
    if name == "auto":
        return None
    try:
        device = torch.device(name)
    except RuntimeError:
        return "not a device; use auto, cpu, cuda, cuda:N or mps"
    build = f"torch {torch.__version__}"
    if device.type == "cpu":
        return None
    if device.type == "cuda":
        if not torch.backends.cuda.is_built():
            return f"this torch build has no CUDA support ({build}); use --device cpu or install a CUDA build"
        count = torch.cuda.device_count()
        if count == 0:
            return "no CUDA device is visible on this machine; use --device cpu"
        if device.index is not None and device.index >= count:
            return f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        return None
    if device.type == "mps":
        if not torch.backends.mps.is_built():
            return f"this torch build has no MPS support ({build}); use --device cpu"
        if not torch.backends.mps.is_available():
            return "MPS is not available on this machine; use --device cpu"
        return None
    return "only cpu, cuda, cuda:N and mps are supported"


def pick_device(name: str) -> torch.device:
    """``auto``: CUDA, then MPS, then the CPU; any other name as given (checked by ``check_values``)."""
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
