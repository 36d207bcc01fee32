"""Training on gymnasium environments other than the built-in Atari games: MinAtar (Young & Tian
2019), gymnasium's frame stacks, and our own AtariGymEnv through the generic path."""

import itertools
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.registration import EnvSpec
from gymnasium.wrappers import FrameStackObservation, ResizeObservation, TransformObservation

from dqn_atari import dqn, main
from dqn_atari.utils_config import build_parser, learning_defaults, parse_config
from dqn_atari.utils_drl import Agent
from dqn_atari.utils_env import (
    EvaluationStopped,
    FrameStack,
    GymEnv,
    atari_defaults_note,
    frame_stacker,
    register_plugin_envs,
    resolve_env_id,
)
from dqn_atari.utils_run import read_episodes, save_checkpoint

BaseEnv = pytest.importorskip("minatar.gym", reason="pip install minatar==1.0.15 (make install does)").BaseEnv

MINATAR = "MinAtar/Breakout-v1"  # 10x10x4 boolean observations, channels last; 3 actions
MINATAR_RUN = [
    "--env", MINATAR, "--network", "minatar", "--learning-starts", "500", "--memory-size", "5000",
    "--eps-decay-steps", "2000", "--target-every", "200", "--train-every", "1", "--lr", "1e-3", "--threads", "1",
]  # fmt: skip


def scores(run: Path) -> list[float]:
    """The evaluation means of rewards.txt, in order."""
    return [float(line.split()[2]) for line in (run / "rewards.txt").read_text().splitlines()]


def test_a_minatar_game_learns_from_the_command_line(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main.main([*MINATAR_RUN, "--steps", "4000", "--eval-every", "4000", "--eval-episodes", "20", "--out", str(run)])
        == 0
    )
    out = capsys.readouterr().out
    assert "Note: no-op starts, FIRE presses, lives and a resume within a game are Atari's" in out
    # Of the defaults made for Atari, the note names the one this command keeps (it gives --learning-starts and
    # --eps-decay-steps).
    assert (
        "Note: these defaults are Atari's (rewards clipped to their sign); for MinAtar's games, --preset minatar" in out
    )
    untrained, trained = scores(run)
    # A uniformly random paddle breaks about half a brick a game (the first games of episodes.csv).
    random_play = read_episodes(run / "episodes.csv")[:50, 1].mean()
    assert untrained <= 1.0 and random_play < 1.0
    assert trained >= 2.5, f"mean score {trained} after 4,000 steps (untrained {untrained}, random {random_play:.2f})"
    config = json.loads((run / "config.json").read_text())
    assert config["env"] == MINATAR and config["network"] == "minatar"


def test_the_atari_defaults_note_names_only_the_defaults_a_run_keeps():
    defaults = learning_defaults()
    assert atari_defaults_note(defaults, defaults) == (
        "these defaults are Atari's (50,000 random steps, epsilon annealed over 1,000,000 steps, rewards clipped to "
        "their sign); for MinAtar's games, --preset minatar gives MinAtar's own DQN settings"
    )
    changed = {**defaults, "learning_starts": 500, "eps_decay_steps": 2000, "clip_rewards": False}
    assert atari_defaults_note(changed, defaults) is None  # every one given: no note


def test_a_gymnasium_env_object_trains_from_python_with_one_frame_per_step_in_memory(tmp_path):
    """dqn.train takes an environment made by gymnasium.make, wrappers included (its spec is saved and
    makes the evaluations' environments); the stacks of FrameStackObservation are rebuilt from one
    frame per step in the replay memory; the handle it returns acts on the environment's observations."""
    register_plugin_envs()
    env = FrameStackObservation(gym.make(MINATAR), 2, padding_type="zero")
    options = {"network": "minatar", "learning_starts": 100, "memory_size": 1000, "eval_episodes": 2, "threads": 1}
    run, agent = dqn.train(env=env, steps=300, eval_every=300, save_memory=True, out=tmp_path / "run", **options)
    config = json.loads((run / "config.json").read_text())
    assert json.loads(config["env"])["additional_wrappers"][0]["kwargs"] == {"stack_size": 2, "padding_type": "zero"}
    assert len(scores(run)) == 2
    frames = torch.load(run / "memory.pt", weights_only=True)["memory"]["frames"]
    assert tuple(frames.shape) == (300, 4, 10, 10)  # one frame (channels first) per step, not a stack of 2
    assert set(np.unique(frames[:300].numpy())) == {0, 255}  # booleans as the network's 0-255 scale
    observation, _ = agent.make_env(seed=1).reset()
    assert observation.shape == (2, 10, 10, 4) and 0 <= agent.act(observation) < 3
    assert np.array_equal(agent.make_env(seed=1).reset()[0], observation)  # seeded
    assert len(agent.evaluate(episodes=2)) == 2
    with pytest.raises(ValueError, match=r"an observation is a \(2, 10, 10, 4\) array"):
        agent.act(observation[-1])
    with pytest.raises(ValueError, match=r"an environment object must come from gymnasium\.make"):
        dqn.train(env=BaseEnv(game="breakout"), out=tmp_path / "bad")


