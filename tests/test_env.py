"""The Atari pipeline: game names, preprocessing, determinism, and one pipeline for
training and evaluation."""

import numpy as np
import pytest

from dqn_atari.utils_config import parse_config
from dqn_atari.utils_env import (
    FRAME_SIZE,
    AtariEnv,
    EvaluationStopped,
    Player,
    SerialGames,
    evaluate,
    make_gym_env,
    resolve_env_id,
)
from dqn_atari.utils_memory import ReplayMemory
from dqn_atari.utils_types import NATURE_STACKS, StackRule, StepResult


@pytest.mark.parametrize(
    "name,expected",
    [
        ("Breakout", "ALE/Breakout-v5"),
        ("pong", "ALE/Pong-v5"),
        ("ALE/Breakout-v5", "ALE/Breakout-v5"),
        ("space_invaders", "ALE/SpaceInvaders-v5"),
        ("SpaceInvaders", "ALE/SpaceInvaders-v5"),
    ],
)
def test_game_names(name, expected):
    assert resolve_env_id(name) == expected


def test_unknown_game_names_close_matches():
    with pytest.raises(ValueError, match="did you mean Breakout"):
        resolve_env_id("Breakot")
    with pytest.raises(ValueError, match="unknown environment 'qwzx': not an Atari game, a registered gymnasium id"):
        resolve_env_id("qwzx")
    with pytest.raises(ValueError, match=r"did you mean .*MinAtar/Breakout-v1"):  # registered by MinAtar's entry point
        resolve_env_id("MinAtar/Breakout-v9")
    with pytest.raises(ValueError, match="':Env': module:Class names a module and what in it makes"):
        resolve_env_id(":Env")
    # A module:Class is imported only when made (a saved run's name is read without importing anything).
    with pytest.raises(
        ValueError, match=r"'dqn_atari\.utils_env:NoSuchEnv': module dqn_atari\.utils_env has no NoSuchEnv"
    ):
        make_gym_env("dqn_atari.utils_env:NoSuchEnv")
    with pytest.raises(ValueError, match="'no_such_module:Env': cannot import no_such_module"):
        make_gym_env("no_such_module:Env")


def area_resize(image: np.ndarray, size: int) -> np.ndarray:
    """Reference area interpolation: each output pixel averages the input area it covers."""

    def weights(n_in: int) -> np.ndarray:
        scale = n_in / size
        w = np.zeros((size, n_in))
        for i in range(size):
            lo, hi = i * scale, (i + 1) * scale
            for j in range(int(lo), min(n_in, int(np.ceil(hi)))):
                w[i, j] = max(0.0, min(hi, j + 1) - max(lo, j)) / scale
        return w

    return weights(image.shape[0]) @ image.astype(np.float64) @ weights(image.shape[1]).T


def test_frame_is_max_of_last_two_screens_area_resized():
    env = AtariEnv("ALE/Breakout-v5", seed=0)
    env.reset()
    for _ in range(20):
        env.step(2)
    ale = env._ale
    saved = env.get_state()
    screens = []
    for _ in range(4):
        ale.act(env._actions[3])
        screens.append(ale.getScreenGrayscale())
    expected = area_resize(np.maximum(screens[2], screens[3]), FRAME_SIZE)
    env.set_state(saved)
    frame = env.step(3).frame
    assert frame.shape == (84, 84) and frame.dtype == np.uint8
    assert np.abs(frame.astype(np.float64) - expected).max() <= 1.0


def play(env: AtariEnv, actions: list[int]) -> list:
    env.reset()
    return [env.step(a) for a in actions]


def test_same_seed_same_game_and_state_round_trip():
    actions = list(np.random.default_rng(0).integers(4, size=150))
    a = play(AtariEnv("ALE/Breakout-v5", seed=7), actions)
    b = play(AtariEnv("ALE/Breakout-v5", seed=7), actions)
    assert all(np.array_equal(x.frame, y.frame) and x[1:] == y[1:] for x, y in zip(a, b, strict=True))

    env = AtariEnv("ALE/Breakout-v5", seed=7, sticky_actions=0.25)
    play(env, actions[:50])
    state = env.get_state()
    first = [env.step(a) for a in actions[50:]]
    env.set_state(state)
    again = [env.step(a) for a in actions[50:]]
    assert all(np.array_equal(x.frame, y.frame) and x[1:] == y[1:] for x, y in zip(first, again, strict=True))


