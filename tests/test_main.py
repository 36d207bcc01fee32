"""End to end: python main.py on a real ALE game, its outputs, resume, Ctrl-C and bad input."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_in_process
from PIL import Image

from dqn_atari import bench, main, sweep, utils_config
from dqn_atari.utils_drl import linear_schedule
from dqn_atari.utils_run import EPISODES_HEADER, HEALTH_FILE, HEALTH_HEADER, load_checkpoint, read_episodes, read_log

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--env", "Breakout", "--learning-starts", "100", "--memory-size", "1000", "--eval-episodes", "1",
    "--max-episode-frames", "2000", "--target-every", "50",
]  # fmt: skip
# Dopamine's DrQ(eps) pipeline, --preset atari100k's, less its learning settings.
DOPAMINE_PIPELINE = [
    "--network", "dopamine", "--augment", "dopamine", "--noop-unit", "steps", "--stack-fill", "zeros",
    "--stack-per-life", "--no-fire-reset",
]  # fmt: skip
# The Atari 100k recipes' learning: a step and a target sync each agent step, double, dueling, 3-step returns.
ATARI100K_LEARNING = ["--target-every", "1", "--double", "--dueling", "--n-step", "3", "--train-every", "1"]
# Rainbow's parts. beta held at 1: prioritized replay anneals it to 1 at --steps, which a split run's first part
# changes; shorter games: a noisy network on Breakout at epsilon 0 may not finish one of 500 steps in 300.
RAINBOW_LIKE = [
    "--distributional", "--noisy", "--prioritized", "--beta0", "1", "--double", "--dueling", "--n-step", "3",
    "--max-episode-frames", "600",
]  # fmt: skip
LINE = re.compile(r"^ *(\d+) +(\d+) (-?\d+\.\d) (\d+\.\d) (-?\d+\.\d) (-?\d+\.\d) (\d+) (\d+)$")


def run_main(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def rewards(run: Path) -> list[tuple[int, int, float]]:
    lines = (run / "rewards.txt").read_text().splitlines()
    for line in lines:
        assert LINE.match(line), line
    return [(int(f[0]), int(f[1]), float(f[2])) for f in (line.split() for line in lines)]


def games(run: Path, checkpoint: str) -> np.ndarray:
    """episodes.csv, checked against the checkpoint: one line per training game up to its step."""
    rows = read_episodes(run / "episodes.csv")
    progress = load_checkpoint(run / checkpoint)["run"]
    assert len(rows) == progress["episodes"]
    assert np.all(np.diff(rows[:, 0]) > 0) and (not len(rows) or rows[-1, 0] <= progress["step"])
    return rows


def assert_same_run(first: Path, second: Path, first_checkpoint: str, second_checkpoint: str) -> tuple[dict, dict]:
    """Two runs' networks (online and target) at those checkpoints and their training games (all but the wall
    times), equal bit for bit; the two checkpoints."""
    checkpoints = load_checkpoint(first / first_checkpoint), load_checkpoint(second / second_checkpoint)
    for name in ("online", "target"):
        for key, value in checkpoints[0]["agent"][name].items():
            assert torch.equal(value, checkpoints[1]["agent"][name][key]), (name, key)
    np.testing.assert_array_equal(*(read_episodes(run / "episodes.csv")[:, :4] for run in (first, second)))
    return checkpoints


def test_train_render_checkpoint_and_resume(tmp_path, capsys):
    run = tmp_path / "run"
    done = run_main(*TINY, "--steps", "300", "--eval-every", "100", "--render", "--out", str(run))
    assert done.returncode == 0, done.stderr
    assert f"Run folder: {run}" in done.stdout
    assert [(i, s) for i, s, _ in rewards(run)] == [(0, 0), (1, 100), (2, 200), (3, 300)]
    for index in range(4):
        frames = sorted((run / f"eval_{index:03d}").iterdir())
        assert frames[0].name == "000000.png" and frames[-1].name == f"{len(frames) - 1:06d}.png"
        with Image.open(frames[-1]) as image:
            assert image.size == (160, 210) and image.mode == "RGB"
        checkpoint = load_checkpoint(run / f"model_{index:03d}.pt")
        assert checkpoint["run"]["step"] == 100 * index and checkpoint["run"]["evaluations"] == index + 1
        assert {"online", "target", "optimizer", "rng"} <= checkpoint["agent"].keys()
        assert checkpoint["config"]["env"] == "ALE/Breakout-v5"
    assert not [p for p in run.rglob("*") if p.name.endswith((".tmp", ".partial"))]
    played = games(run, "model_003.pt")
    assert len(played) >= 1 and (run / "episodes.csv").read_text().startswith(EPISODES_HEADER)
    assert np.all(played[:, 2] >= 1) and played[:, 2].sum() <= 300  # lengths in agent steps
    expected_epsilon = [linear_schedule(int(step), 1.0, 0.1, 1_000_000) for step in played[:, 0]]
    np.testing.assert_allclose(played[:, 3], expected_epsilon, atol=1e-4)
    wall = played[:, 4]  # the run's wall time at each game's end, up to the last evaluation's
    last_evaluation_seconds = float((run / "rewards.txt").read_text().split()[-1])  # rounded to a second
    assert np.all(wall > 0) and np.all(np.diff(wall) >= 0) and wall[-1] <= last_evaluation_seconds + 0.5
    config = json.loads((run / "config.json").read_text())
    assert config.pop("versions") == checkpoint["versions"] and config == checkpoint["config"]

    before = (run / "rewards.txt").read_text()
    games_before = (run / "episodes.csv").read_text()
    resumed = run_in_process(capsys, "--resume", str(run), "--steps", "400")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resuming from {run / 'model_003.pt'} (step 300)\n" in resumed.stdout  # what it goes on from
    assert (run / "rewards.txt").read_text().startswith(before)
    assert rewards(run)[-1][:2] == (4, 400) and len(rewards(run)) == 5
    assert not (run / "eval_004").exists() or len(list((run / "eval_004").iterdir())) > 0
    assert "refilling replay memory" in resumed.stderr  # no saved memory: warm-up instead
    assert (run / "episodes.csv").read_text().startswith(games_before)  # refill games are not logged
    games(run, "model_004.pt")
    # A switch given once (--render) no longer sticks to every later resume: --no-render turns it off.
    assert (run / "eval_004").is_dir()
    assert main.main(["--resume", str(run), "--steps", "500", "--no-render"]) == 0
    assert not (run / "eval_005").exists() and not load_checkpoint(run / "model_005.pt")["config"]["render"]


def test_ctrl_c_saves_a_checkpoint_that_resumes_at_its_step(tmp_path, capsys):
    run = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "main.py"),
            *TINY,
            "--steps",
            "100000",
            "--eval-every",
            "100000",
            "--out",
            str(run),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Started with SIGINT blocked, as children of Ray's workers are (sweeps run main.py there).
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}),
    )
    deadline = time.time() + 120
    while not (run / "model_000.pt").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # let it train for a while
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    step = load_checkpoint(run / "model_interrupted.pt")["run"]["step"]
    assert step > 0 and f"Interrupted at step {step}" in stdout
    assert [i for i, _, _ in rewards(run)] == [0]
    interrupted = games(run, "model_interrupted.pt")

    resumed = run_in_process(capsys, "--resume", str(run), "--steps", str(step + 40), "--eval-every", "100000")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resuming from {run / 'model_interrupted.pt'} (step {step:,})" in resumed.stdout
    assert f"Done: {step + 40} steps" in resumed.stdout
    assert rewards(run)[-1][:2] == (1, step + 40)
    np.testing.assert_array_equal(games(run, "model_001.pt")[: len(interrupted)], interrupted)
    assert not (run / "model_interrupted.pt").exists()  # the finished run leaves no stale stop checkpoint


@pytest.mark.parametrize(
    "recipe",
    [
        [],
        pytest.param(["--augment", "shift", *ATARI100K_LEARNING], marks=pytest.mark.slow),
        pytest.param([*DOPAMINE_PIPELINE, *ATARI100K_LEARNING], marks=pytest.mark.slow),
        pytest.param(RAINBOW_LIKE, marks=pytest.mark.slow),
    ],
    ids=["nature", "atari100k-v1-like", "atari100k-like", "rainbow-like"],
)
def test_resume_with_saved_memory_is_equivalent_to_an_uninterrupted_run(tmp_path, recipe):
    # Batches of 8: a resume does not depend on the batch size, and the recipes learning every step cost less.
    common = [*TINY, *recipe, "--batch-size", "8", "--eval-every", "150", "--save-memory", "--seed", "3"]
    assert main.main([*common, "--steps", "300", "--out", str(tmp_path / "straight")]) == 0
    assert main.main([*common, "--steps", "150", "--out", str(tmp_path / "split")]) == 0
    note = sweep.resume_note(sweep.Run("Breakout", 3, tmp_path / "split"))  # what a sweep says before it resumes
    assert note == "resumes at step 150 as the same run (its replay memory was saved with the checkpoint)"
    assert main.main(["--resume", str(tmp_path / "split"), "--steps", "300"]) == 0
    straight, _ = assert_same_run(tmp_path / "straight", tmp_path / "split", "model_002.pt", "model_002.pt")
    assert straight["run"]["episodes"] == load_checkpoint(tmp_path / "split" / "model_002.pt")["run"]["episodes"]
    assert rewards(tmp_path / "straight") == rewards(tmp_path / "split")
    assert len(games(tmp_path / "straight", "model_002.pt")) >= 1


def test_evaluations_may_change_on_resume_and_training_stays_bit_identical(tmp_path):
    """An evaluation plays its own seeded game with its own generator: a run resumed with another --eval-every
    and --eval-episodes evaluates on the new schedule and trains exactly as the run that kept them."""
    common = [*TINY, "--save-memory", "--seed", "3"]
    assert main.main([*common, "--steps", "300", "--eval-every", "150", "--out", str(tmp_path / "straight")]) == 0
    assert main.main([*common, "--steps", "150", "--eval-every", "150", "--out", str(tmp_path / "split")]) == 0
    argv = ["--resume", str(tmp_path / "split"), "--steps", "300", "--eval-every", "100", "--eval-episodes", "2"]
    assert main.main(argv) == 0
    assert [step for _, step, _ in rewards(tmp_path / "split")] == [0, 150, 200, 300]
    assert (tmp_path / "split" / "rewards.txt").read_text().splitlines()[-1].split()[6] == "2"  # games played
    assert_same_run(tmp_path / "straight", tmp_path / "split", "model_002.pt", "model_003.pt")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--env", "Breakot"], "did you mean Breakout"),
        (["--steps", "0"], "--steps must be positive"),
        (["--batch-size", "64", "--memory-size", "50", "--learning-starts", "40"], "exceeds --memory-size"),
        (["--steps", "1000", "--learning-starts", "5000"], "must be below --steps"),
        (["--eval-epsilon", "1.5"], "--eval-epsilon must be within [0, 1]"),
        (["--beta-end", "2"], "--beta-end must be within [0, 1]"),
        (["--distributional", "--atoms", "1"], "--atoms must be 2 or more, got 1"),
        (["--v-min", "5", "--v-max", "5"], "--v-min 5.0 must be below --v-max 5.0"),
        (["--distributional", "--loss", "mse"], "--distributional learns by its cross-entropy"),
        (["--noisy", "--noisy-sigma0", "0"], "--noisy-sigma0 must be positive and below 3.4e+38 (float32), got 0.0"),
        # Values checked in float32, the type they are used in: these were a traceback, or a NaN network's results.
        (["--noisy", "--noisy-sigma0", "1e39"], "--noisy-sigma0 must be positive and below 3.4e+38 (float32)"),
        (["--v-min=-1e300", "--v-max=1e300"], "--v-min -1e+300 and --v-max 1e+300 must make 51 distinct float32 atoms"),
        (["--v-min=-3e38", "--v-max=3e38"], "--v-min -3e+38 and --v-max 3e+38 must make 51 distinct float32 atoms"),
        (["--v-min", "0", "--v-max", "1e-46"], "--v-min 0.0 and --v-max 1e-46 must make 51 distinct float32 atoms"),
        (["--atoms", "100000000"], "--v-min -10.0 and --v-max 10.0 must make 100000000 distinct float32 atoms"),
        (["--resume", "no/such/run"], "cannot resume: no run folder"),
    ],
)
def test_bad_input_is_one_line_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main.main(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error


def test_negative_numbers_in_any_notation_are_values_not_flags():
    """argparse reads -1 and -1.5 as values, but -1e3 as an unknown flag: every float is a value here."""
    args, _ = utils_config.parse_config(["--v-min", "-1e3", "--v-max", "1E3", "--out", "unused"])
    assert (args.v_min, args.v_max) == (-1000.0, 1000.0)
    args, _ = utils_config.parse_config(["--v-min", "-.5e-2", "--out", "unused"])
    assert args.v_min == -0.005


def test_no_result_is_written_from_a_network_whose_values_are_not_finite(tmp_path, capsys):
    """A noise scale that float32 holds but the noisy layers' products overflow: the untrained network's mean weights
    play, its noisy values are inf or nan. Before, evaluation 0 was written and the run then advised a lower --lr."""
    run = tmp_path / "run"
    argv = [*TINY, "--noisy", "--noisy-sigma0", "1e30", "--steps", "200", "--out", str(run)]
    assert main.main(argv) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "main.py: error: the untrained network's values are not finite; no checkpoint was written yet. Its settings "
        "overflow float32: try a smaller --noisy-sigma0 or a narrower --v-min/--v-max"
    )
    assert not (run / "rewards.txt").exists() and not list(run.glob("model_*.pt"))


def test_existing_run_is_not_overwritten_and_bad_checkpoints_are_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "rewards.txt").write_text("  0        0 1.0 0.0 1.0 1.0 1 1\n")
    with pytest.raises(SystemExit):
        main.main(["--out", str(run)])
    assert f"{run} already holds a run" in capsys.readouterr().err
    assert (run / "rewards.txt").read_text() == "  0        0 1.0 0.0 1.0 1.0 1 1\n"

    with pytest.raises(SystemExit):
        main.main(["--resume", str(run)])
    assert "holds no checkpoint" in capsys.readouterr().err
    (run / "model_000.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit):
        main.main(["--resume", str(run)])
    assert "model_000.pt is not a readable checkpoint" in capsys.readouterr().err


def test_resume_with_more_steps_says_that_betas_schedule_changes(tmp_path, capsys):
    """Beta anneals to 1 at --steps: a prioritized run resumed with another --steps says so."""
    run = tmp_path / "run"
    assert main.main([*TINY, "--prioritized", "--steps", "200", "--eval-every", "200", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main.main(["--resume", str(run), "--steps", "300"]) == 0
    out = capsys.readouterr().out
    assert f"Resuming from {run / 'model_001.pt'} (step 200)" in out
    assert "Note: --steps 300 (was 200): prioritized replay's beta now reaches 1 at step 300, not 200" in out


def test_keep_checkpoints_prunes_older_evaluation_checkpoints(tmp_path):
    run = tmp_path / "run"
    assert (
        main.main([*TINY, "--steps", "300", "--eval-every", "100", "--keep-checkpoints", "2", "--out", str(run)]) == 0
    )
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_002.pt", "model_003.pt"]
    assert [i for i, _, _ in rewards(run)] == [0, 1, 2, 3]  # every evaluation still has its line
    assert main.main(["--resume", str(run), "--steps", "400", "--keep-checkpoints", "1"]) == 0
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_004.pt"]


def test_resume_refuses_changed_configuration(tmp_path, capsys):
    run = tmp_path / "run"
    handler = signal.getsignal(signal.SIGINT)
    assert main.main([*TINY, "--steps", "120", "--eval-every", "120", "--out", str(run)]) == 0
    assert signal.getsignal(signal.SIGINT) is handler  # training gives Ctrl-C back
    with pytest.raises(SystemExit):
        main.main(["--resume", str(run), "--steps", "200", "--gamma", "0.9"])
    assert "--gamma cannot change on resume" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main.main(["--resume", str(run), "--steps", "200", "--n-step", "3"])
    assert "--n-step cannot change on resume (the run used 1)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main.main(["--resume", str(run), "--steps", "200", "--network", "dopamine"])
    assert "--network cannot change on resume (the run used 'nature')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main.main(["--resume", str(run), "--steps", "100"])
    assert "must exceed the checkpoint's step 120" in capsys.readouterr().err
    assert np.array_equal([i for i, _, _ in rewards(run)], [0, 1])


def test_evaluate_a_checkpoint_prints_each_episode(tmp_path, capsys):
    run = tmp_path / "run"
    assert main.main([*TINY, "--steps", "120", "--eval-every", "120", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main.main(["--evaluate", str(run / "model_001.pt"), "--eval-episodes", "3", "--render"]) == 0
    lines = capsys.readouterr().out.splitlines()
    episodes = [line for line in lines if line.startswith("Episode #")]
    assert [line.split(":")[0] for line in episodes] == ["Episode #0", "Episode #1", "Episode #2"]
    scores = [float(line.split("reward: ")[1]) for line in episodes]
    assert f"Mean reward over 3 episodes: {np.mean(scores):.1f}" in lines
    assert main.main(["--evaluate", str(run / "model_001.pt"), "--eval-episodes", "3", "--eval-envs", "1"]) == 0
    one_at_a_time = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Episode #")]
    assert one_at_a_time == episodes  # each game seeded by --seed and its number: the same games at 1 and 3 at once
    assert main.main(["--evaluate", str(run / "model_001.pt"), "--eval-episodes", "3", "--env-workers", "2"]) == 0
    in_workers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Episode #")]
    assert in_workers == episodes  # and with their machines in two worker processes
    frames = sorted((run / "playback_model_001").iterdir())
    assert frames and frames[0].name == "000000.png"
    with pytest.raises(SystemExit):
        main.main(["--evaluate", str(run / "missing.pt")])
    assert "cannot evaluate: no checkpoint" in capsys.readouterr().err
    # A run folder, as --resume and dqn.load_agent take it: its newest checkpoint, named, its frames beside it.
    (run / "model_interrupted.pt").write_bytes(b"cut short")  # unreadable: skipped with a note, as --resume does
    assert main.main(["--evaluate", str(run), "--eval-episodes", "1", "--render"]) == 0
    out = capsys.readouterr().out
    assert "Note: skipped " in out and f"Playing ALE/Breakout-v5 with {run / 'model_001.pt'} (trained 120 steps)" in out
    assert (run / "playback_model_001_1" / "000000.png").exists()
    # A link at the frames' folder, even one that leads nowhere, is passed over: frames are never written through it.
    (run / "playback_model_001_2").symlink_to(tmp_path / "nowhere")
    assert main.main(["--evaluate", str(run / "model_001.pt"), "--eval-episodes", "1", "--render"]) == 0
    assert (run / "playback_model_001_3" / "000000.png").exists() and not (tmp_path / "nowhere").exists()


def test_a_playback_has_its_own_game_count_frames_and_sticky_actions(tmp_path):
    """Not the run's: a run trained with --render and 1 game per evaluation plays back the default
    10 games without frames, and a non-sticky agent can be tried under sticky actions."""
    run = tmp_path / "run"
    assert main.main([*TINY, "--steps", "120", "--eval-every", "120", "--render", "--out", str(run)]) == 0
    args, _ = utils_config.parse_config(["--evaluate", str(run / "model_001.pt")])
    assert args.eval_episodes == 10 and not args.render and args.sticky_actions == 0.0
    assert args.max_episode_frames == 2000 and args.eval_epsilon == 0.05  # the run's protocol otherwise
    args, _ = utils_config.parse_config(["--evaluate", str(run / "model_001.pt"), "--sticky-actions", "0.25"])
    assert args.sticky_actions == 0.25
    args, _ = utils_config.parse_config(["--evaluate", str(run), "--max-episode-frames", "400"])  # Nature's: 18,000
    assert args.max_episode_frames == 400 and args.sticky_actions == 0.0


def wandb_offline_runs(folder: Path) -> list[dict]:
    """What W&B's offline mode wrote under ``folder`` (RUN/wandb), a run each start, oldest first: its id and name,
    its config and its history (each logged step's values). Read from the run-ID.wandb files themselves: LevelDB's log
    format (32 KiB blocks of records with 7-byte headers) after W&B's own 7-byte header, each record W&B's protobuf.
    W&B's own process may still be writing a file when the run has returned (on a loaded machine it was): each is
    read again until it holds the run's exit record, for up to a minute."""
    runs = []
    for path in sorted(folder.glob("offline-run-*/run-*.wandb")):
        deadline = time.monotonic() + 60
        while not (run := wandb_offline_run(path.read_bytes()))["exited"] and time.monotonic() < deadline:
            time.sleep(0.2)
        runs.append(run)
    return runs


def wandb_offline_run(data: bytes) -> dict:
    from wandb.proto import wandb_internal_pb2

    position, record, run = 7, b"", {"config": {}, "history": {}, "exited": False}
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        left = 32768 - position % 32768
        length, kind = int.from_bytes(data[position + 4 : position + 6], "little"), data[position + 6]
        if left < 7 or (length, kind) == (0, 0):  # a block's padding
            position += left
            continue
        if position + 7 + length > len(data):  # a record still being written
            break
        record += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            parsed = wandb_internal_pb2.Record.FromString(record)
            record, which = b"", parsed.WhichOneof("record_type")
            if which == "run":
                run["id"], run["name"] = parsed.run.run_id, parsed.run.display_name
            elif which == "config":
                run["config"].update({item.key: json.loads(item.value_json) for item in parsed.config.update})
            elif which == "history":
                values = {"/".join([item.key, *item.nested_key]).strip("/"): json.loads(item.value_json)
                          for item in parsed.history.item}  # fmt: skip
                run["history"].setdefault(values["_step"], {}).update(values)
            elif which == "exit":
                run["exited"] = True
    return run


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B in offline mode, its settings and caches in the test's folder: nothing reaches a network or this user's."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(name, value)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))


def test_tensorboard_and_wandb_get_the_same_scalars_and_the_memory_health_log(
    tmp_path, monkeypatch, capsys, wandb_offline
):
    """TensorBoard's scalars and W&B's (--track, offline) the same at the same steps, W&B's with the config, versions
    and the evaluations' videos; a prioritized run's memory checked at each evaluation (memory_health.csv, standard
    output); a resume from an older checkpoint drops what came after it from TensorBoard and memory_health.csv, and
    goes on in the same W&B run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    argv = [*TINY, "--steps", "350", "--eval-every", "150", "--prioritized", "--tensorboard", "--out", str(run)]
    assert main.main([*argv, "--track", "--render"]) == 0
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"eval/score", "train/episode_score", "train/loss", "train/mean_q", "train/epsilon"}
    assert expected | {"train/steps_per_second", "train/beta", "memory/relative_error", "memory/max_weight"} <= tags
    assert [event.step for event in events.Scalars("eval/score")] == [0, 150, 300, 350]  # the final one too
    texts = {tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]}
    assert (
        "|lr|0.0001|" in texts["hyperparameters/text_summary"]
        and "|prioritized|True|" in texts["hyperparameters/text_summary"]
    )  # as CleanRL's table
    assert f"|torch|{torch.__version__}|" in texts["versions/text_summary"]

    (tracked,) = wandb_offline_runs(run / "wandb")
    assert tracked["id"] == load_checkpoint(run / "model_003.pt")["run"]["wandb_run_id"] != ""
    assert tracked["name"] == "run" and tracked["config"]["lr"] == 0.0001 and tracked["config"]["prioritized"]
    assert tracked["config"]["versions"]["torch"] == torch.__version__
    history = tracked["history"]
    for tag in tags:  # TensorBoard keeps float32s; W&B the float64s logged
        logged = {step: values[tag] for step, values in history.items() if tag in values}
        board = {event.step: event.value for event in events.Scalars(tag)}
        assert logged.keys() == board.keys() and logged, tag
        np.testing.assert_allclose(list(logged.values()), list(board.values()), rtol=1e-6, err_msg=tag)
    videos = {step: values["eval/video/path"] for step, values in history.items() if "eval/video/path" in values}
    assert list(videos) == [0, 150, 300, 350]
    for step, path in videos.items():
        assert history[step]["eval/video/_type"] == "video-file"
        (media,) = (run / "wandb").glob(f"offline-run-*/files/{path}")
        assert media.read_bytes()[4:8] == b"ftyp"  # an MP4

    health = read_log(run / HEALTH_FILE, HEALTH_HEADER)  # step 0's memory is empty: no line
    assert health[:, 0].tolist() == [150, 300, 350] and (health[:, 3] < 1e-12).all()  # relative error
    np.testing.assert_allclose(health[:, 1], health[:, 2], rtol=1e-12)  # the root against its leaves
    assert health[:, 7].tolist() == pytest.approx([0.4 + 0.6 * step / 350 for step in (150, 300, 350)])  # beta
    assert (health[:, 4] <= health[:, 5]).all() and (health[:, 8] >= 1).all()  # priorities' range, weight
    out = capsys.readouterr().out
    assert out.count("Memory health at step ") == 3 and "Memory health at step 350: sum tree total " in out

    # Resumed from an older checkpoint: the dropped segment's events are not shown again.
    (run / "model_003.pt").unlink()
    (run / "model_002.pt").unlink()
    assert main.main(["--resume", str(run), "--steps", "400"]) == 0
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [event.step for event in events.Scalars("eval/score")] == [0, 150, 300, 400]
    assert read_log(run / HEALTH_FILE, HEALTH_HEADER)[:, [0, 7]].tolist() == [
        [150, health[0, 7]],
        [300, 0.85],
        [400, 1],
    ]
    first, resumed = wandb_offline_runs(run / "wandb")  # W&B's offline mode writes a run each start
    assert first == tracked and resumed["id"] == tracked["id"] and resumed["config"]["steps"] == 400
    assert min(resumed["history"]) > 150 and [step for step, values in resumed["history"].items()
                                              if "eval/score" in values] == [300, 400]  # fmt: skip

    real_find_spec = utils_config.importlib.util.find_spec
    for package, flag in (("tensorboard", "--tensorboard"), ("wandb", "--track")):
        monkeypatch.setattr(
            utils_config.importlib.util,
            "find_spec",
            lambda name, package=package: None if name == package else real_find_spec(name),
        )
        with pytest.raises(SystemExit):
            main.main([flag, "--out", str(tmp_path / "other")])
        assert f"{flag} needs the {package} package: pip install " in capsys.readouterr().err


def test_a_wandb_run_that_cannot_start_stops_the_run_before_it_writes_anything(
    tmp_path, monkeypatch, capsys, wandb_offline
):
    """No login (or no network, or a wrong entity): one line saying what to do, exit status 1, and the run folder as
    it was, so that the same command runs again once it is fixed."""
    import wandb

    def no_login(**settings):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", no_login)
    run = tmp_path / "run"
    assert main.main([*TINY, "--steps", "200", "--track", "--out", str(run)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        "main.py: error: --track: Weights & Biases could not start the run (No API key configured. Use `wandb login` "
        "to log in.); log in with `wandb login`, or set WANDB_MODE=offline to keep it under RUN/wandb and `wandb sync` "
        "it later"
    )
    assert sorted(path.name for path in run.iterdir()) == [".lock"]


def test_a_preset_sets_its_recipe_and_flags_beside_it_override(tmp_path):
    args, _ = utils_config.parse_config(["--preset", "atari100k", "--env", "Pong", "--out", str(tmp_path / "a")])
    recipe = utils_config.PRESETS["atari100k"]
    assert {name: getattr(args, name) for name in recipe} == recipe
    assert args.n_step == 10 and args.augment == "dopamine" and args.target_every == 1 and not args.fire_reset
    args, _ = utils_config.parse_config(
        ["--preset", "atari100k", "--n-step", "3", "--fire-reset", "--out", str(tmp_path / "b")]
    )
    assert args.n_step == 3 and args.fire_reset and args.noop_max == 30 and args.eval_epsilon == 0.001
    args, _ = utils_config.parse_config(["--no-fire-reset", "--noop-max", "0", "--out", str(tmp_path / "c")])
    assert not args.fire_reset and args.noop_max == 0 and args.preset is None and args.n_step == 1
    args, _ = utils_config.parse_config(["--preset", "atari100k", "--env", "Pong"])
    assert args.out == "runs/Pong-seed0-atari100k"
    # DER: Atari 100k's pipeline, with Rainbow's parts as Dopamine's DER.gin sets them.
    der = utils_config.options_of(["--preset", "der", "--env", "Pong"])
    assert (der.distributional, der.noisy, der.prioritized, der.double, der.dueling) == (True,) * 5
    assert (der.target_every, der.augment, der.n_step, der.noisy_sigma0, der.beta0, der.beta_end) == (
        2000, "none", 10, 0.1, 0.5, 0.5,
    )  # fmt: skip
    assert (der.network, der.stack_fill, der.eval_episodes, der.adam_eps) == ("dopamine", "zeros", 100, 1.5e-4)
    rainbow = utils_config.options_of(["--preset", "rainbow", "--env", "Breakout", "--steps", "2000000"])
    assert (rainbow.steps, rainbow.lr, rainbow.n_step, rainbow.noisy_sigma0, rainbow.target_every) == (
        2_000_000, 6.25e-5, 3, 0.5, 8000,
    )  # fmt: skip
    assert rainbow.fire_reset and not rainbow.life_loss_terminal  # this project's FIRE press; Dopamine's lives
    assert utils_config.parse_config(["--preset", "der", "--env", "Pong"])[0].out == "runs/Pong-seed0-der"
    assert utils_config.parse_config(["--distributional", "--noisy"])[0].out == "runs/Breakout-seed0-c51-noisy"
    # Every switch has its --no- form, which turns a preset's switch off.
    off = utils_config.options_of(["--preset", "atari100k", "--no-double", "--no-dueling", "--no-save-memory"])
    assert (off.double, off.dueling, off.save_memory) == (False, False, False)
    off = utils_config.options_of(["--preset", "machado", "--no-full-action-space"])
    assert not off.full_action_space and off.sticky_actions == 0.25
    minatar = utils_config.options_of(["--preset", "minatar", "--env", "MinAtar/Breakout-v1"])
    assert (minatar.network, minatar.clip_rewards, minatar.eps_decay_steps, minatar.train_every) == (
        "minatar",
        False,
        100_000,
        1,
    )
    # Default folders: one per learning variant, so none collide.
    for flags, folder in [
        ([], "runs/Breakout-seed0"),
        (["--prioritized"], "runs/Breakout-seed0-per"),
        (["--n-step", "3", "--double", "--dueling", "--seed", "2"], "runs/Breakout-seed2-double-dueling-n3"),
        (["--preset", "atari100k", "--prioritized", "--n-step", "3"], "runs/Breakout-seed0-per-n3-atari100k"),
    ]:
        assert utils_config.default_out(utils_config.options_of(flags)) == folder
    # Dopamine's schedule: epsilon 1 until learning starts (1,600), then down to 0.01 over 5,000 steps.
    assert [main.exploration(args, step) for step in (0, 1_600, 4_100, 6_600, 50_000)] == pytest.approx(
        [1.0, 1.0, 0.505, 0.01, 0.01]
    )


def test_the_named_protocols_set_their_papers_values(tmp_path):
    """--preset nature (Mnih et al. 2015), cleanrl-short (the learning benchmark's, which it runs
    with) and machado (Machado et al. 2018), each overridable by a flag beside it."""
    nature = utils_config.options_of(["--preset", "nature"])
    assert (nature.steps, nature.memory_size, nature.target_every, nature.eps_end) == (12_500_000, 10**6, 10_000, 0.1)
    assert (nature.learning_starts, nature.eps_decay_steps, nature.noop_max) == (50_000, 10**6, 30)
    short = utils_config.options_of(["--preset", "cleanrl-short", "--seed", "1"])
    assert (short.learning_starts, short.memory_size, short.target_every) == (20_000, 100_000, 1_000)
    assert (short.eps_end, short.eps_decay_steps, short.eval_every, short.eval_episodes) == (0.01, 100_000, 50_000, 10)
    assert bench.LEARNING_FLAGS[:2] == ["--preset", "cleanrl-short"]
    machado = utils_config.options_of(["--preset", "machado", "--noop-max", "5"])
    assert machado.sticky_actions == 0.25 and machado.full_action_space and not machado.life_loss_terminal
    assert not machado.fire_reset and machado.noop_max == 5  # the flag beside the preset wins
    env = main.env_options(machado)
    assert env["full_action_space"] and not env["life_loss_terminal"] and env["sticky_actions"] == 0.25


def test_the_atari100k_preset_runs_end_to_end_and_resumes(tmp_path, capsys):
    """Dopamine's pipeline, one update per step, the target network the online one, a final
    evaluation; the memory saved with each checkpoint, so that a resume is exact."""
    run = tmp_path / "run"
    small = ["--learning-starts", "100", "--memory-size", "1000", "--eval-episodes", "1", "--max-episode-frames", "400"]
    small += ["--batch-size", "8"]  # a step per step: smaller batches keep the test short
    done = run_main("--preset", "atari100k", "--env", "Pong", "--steps", "250", *small, "--out", str(run))
    assert done.returncode == 0, done.stderr
    assert [(i, s) for i, s, _ in rewards(run)] == [(0, 0), (1, 250)]  # before training and after it
    checkpoint = load_checkpoint(run / "model_001.pt")
    config = checkpoint["config"]
    assert config["preset"] == "atari100k" and config["augment"] == "dopamine" and config["train_every"] == 1
    assert config["network"] == "dopamine" and (config["noop_max"], config["noop_unit"]) == (30, "steps")
    assert config["stack_fill"] == "zeros" and config["stack_per_life"] and config["save_memory"]
    assert "shift_rng" in checkpoint["agent"] and checkpoint["agent"]["online"]["hidden.0.weight"].shape == (512, 7744)
    online, target = checkpoint["agent"]["online"], checkpoint["agent"]["target"]
    assert all(torch.equal(online[key], target[key]) for key in online)  # one network
    resumed = run_in_process(capsys, "--resume", str(run), "--steps", "300")
    assert resumed.returncode == 0, resumed.stderr
    assert "Note:" not in resumed.stdout  # the saved memory: nothing refilled
    assert [(i, s) for i, s, _ in rewards(run)] == [(0, 0), (1, 250), (2, 300)]


def test_a_resume_with_another_thread_count_says_it_is_no_longer_bit_exact(tmp_path, capsys, every_cpu):
    run = tmp_path / "run"
    assert main.main([*TINY, "--steps", "120", "--eval-every", "120", "--threads", "2", "--out", str(run)]) == 0
    assert main.main(["--resume", str(run), "--steps", "130"]) == 0
    assert "CPU threads and goes on with" not in capsys.readouterr().out
    assert main.main(["--resume", str(run), "--steps", "140", "--threads", "1"]) == 0
    assert (
        "Note: the run used 2 CPU threads and goes on with 1: it is no longer bit for bit the run it would have been"
        in capsys.readouterr().out
    )