@pytest.mark.parametrize("padding", ["reset", "zero"])
def test_the_agents_stacks_are_the_stacks_the_environment_returns(padding):
    """Rebuilt from one frame per step, through resets, under the wrapper's padding."""
    register_plugin_envs()
    wrapped = FrameStackObservation(gym.make(MINATAR), 3, padding_type=padding)
    env = GymEnv(wrapped.spec.to_json(), seed=4)  # made again from its spec, as a run does
    assert (env.stack_depth, env.frame_shape, env.stack_rule.zero_fill) == (3, (4, 10, 10), padding == "zero")
    stack, rng, resets = FrameStack(env.stack_depth, env.frame_shape, env.stack_rule), np.random.default_rng(0), 0
    observation, _ = wrapped.reset(seed=4)
    state = stack.reset(env.reset())
    for _ in range(300):
        assert np.array_equal(state, env.state(observation))
        action = int(rng.integers(env.n_actions))
        result = env.step(action)
        observation, _, terminated, truncated, _ = wrapped.step(action)
        assert np.array_equal(result.frame, env.frame(observation))
        assert (result.terminated, result.truncated) == (terminated, truncated)
        if result.terminated or result.truncated:
            state, resets = stack.reset(env.reset()), resets + 1
            observation, _ = wrapped.reset()
        else:
            state = stack.push(result.frame)
    assert resets >= 3


def test_observations_are_read_channels_first_or_last_and_others_refused():
    register_plugin_envs()
    minatar = GymEnv(MINATAR, 0)  # channels last, no stacks: the whole observation is a frame
    assert (minatar.frame_shape, minatar.stack_depth) == ((4, 10, 10), 1)
    atari = GymEnv("dqn_atari.utils_env:AtariGymEnv", 0)  # (4, 84, 84): channels first, its own stacks
    assert (atari.frame_shape, atari.stack_depth) == ((4, 84, 84), 1)
    stacked = FrameStackObservation(gym.make(MINATAR), 2)
    assert frame_stacker(stacked) is stacked
    # A wrapper above the stacker may change what it returns: its stacks are not the observations.
    space = gym.spaces.Box(0, 1, (2, 10, 10, 4), bool)
    assert frame_stacker(TransformObservation(stacked, lambda o: o[::-1].copy(), space)) is None
    assert frame_stacker(FrameStackObservation(gym.make(MINATAR), 2, padding_type=np.ones((10, 10, 4), bool))) is None
    with pytest.raises(ValueError, match="observations must be images, a Box of uint8 or bool"):
        GymEnv("CartPole-v1", 0)
    with pytest.raises(ValueError, match="actions must be discrete"):
        GymEnv("Pendulum-v1", 0)


def test_the_command_line_refuses_what_it_cannot_train_in_one_line(capsys):
    for argv, message in [
        (["--env", "CartPole-v1"], "--env CartPole-v1: observations must be images"),
        (["--env", MINATAR], "--network nature needs frames of at least 36x36 pixels, MinAtar/Breakout-v1's are 10x10"),
        (["--env", MINATAR, "--network", "minatar", "--actors", "2"], "--actors: Ape-X plays Atari games only"),
    ]:
        with pytest.raises(SystemExit):
            main.main(argv)
        assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_an_ale_id_of_older_gymnasium_is_the_built_in_game():
    assert resolve_env_id("BreakoutNoFrameskip-v4") == "ALE/Breakout-v5"


def test_our_atari_env_through_the_generic_path_plays_the_built_in_games(tmp_path):
    """dqn_atari.utils_env:AtariGymEnv (Breakout, its own 4-frame stacks) as any gymnasium environment: the
    same training games, step by step, and the same evaluation, as --env Breakout for the same seed."""
    common = ["--steps", "600", "--learning-starts", "500", "--memory-size", "1000", "--eps-end", "1.0",
              "--eval-every", "600", "--eval-episodes", "1", "--threads", "1", "--seed", "3"]  # fmt: skip
    assert main.main(["--env", "Breakout", *common, "--out", str(tmp_path / "built-in")]) == 0
    assert main.main(["--env", "dqn_atari.utils_env:AtariGymEnv", *common, "--out", str(tmp_path / "generic")]) == 0
    built_in, generic = (read_episodes(tmp_path / name / "episodes.csv") for name in ("built-in", "generic"))
    assert len(built_in) >= 2 and np.array_equal(built_in[:, :3], generic[:, :3])  # step, score, length
    first_evaluation = [(tmp_path / name / "rewards.txt").read_text().splitlines()[0].split()[:7]
                        for name in ("built-in", "generic")]  # fmt: skip
    assert first_evaluation[0] == first_evaluation[1]