def test_life_loss_game_over_and_frame_limit():
    env = AtariEnv("ALE/Breakout-v5", seed=1)
    results = play(env, [0] * 2000)
    lost = [i for i, r in enumerate(results) if r.life_lost]
    over = next(i for i, r in enumerate(results) if r.terminated)
    assert len([i for i in lost if i < over]) == 4 and not any(results[i].terminated for i in lost[:4])
    assert results[over].life_lost  # the fifth life ends the game
    short = play(AtariEnv("ALE/Breakout-v5", seed=1, max_episode_frames=400), [0] * 200)
    cut = next(i for i, r in enumerate(short) if r.truncated)
    assert cut < 100 and not short[cut].terminated


@pytest.mark.parametrize(
    "rule", [NATURE_STACKS, StackRule(zero_fill=True, per_life=True), StackRule(zero_fill=True)], ids=str
)
def test_training_and_evaluation_see_identical_states(rule):
    """The states the agent acts on in evaluation, in training, and those the replay
    memory rebuilds for learning are the same arrays for the same game and actions, under each
    stack rule (Nature's, Dopamine's zeros and a new stack per life)."""
    actions = [int(a) for a in np.random.default_rng(3).integers(4, size=400)]
    seen_in_evaluation = []

    def replay_actions(state, epsilon):
        seen_in_evaluation.append(state.copy())
        return actions[len(seen_in_evaluation) - 1]

    env_kwargs = {"env_id": "ALE/Breakout-v5", "seed": 5, "max_episode_frames": 1200}
    result = evaluate(
        one_by_one(replay_actions), serial(AtariEnv(**env_kwargs)), episodes=1, epsilon=0.0, stack_rule=rule
    )
    n = result.steps
    assert 50 < n < 400

    memory = ReplayMemory(1000, stack_rule=rule)
    player = Player(AtariEnv(**env_kwargs), memory)
    seen_in_training = []
    for action in actions[:n]:
        seen_in_training.append(player.state.copy())
        player.step(action)
    assert all(np.array_equal(a, b) for a, b in zip(seen_in_evaluation, seen_in_training, strict=True))

    slots = np.arange(n - 1)
    assert memory.sampleable(slots).all() and memory.dones[slots].any()  # lives were lost on the way
    batch = memory.transitions(slots)
    for t in slots:
        assert np.array_equal(batch.states[t].numpy(), seen_in_evaluation[t])
        if not memory.dones[t]:
            assert np.array_equal(batch.next_states[t].numpy(), seen_in_evaluation[t + 1])
    # Each stack's start, by hand: the first frame at the top, and below it zeros or its copies.
    starts = [0] + [t + 1 for t in slots if memory.dones[t]] if rule.per_life else [0]
    for t in starts:
        state = seen_in_evaluation[t]
        below = np.zeros_like(state[:-1]) if rule.zero_fill else np.repeat(state[-1:], 3, axis=0)
        assert np.array_equal(state[:-1], below)
    assert len(starts) > 1 or not rule.per_life


def test_no_op_starts_and_the_fire_press_can_be_turned_off():
    """--noop-max 0 and --no-fire-reset (Dopamine's and the Atari 100k preprocessing): a game starts
    at its first frame; by default 1 to 30 no-op frames and one FIRE step (4 frames) come first."""
    bare = AtariEnv("ALE/Breakout-v5", seed=3, noop_max=0, fire_reset=False)
    bare.reset()
    assert bare._ale.getEpisodeFrameNumber() == 0
    result = bare.step(0)  # NOOP: with no FIRE, Breakout's ball stays unlaunched and no life is lost
    assert bare._ale.getEpisodeFrameNumber() == 4 and not result.life_lost
    fired = AtariEnv("ALE/Breakout-v5", seed=3, noop_max=0)
    fired.reset()
    assert fired._ale.getEpisodeFrameNumber() == 4
    starts = set()
    for seed in range(6):
        env = AtariEnv("ALE/Breakout-v5", seed=seed)
        env.reset()
        starts.add(env._ale.getEpisodeFrameNumber())
    assert len(starts) > 1 and all(1 + 4 <= frames <= 30 + 4 for frames in starts)