@pytest.mark.parametrize("scheme", ["seeded", "serial"])
def test_a_stopped_evaluation_of_a_gymnasium_env_goes_on_or_is_played_again_whole(tmp_path, capsys, scheme):
    """Seeded evaluation games each start from their seed: a stopped evaluation goes on from its finished games.
    Serial ones go on from where the last left the environment, whose state cannot be saved: the evaluation
    starts again from its first game (with a note). Either way, to the scores of one never stopped."""
    argv = [*MINATAR_RUN, "--eval-episodes", "4", "--eval-games", scheme, "--out", str(tmp_path)]
    args, _ = parse_config([*argv, "--eval-envs", "2" if scheme == "seeded" else "1"])
    env = main.make_env(args, args.seed)
    agent = Agent(env.n_actions, torch.device("cpu"), seed=args.seed, **main.agent_options(args, env))
    rule = main.stack_rule(args, env)
    whole = main.run_evaluation(args, agent, 0, tmp_path, lambda: False, rule)
    rounds, half_way = itertools.count(), whole.steps // args.eval_envs // 2  # the untrained agent's games are alike
    with pytest.raises(EvaluationStopped) as stop:
        main.run_evaluation(args, agent, 0, tmp_path, lambda: next(rounds) == half_way, rule)
    finished = stop.value.finished
    assert 1 <= len(finished.scores) < 4 and (finished.env is None) == (scheme == "seeded")
    again = main.run_evaluation(args, agent, 0, tmp_path, lambda: False, rule, finished)
    assert (again.scores, again.steps) == (whole.scores, whole.steps)
    restarted = f"cannot go on after its {len(finished.scores)} finished games" in capsys.readouterr().out
    assert restarted == (scheme == "serial")


PLANTED_MODULE = """
from pathlib import Path
Path(__file__).with_name("imported").touch()  # what importing it did


class Env:
    pass
"""


def test_a_saved_environment_that_names_code_is_made_only_when_the_user_names_it(tmp_path, monkeypatch, capsys):
    """A run folder from elsewhere whose saved env is an EnvSpec with entry point os:system (and a wrapper from a
    module it ships), or a module:Class: --resume, --evaluate and dqn.load_agent import and call none of it, and say
    in one line what it would import; given --env again (trust_env=True), it is made as before."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "planted.py").write_text(PLANTED_MODULE)
    imported, ran = tmp_path / "imported", tmp_path / "the command ran"
    spec = {
        "id": "Innocent-v0", "entry_point": "os:system", "kwargs": {"command": f"touch '{ran}'"},
        "additional_wrappers": [{"name": "W", "entry_point": "planted:Env", "kwargs": {}}],
    }  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()

    def save_run(env: str) -> None:
        config = {**vars(build_parser().parse_args([])), "env": env, "out": str(run)}
        save_checkpoint(run / "model_001.pt", {"config": config, "run": {"step": 100}, "agent": {}})

    for saved, named in [("planted:Env", "planted:Env"), (json.dumps(spec), "os:system, planted:Env")]:
        save_run(saved)
        for argv in (["--resume", str(run), "--steps", "200"], ["--evaluate", str(run / "model_001.pt")]):
            with pytest.raises(SystemExit):
                main.main(argv)
            line = capsys.readouterr().err.strip().splitlines()[-1]
            assert f"the saved run's environment would import and call {named}: if you trust" in line
        with pytest.raises(ValueError, match=f"would import and call {named}: pass trust_env=True"):
            dqn.load_agent(run)
        assert resolve_env_id(saved) == saved  # reading the name (as a report does) imports nothing either
        assert not imported.exists() and not ran.exists() and "planted" not in sys.modules
    # Named by the user, the saved environment is made (here: the command runs).
    with pytest.raises(SystemExit):
        main.main(["--evaluate", str(run / "model_001.pt"), "--env", json.dumps(spec)])
    assert ran.exists()


def test_an_environment_that_never_ends_is_cut_at_the_frame_limit(tmp_path):
    """--max-episode-frames / 4 steps for a gymnasium environment (it was ignored: the first evaluation hung)."""
    argv = ["--env", "gym_envs:Endless", "--network", "minatar", "--max-episode-frames", "400", "--threads", "1",
            "--learning-starts", "100", "--memory-size", "1000", "--eval-episodes", "1"]  # fmt: skip
    args, _ = parse_config([*argv, "--out", str(tmp_path / "run")])
    env = main.make_env(args, 0)
    env.reset()
    ends = [env.step(0) for _ in range(100)]
    assert [step.truncated for step in ends] == [False] * 99 + [True] and not any(step.terminated for step in ends)
    run = tmp_path / "run"
    assert main.main([*argv, "--steps", "300", "--eval-every", "300", "--out", str(run)]) == 0
    assert [line.split()[2] for line in (run / "rewards.txt").read_text().splitlines()] == ["100.0", "100.0"]
    assert read_episodes(run / "episodes.csv")[:, 2].tolist() == [100, 100, 100]  # lengths of the training games
    assert len(dqn.load_agent(run, trust_env=True).evaluate(episodes=1)) == 1
    env = dqn.load_agent(run, trust_env=True).make_env()
    env.reset()
    assert [env.step(0)[3] for _ in range(100)][-2:] == [False, True]


def frames_env(**kwargs) -> str:
    """--env for tests/gym_envs.py's Frames with these arguments: its spec in JSON."""
    return EnvSpec(id="Frames-v0", entry_point="gym_envs:Frames", kwargs=kwargs).to_json()


def test_observations_are_read_as_declared_or_refused_in_one_line(tmp_path, capsys):
    """A Box(0, 1) uint8 image is scaled to 0-255, as bool frames are (it was read as a near-black one); an
    observation off its space's dtype (float [0, 1) was cast to zeros, int64 modulo 256) or above its range is
    refused in one line, the first one before anything is written; --sticky-actions, which did nothing, too."""
    binary, levels = GymEnv(frames_env(high=1), 0), GymEnv(frames_env(high=3), 0)
    assert (binary.reset().max(), binary.step(0).frame.max()) == (0, 255)
    assert (levels.reset().max(), levels.step(0).frame.max(), levels.step(0).frame.max()) == (0, 85, 170)
    common = ["--network", "minatar", "--learning-starts", "100", "--memory-size", "1000", "--threads", "1",
              "--steps", "200", "--eval-every", "200", "--eval-episodes", "1", "--max-episode-frames", "400"]  # fmt: skip

    def error_line(env: str, *argv: str) -> str:
        with pytest.raises(SystemExit):
            main.main(["--env", env, *common, *argv, "--out", str(tmp_path / "run")])
        return capsys.readouterr().err.strip().splitlines()[-1]

    for given in ("float32", "int64"):
        line = error_line(frames_env(given=given))
        assert line.endswith(f"Frames-v0 gave an observation of {given} values, its observation_space declares uint8: "
                             "give uint8 ones (a cast would change them silently)")  # fmt: skip
    assert error_line("gym_envs:Endless", "--sticky-actions", "0.25").endswith(
        "--sticky-actions 0.25: sticky actions are the Atari emulator's, gym_envs:Endless is a gymnasium environment, "
        "which plays as it is made"
    )
    assert not (tmp_path / "run").exists()
    # Later in a game: the step that gives it ends the run in one line.
    assert main.main(["--env", frames_env(high=1, period=3), *common, "--out", str(tmp_path / "run")]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Frames-v0 gave an observation with a pixel of 2, above the 1 its observation_space declares; " in line


def test_wrapped_environment_objects_train_or_are_refused_in_one_line(tmp_path):
    """ResizeObservation's shape comes back from the spec's JSON as a list, which it refused; a wrapper given a
    function (TransformObservation's lambda) cannot be saved: one line, not a TypeError; nor is dqn.train(evaluate=)."""
    base = gym.make(EnvSpec(id="Frames-v0", entry_point="gym_envs:Frames", kwargs={"length": 50}))
    options = {"network": "minatar", "learning_starts": 100, "memory_size": 1000, "eval_episodes": 1, "threads": 1}
    run, agent = dqn.train(env=ResizeObservation(base, (12, 12)), steps=150, eval_every=150, out=tmp_path / "run",
                           **options)  # fmt: skip
    assert agent.make_env().reset()[0].shape == (12, 12) and len(scores(run)) == 2
    with pytest.raises(ValueError, match=r"^env: its spec cannot be saved to make it again \(Object of type function"):
        dqn.train(env=TransformObservation(base, lambda o: o, base.observation_space), out=tmp_path / "bad")
    with pytest.raises(ValueError, match=r"^evaluate: dqn.train trains; to play a checkpoint, dqn.load_agent"):
        dqn.train(evaluate=str(run / "model_001.pt"))
    assert not (tmp_path / "bad").exists()