def test_no_op_starts_in_agent_steps_as_dopamines_runner():
    """--noop-unit steps (Dopamine's atari_100k_runner.py): 0 to noop_max - 1 no-op agent steps of
    4 frames each, uniformly drawn, the first frame seen after the max over the last two; the
    default counts 1 to noop_max emulator frames."""
    env = AtariEnv("ALE/Pong-v5", seed=0, noop_max=30, noop_unit="steps", fire_reset=False)
    counts = []
    for _ in range(600):
        env.reset()
        frames = env._ale.getEpisodeFrameNumber()
        assert frames % 4 == 0
        counts.append(frames // 4)
    assert set(counts) == set(range(30))  # 0..29, each about 20 times
    assert max(np.bincount(counts)) < 45
    # The frame after k no-op steps is the one those steps show, the max over their last two frames.
    env = AtariEnv("ALE/Pong-v5", seed=1, noop_max=30, noop_unit="steps", fire_reset=False)
    first = env.reset()
    played = AtariEnv("ALE/Pong-v5", seed=1, noop_max=0, fire_reset=False)
    played.reset()
    frame = first if not env._ale.getEpisodeFrameNumber() else None
    for _ in range(env._ale.getEpisodeFrameNumber() // 4):
        frame = played.step(0).frame
    assert np.array_equal(first, frame)
    frames_unit = AtariEnv("ALE/Pong-v5", seed=0, noop_max=30, fire_reset=False)
    starts = set()
    for _ in range(200):
        frames_unit.reset()
        starts.add(frames_unit._ale.getEpisodeFrameNumber())
    assert starts == set(range(1, 31))


def test_lost_lives_need_not_be_terminal_and_the_full_action_space():
    """Machado et al. (2018): a lost life is not a terminal (only the game's end is), and the agent
    has all 18 joystick actions, whatever the game uses."""
    env = AtariEnv("ALE/Breakout-v5", seed=1, life_loss_terminal=False)
    results = play(env, [0] * 2000)
    over = next(i for i, r in enumerate(results) if r.terminated)
    assert not any(r.life_lost for r in results[:over]) and env._ale.lives() == 0  # 5 lives lost meanwhile
    assert AtariEnv("ALE/Breakout-v5", seed=1).n_actions == 4
    full = AtariEnv("ALE/Breakout-v5", seed=1, full_action_space=True)
    assert full.n_actions == 18 and full.action_meanings[1] == "FIRE"


def test_an_evaluation_shows_its_games_and_the_current_games_steps(capsys):
    """A game without a serve runs to the frame limit: the bar says how far the game has got."""
    env = AtariEnv("ALE/Breakout-v5", seed=0, fire_reset=False, max_episode_frames=4400)
    result = evaluate(one_by_one(lambda state, epsilon: 0), serial(env), episodes=1, epsilon=0.0, show_progress=True)
    assert result.steps > 1000
    shown = capsys.readouterr().err
    assert "evaluating" in shown and "game 1: 1,000 steps" in shown
    evaluate(one_by_one(lambda state, epsilon: 0), serial(env), episodes=1, epsilon=0.0)
    assert capsys.readouterr().err == ""  # off unless asked for (playback prints each game instead)


@pytest.mark.parametrize("sticky_actions,noop_unit", [(0.0, "frames"), (0.25, "steps")])
def test_a_stopped_evaluation_goes_on_from_its_finished_games_as_if_never_stopped(sticky_actions, noop_unit):
    """The games an evaluation finished before a stop, handed to a new one (on a game made with another
    seed, with another generator), are not played again, and the rest are the games it would have played:
    the same scores and steps, the same draws of the acting generator after them."""

    def setup(seed):
        env = AtariEnv("ALE/Breakout-v5", seed, sticky_actions, max_episode_frames=1200, noop_unit=noop_unit)
        rng = np.random.default_rng(seed)
        acts = []

        def act(states, epsilon, rngs):
            acts.append(int(rngs[0].integers(env.n_actions)))
            return [acts[-1]]

        return SerialGames(env, rng), rng, act, acts

    games, rng, act, acts = setup(3)
    straight = evaluate(act, games, episodes=5, epsilon=1.0)
    drawn_after = rng.bit_generator.state
    assert len(set(straight.scores)) > 1  # random play: games that differ
    games, rng, act, first_acts = setup(3)
    with pytest.raises(EvaluationStopped) as stop:
        evaluate(act, games, episodes=5, epsilon=1.0, stopped=lambda: len(first_acts) == straight.steps // 2)
    finished = stop.value.finished
    assert 1 <= len(finished.scores) < 5 and finished.scores == straight.scores[: len(finished.scores)]
    games, rng, act, later_acts = setup(99)
    resumed = evaluate(act, games, episodes=5, epsilon=1.0, finished=finished)
    assert resumed.scores == straight.scores and resumed.steps == straight.steps
    assert later_acts == acts[finished.steps :]  # the finished games are not played again
    assert rng.bit_generator.state == drawn_after


def one_by_one(act):
    """``evaluate``'s act (a batch of states, a generator per game) from one that acts on one state."""
    return lambda states, epsilon, rngs: [act(state, epsilon) for state in states]


def serial(env):
    """``env``'s games in turn, as ``evaluate`` plays them."""
    return SerialGames(env, np.random.default_rng(0))


class ScoringEnv:
    """A one-frame game whose every step scores 5 points and whose fourth step ends it."""

    stack_depth, frame_shape = 1, (8, 8)

    def reset(self) -> np.ndarray:
        self.steps = 0
        return np.zeros(self.frame_shape, np.uint8)

    def step(self, action: int) -> StepResult:
        self.steps += 1
        return StepResult(np.zeros(self.frame_shape, np.uint8), 5.0, False, self.steps == 4, False)


@pytest.mark.parametrize(("clip_rewards", "learned"), [(True, 1.0), (False, 5.0)])
def test_the_memory_holds_clipped_rewards_unless_told_not_to_and_scores_stay_the_games(clip_rewards, learned):
    memory = ReplayMemory(16, stack_depth=1, frame_shape=(8, 8))
    player = Player(ScoringEnv(), memory, clip_rewards)
    games = [player.step(0) for _ in range(4)]
    assert memory.rewards[:4].tolist() == [learned] * 4
    assert games[-1].score == 20.0 and games[-1].length == 4  # the game's own score either way


def test_an_ale_id_names_the_game_and_the_note_says_which_flags_give_its_protocol(tmp_path, capsys):
    """ALE/Breakout-v5 is the game Breakout played with this program's flags (the committed runs' config.json record
    such ids, meaning exactly that): a new run given the id says which flags give what ALE registers it with."""
    small = ["--memory-size", "1000", "--learning-starts", "100", "--out", str(tmp_path / "run")]
    for argv, note in [
        (
            ["--env", "ALE/Breakout-v5"],
            "ALE registers ALE/Breakout-v5 with sticky actions 0.25: add --sticky-actions 0.25",
        ),
        (["--env", "Pong-v0", "--full-action-space"], "add --sticky-actions 0.25 and --no-full-action-space for"),
        (["--env", "ALE/Pong-v5", "--sticky-actions", "0.25"], None),  # v5's protocol
        (["--env", "BreakoutNoFrameskip-v4"], None),  # registered without sticky actions
        (["--env", "Breakout"], None),
        ([], None),  # python main.py
    ]:
        args, _ = parse_config([*argv, *small])
        out = capsys.readouterr().out
        assert args.env in ("ALE/Breakout-v5", "ALE/Pong-v5") and args.sticky_actions == (0.25 if "0.25" in argv else 0)
        assert (note in out) if note else ("Note: --env" not in out), (argv, out)
    parse_config(["--env", "ALE/Breakout-v5", *small])
    assert (
        "Note: --env ALE/Breakout-v5 names the game Breakout alone, played with this program's settings "
        + ("(--sticky-actions 0.0); ALE registers")
        in capsys.readouterr().out
    )
