"""The statistics, tables and figures of results, apart from running them: a sweep's report
(``sweep.py --report``, ``--compare``: human-normalised aggregates with rliable, beside the published
Atari 100k runs), the learning benchmark's tables (``bench.py --learning``, ``--runs``, ``--by-seed``)
and the GPU check's table (``bench.py --gpu-report``). Everything here reads committed run files and
writes nothing but reports, so every committed table and figure can be rebuilt from them."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib.figure import Figure

from dqn_atari import plot
from dqn_atari.utils_apex import first_line
from dqn_atari.utils_config import learning_config, saved_options, settings_differences
from dqn_atari.utils_env import game_name, is_atari, saved_env_id
from dqn_atari.utils_run import (
    EPISODES_FILE,
    HEALTH_FILE,
    HEALTH_HEADER,
    REWARDS_FILE,
    CheckpointError,
    RunLogError,
    cell,
    checked_config,
    describe_os_error,
    read_config,
    read_episodes,
    read_log,
    read_rewards,
    write_atomically,
)

ROOT = Path(__file__).resolve().parent
REFERENCE_SCORES = ROOT / "atari_reference_scores.csv"
BOOTSTRAP_SAMPLES = 20_000  # bootstrap draws of the committed reports' intervals and of the null check
CONFIDENCE = 0.95


class ReportError(Exception):
    """A report that cannot be made (no finished runs, a figure that cannot be written); the message says why."""


# --- Sweeps -------------------------------------------------------------------------------------


def reference_scores(path: Path = REFERENCE_SCORES) -> dict[str, tuple[float, float]]:
    """Game -> (random score, human score), from the data file."""
    with open(path) as source:
        rows = csv.DictReader(line for line in source if not line.startswith("#"))
        return {row["game"]: (float(row["random"]), float(row["human"])) for row in rows}


# The aggregate metrics of Agarwal et al. (2021), computed by their library, rliable: over a
# (runs, games) matrix of human-normalised scores; the median is that of the games' mean scores.
METRICS = {
    "mean": "aggregate_mean",
    "median": "aggregate_median",
    "iqm": "aggregate_iqm",
    "optimality_gap": "aggregate_optimality_gap",
}
PUBLISHED = ROOT / "results" / "atari100k" / "published"  # Atari 100k references (SOURCES.md there)
ATARI_100K_PRESETS = ("atari100k", "der")  # recipes on the Atari 100k protocol, set beside the published runs


def rliable_metric(name: str) -> Callable[..., Any]:
    """One of rliable's metrics, imported when a report needs it: bench.py's speed and GPU figures
    use this module on machines without rliable (the GPU machine)."""
    from rliable import metrics

    return getattr(metrics, name)


def interval_estimates(
    scores: dict[str, Any], statistic: Callable[..., Any], samples: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """rliable's point estimates and 95% stratified bootstrap intervals of ``statistic`` for each entry
    of ``scores``: a (runs, games) matrix, or a pair of them (each resampled on its own)."""
    from rliable import library

    with seeded_numpy():
        return library.get_interval_estimates(scores, statistic, reps=samples, confidence_interval_size=CONFIDENCE)


@contextlib.contextmanager
def seeded_numpy(seed: int = 0) -> Iterator[None]:
    """rliable's bootstrap draws from numpy's global generator (its random_state argument is not
    used for the draws): seed it, so that a report is the same every time, and restore it."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable's ``metrics.probability_of_improvement``, to the last bit: per game the Mann-Whitney U
    of x over y (the pairs x wins, ties counting half) over the number of pairs, averaged over the
    games. Counted at once rather than by scipy's test per game, which made 20,000 bootstrap draws
    take over an hour."""
    greater = (scores_x[:, None, :] > scores_y[None, :, :]).sum(axis=(0, 1))
    ties = (scores_x[:, None, :] == scores_y[None, :, :]).sum(axis=(0, 1))
    return float(np.mean((greater + 0.5 * ties) / (scores_x.shape[0] * scores_y.shape[0])))


def null_frequency(published: np.ndarray, ours: float, runs: int, draws: int, seed: int = 0) -> float:
    """The null check: how often the IQM (rliable's ``aggregate_iqm``, as the report's) of ``runs``
    runs per game, drawn without replacement from ``published`` (a (runs, games) matrix of
    human-normalised scores, each game's runs apart), reaches ``ours``: how often an algorithm's own
    runs, as few per game as ours, do as well as ours by the luck of the draw."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    count, games = published.shape
    if not 0 < runs <= count:
        raise ValueError(f"cannot draw {runs} of {count} published runs per game")
    # Per draw and game, the first ``runs`` of a random order of that game's runs.
    picks = np.stack([rng.random((draws, count)).argsort(axis=1)[:, :runs] for _ in range(games)], axis=2)
    samples = np.take_along_axis(published[None], picks, axis=1).reshape(draws, runs * games)
    return float(np.mean(stats.trim_mean(samples, proportiontocut=0.25, axis=1) >= ours))


def aggregates(matrices: dict[str, np.ndarray], samples: int) -> dict[str, dict[str, Any]]:
    """Each algorithm's METRICS with their intervals."""
    statistics = [rliable_metric(name) for name in METRICS.values()]
    points, intervals = interval_estimates(
        matrices, lambda scores: np.array([statistic(scores) for statistic in statistics]), samples
    )
    return {
        name: {
            metric: {
                "value": float(points[name][i]),
                "interval": (float(intervals[name][0, i]), float(intervals[name][1, i])),
            }
            for i, metric in enumerate(METRICS)
        }
        for name in matrices
    }


def published_runs_of(game: str) -> dict[str, np.ndarray]:
    """Each algorithm's published final scores on ``game``, where its runs were copied (six games)."""
    runs = json.loads((PUBLISHED / "runs.json").read_text())
    return {name: np.array(per_game[game]) for name, per_game in runs.items() if game in per_game}


def percentile_among(runs: np.ndarray, score: float) -> float:
    """The share of ``runs``, in percent, that ``score`` beats, a tie counting half."""
    return float(100 * (np.mean(runs < score) + 0.5 * np.mean(runs == score)))


def published_scores(games: list[str]) -> tuple[dict[str, dict[str, float]], dict[str, np.ndarray]]:
    """Atari 100k references: each game's published mean score per algorithm (the 26 games), and
    per algorithm a (runs, games) matrix of raw scores when every one of ``games`` has its runs."""
    with open(PUBLISHED / "means.csv") as source:
        means = {row.pop("game"): {name: float(value) for name, value in row.items()} for row in csv.DictReader(source)}
    runs = json.loads((PUBLISHED / "runs.json").read_text())
    matrices = {
        name: np.array([per_game[game] for game in games]).T
        for name, per_game in runs.items()
        if all(game in per_game for game in games)
    }
    return {game: means[game] for game in games if game in means}, matrices


class Evaluation(NamedTuple):
    """One rewards.txt line: the step, the mean score, the wall seconds, and the spread of the
    evaluation's games (nan where not recorded: older three-column files)."""

    step: int
    mean: float
    seconds: float
    std: float
    low: float
    high: float


def collect(out: Path, left_out: dict[str, str] | None = None) -> dict[str, dict[int, list[Evaluation]]]:
    """Game -> seed -> the run's evaluations, from every finished run folder in ``out``. A run whose
    rewards.txt cannot be read or does not parse, whose configuration (config.json: its game, --steps and
    other settings) cannot be read, whose game is not the one its folder is named for, whose last evaluation
    comes before its --steps (still running, stopped or failed), or whose settings are not those of the most
    runs (not seeds of the same experiment) is left out, with the reason in ``left_out``: a result is only
    ever a finished run's, under its own game, beside runs of its own settings. Nothing a run's files name
    is imported or run."""
    if not out.is_dir():
        raise ReportError(f"{out} is not a folder of a sweep")
    left_out = {} if left_out is None else left_out
    finished: dict[str, tuple[str, int, dict[str, Any], list[Evaluation]]] = {}  # folder: game, seed, settings, ...
    for folder in sorted(path for path in out.iterdir() if (path / "rewards.txt").exists()):
        game, separator, seed = folder.name.rpartition("-seed")
        if not separator or not seed.isdigit():
            continue
        if seed != str(int(seed)):  # Pong-seed001 beside Pong-seed1 would be the same run twice
            left_out[folder.name] = (
                f"not a sweep's folder name (a sweep names seed {int(seed)}'s {game}-seed{int(seed)})"
            )
            continue
        try:
            rows = read_rewards(folder / "rewards.txt")
        except RunLogError as error:
            left_out[folder.name] = str(error)
            continue
        except OSError as error:  # a folder in its place, or a file it may not read
            left_out[folder.name] = f"cannot read {describe_os_error(error)}"
            continue
        try:
            config = checked_config(folder)
            steps, env = config["steps"], config["env"]
            settings = run_settings(config)
        except (RunLogError, CheckpointError, OSError, KeyError, TypeError, ValueError, AttributeError) as error:
            left_out[folder.name] = f"its configuration (config.json) cannot be read: {first_line(error)}"
            continue
        played = saved_env_id(env)
        if not is_atari(played):
            left_out[folder.name] = f"its run played {played[:80]!r}, not an Atari game"
            continue
        if game_name(played) != game:
            left_out[folder.name] = f"the folder is named for {game}, but its run played {game_name(played)}"
            continue
        last = int(rows[-1][1][0]) if rows else -1
        if last < steps:
            left_out[folder.name] = f"unfinished: evaluated at step {max(last, 0):,} of its --steps {steps:,}"
            continue
        finished[folder.name] = (game, int(seed), settings, [
            Evaluation(int(values[0]), values[1], values[6], *values[2:5])
            if len(values) == 7
            else Evaluation(int(values[0]), values[1], *[math.nan] * 4)  # 3-column files
            for _, values in rows
        ])  # fmt: skip
    groups: list[list[str]] = []  # the runs of each settings, in folder order
    for name, (_, _, settings, _) in finished.items():
        group = next((group for group in groups if finished[group[0]][2] == settings), None)
        if group is None:
            groups.append([name])
        else:
            group.append(name)
    common = max(groups, key=len, default=[])  # the first of the largest
    results: dict[str, dict[int, list[Evaluation]]] = {}
    for name, (game, seed, settings, evaluations) in finished.items():
        if name in common:
            results.setdefault(game, {})[seed] = evaluations
        else:
            differences = settings_differences(settings, finished[common[0]][2])
            left_out[name] = f"other settings than the {plural(len(common), 'run')} reported ({differences})"
    return results


def run_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What makes runs seeds of one experiment: the settings of a run's saved configuration that decide
    its learning (utils_config.learning_config, as the sweep compares a rerun's) and its --steps, all
    but its game and seed, and its preset's name (the settings a preset gives are compared one by one)."""
    options = saved_options(config)
    settings = {**learning_config(options), "steps": options["steps"]}
    return {name: value for name, value in settings.items() if name not in ("env", "seed", "preset")}


def summarize(out: Path, samples: int | None = None) -> dict[str, Any]:
    """Per game, each seed's last evaluation and their mean and std; over games, the human-normalised
    METRICS with their intervals (games without reference scores left out, named). A sweep of
    Atari 100k runs (--preset atari100k) is also set beside the published DER, DrQ(eps) and SPR
    runs on the same games: their aggregates, the probability that ours improves on each, and the
    null check. ``samples``: the bootstrap draws, BOOTSTRAP_SAMPLES unless given."""
    samples = BOOTSTRAP_SAMPLES if samples is None else samples
    left_out: dict[str, str] = {}
    results = collect(out, left_out)
    if not results:
        raise ReportError(f"{out} holds no run folders with evaluations (<Game>-seed<N>/rewards.txt)")
    references = reference_scores()
    atari100k = all(
        preset_of(out / f"{game}-seed{seed}") in ATARI_100K_PRESETS for game, seeds in results.items() for seed in seeds
    )
    published_means, published_runs = published_scores(sorted(results)) if atari100k else ({}, {})
    games: dict[str, Any] = {}
    for game, seeds in sorted(results.items()):
        finals = {seed: evaluations[-1] for seed, evaluations in sorted(seeds.items())}
        last = {seed: final.mean for seed, final in finals.items()}
        scores = np.array(list(last.values()))
        games[game] = {
            "last_score": last,
            "last_step": {seed: final.step for seed, final in finals.items()},
            "wall_seconds": {seed: final.seconds for seed, final in finals.items()},  # nan: not recorded
            # The spread over the last evaluation's games: near-identical games show as a tiny one.
            "games_spread": {
                seed: {"std": final.std, "min": final.low, "max": final.high} for seed, final in finals.items()
            },
            "mean": float(scores.mean()),
            "std": float(scores.std(ddof=1)) if scores.size > 1 else None,  # one run has no spread to show
        }
        if game in published_means:
            games[game]["published"] = published_means[game]
        runs_of = published_runs_of(game) if atari100k else {}
        if runs_of:  # where each run stands among each algorithm's published runs on this game
            games[game]["percentile"] = {
                name: {seed: percentile_among(runs, score) for seed, score in last.items()}
                for name, runs in runs_of.items()
            }
        if game in references:
            random, human = references[game]
            games[game]["human_normalised"] = {
                seed: (score - random) / (human - random) for seed, score in last.items()
            }
    normalised = {game: entry["human_normalised"] for game, entry in games.items() if "human_normalised" in entry}
    summary: dict[str, Any] = {
        "games": games,
        "without_reference": sorted(set(games) - set(normalised)),
        "left_out": left_out,
        "bootstrap_samples": samples,
        "confidence": CONFIDENCE,
        "notes": [],
    }
    # The bootstrap resamples runs within each game, so the aggregates take the games with the most
    # finished seeds; a game still behind joins them once it has as many.
    seeds_of = {game: len(values) for game, values in normalised.items()}
    most = max(seeds_of.values(), default=0)
    names = [game for game in sorted(normalised) if seeds_of[game] == most]
    behind = [f"{game} ({plural(seeds_of[game], 'seed')})" for game in sorted(normalised) if seeds_of[game] < most]
    if behind:
        summary["notes"].append(
            f"left out of the aggregates until they have {most} finished seeds like the other games: {', '.join(behind)}"
        )
    if names:
        ours = np.array([list(normalised[game].values()) for game in names]).T  # (runs, games)
        matrices = {"ours": ours}
        if published_runs:
            scale = np.array([references[game] for game in names])  # (games, [random, human])
            columns = [sorted(results).index(game) for game in names]
            for name, raw in published_runs.items():
                matrices[name] = (raw[:, columns] - scale[:, 0]) / (scale[:, 1] - scale[:, 0])
            pairs = {name: [ours, matrix] for name, matrix in matrices.items() if name != "ours"}
            points, intervals = interval_estimates(pairs, probability_of_improvement, samples)
            summary["improvement"] = {
                name: {"value": float(points[name]), "interval": tuple(float(end) for end in np.ravel(intervals[name]))}
                for name in pairs
            }
            summary["published_runs"] = {name: int(matrix.shape[0]) for name, matrix in published_runs.items()}
        summary["aggregate_games"] = names
        summary["aggregates"] = aggregates(matrices, samples)
        if published_runs and ours.shape[0] <= min(summary["published_runs"].values()):
            iqm = summary["aggregates"]["ours"]["iqm"]["value"]
            summary["null_check"] = {
                name: null_frequency(matrices[name], iqm, ours.shape[0], samples) for name in published_runs
            }
        summary["runs_per_game"] = int(ours.shape[0])
        if ours.shape[0] == 1:
            summary["notes"].append(
                "one run per game: the bootstrap resamples runs within each game, so our intervals have no width"
            )
    return summary


def preset_of(run: Path) -> str | None:
    try:
        return read_config(run).get("preset")
    except (RunLogError, CheckpointError, OSError):
        return None


def markdown(summary: dict[str, Any]) -> str:
    published = sorted({name for entry in summary["games"].values() for name in entry.get("published", {})})
    header = "| game | seed | last evaluation | its games: std (min to max) | at step | wall time | human-normalised |"
    header += "".join(f" {name} |" for name in published)
    lines = [header, "|---" * (7 + len(published)) + "|"]
    for game, entry in summary["games"].items():
        for seed, score in entry["last_score"].items():
            normalised = entry.get("human_normalised", {}).get(seed)
            shown = f"{normalised:.3f}" if normalised is not None else "—"
            seconds = entry["wall_seconds"][seed]
            wall = "—" if math.isnan(seconds) else f"{seconds / 60:.0f} min"
            spread = entry["games_spread"][seed]
            games = (
                "—"
                if math.isnan(spread["std"])
                else f"{spread['std']:.1f} ({spread['min']:.0f} to {spread['max']:.0f})"
            )
            lines.append(
                f"| {game} | {seed} | {score:.1f} | {games} | {entry['last_step'][seed]:,} | {wall} | {shown} |"
                + " |" * len(published)
            )
        means = "".join(f" {entry.get('published', {}).get(name, math.nan):.1f} |" for name in published)
        mean, std = entry["mean"], entry["std"]
        label, shown = ("one seed so far", f"{mean:.1f}") if std is None else ("mean ± std", f"{mean:.1f} ± {std:.1f}")
        lines.append(f"| **{game}** | {label} | **{shown}** | | | | |{means}")
    if "aggregates" in summary:
        percent = round(100 * summary["confidence"])
        games = summary["aggregate_games"]
        runs = summary["runs_per_game"]
        lines += [
            "",
            f"Human-normalised scores over {plural(len(games), 'game')} ({', '.join(games)}), "
            f"{plural(runs, 'run')} of ours per game",
        ]
        if "published_runs" in summary:
            published_runs = ", ".join(f"{name} {count}" for name, count in summary["published_runs"].items())
            lines[-1] += f" (published: {published_runs} runs per game)"
        lines[-1] += f"; {percent}% stratified bootstrap intervals (rliable):"
        lines += ["", *aggregate_table(summary["aggregates"])]
    for game, entry in summary["games"].items():
        counts = {name: len(runs) for name, runs in published_runs_of(game).items()} if "percentile" in entry else {}
        for seed in entry["last_score"] if counts else ():
            among = ", ".join(
                f"{by_seed[seed]:.0f}% of {name}'s {counts[name]}" for name, by_seed in entry["percentile"].items()
            )
            lines.append(f"\n{game}, seed {seed}: above {among} published runs")
    for name, entry in summary.get("improvement", {}).items():
        low, high = entry["interval"]
        lines.append(f"\nProbability that ours improves on {name}: {entry['value']:.3f} [{low:.3f}, {high:.3f}]")
    for name, frequency in summary.get("null_check", {}).items():
        iqm, runs = summary["aggregates"]["ours"]["iqm"]["value"], summary["runs_per_game"]
        lines.append(
            f"\nNull check, {name}: the IQM of {plural(runs, 'run')} per game drawn from its own published runs "
            f"reaches ours ({iqm:.3f}) in {frequency:.1%} of {summary['bootstrap_samples']:,} draws"
        )
    for note in summary["notes"]:
        lines += ["", f"Note: {note}."]
    for run, reason in summary["left_out"].items():  # a folder's name, and a reason that may quote it or a file
        lines += ["", f"Left out {escaped(run)}: {escaped(reason)}"]
    if summary["without_reference"]:
        lines += ["", f"No reference scores for {', '.join(summary['without_reference'])}: left out of the aggregate."]
    return "\n".join(lines)


def escaped(text: str) -> str:
    """``text`` (a folder's name, or a message that may hold one) shown as it is inside one line of
    Markdown: characters that break a line or control a terminal as a Python string writes them
    ('\\n'), Markdown's own behind a backslash. A name is never written into a report as it is."""
    visible = "".join(repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", visible)


def aggregate_table(aggregates: dict[str, dict[str, Any]]) -> list[str]:
    """A Markdown table of each algorithm's METRICS with their intervals."""
    lines = ["| | " + " | ".join(metric.replace("_", " ").replace("iqm", "IQM") for metric in METRICS) + " |"]
    lines.append("|---" * (1 + len(METRICS)) + "|")
    for name, values in aggregates.items():
        cells = [f"{v['value']:.3f} [{v['interval'][0]:.3f}, {v['interval'][1]:.3f}]" for v in values.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def compare(out: Path, other: Path, samples: int | None = None) -> dict[str, Any]:
    """The finished runs of sweep ``out`` beside those of sweep ``other`` (an ablation: the same
    games and seeds under another pipeline): per game both means and their difference; over the
    games both aggregate, both sides' METRICS and the probability that a run of ``out`` beats a
    run of ``other`` on a game."""
    samples = BOOTSTRAP_SAMPLES if samples is None else samples
    if out.name == other.name:
        raise ReportError(f"--compare needs two sweeps of different folder names, got {out} and {other}")
    mine, theirs = summarize(out, samples), summarize(other, samples)
    shared = sorted(set(mine["games"]) & set(theirs["games"]))
    if not shared:
        raise ReportError(f"{out} and {other} have no finished game in common")
    games = {
        game: {
            "mean": mine["games"][game]["mean"],
            "other_mean": theirs["games"][game]["mean"],
            "seeds": len(mine["games"][game]["last_score"]),
            "other_seeds": len(theirs["games"][game]["last_score"]),
            "holds_without_any_one_run": lead_holds(
                list(mine["games"][game]["last_score"].values()), list(theirs["games"][game]["last_score"].values())
            ),
        }
        for game in shared
    }
    comparison: dict[str, Any] = {"sweep": out.name, "other": other.name, "games": games}
    left_out = {
        f"{sweep.name}/{run}": reason
        for sweep, summary in ((out, mine), (other, theirs))
        for run, reason in summary["left_out"].items()
    }
    if left_out:  # runs of other settings than their sweep's, unfinished or broken: named, as in each report
        comparison["left_out"] = left_out
    together = [game for game in mine.get("aggregate_games", []) if game in theirs.get("aggregate_games", [])]
    if together:
        matrices = {
            name: np.array([list(summary["games"][game]["human_normalised"].values()) for game in together]).T
            for name, summary in ((out.name, mine), (other.name, theirs))
        }
        points, intervals = interval_estimates(
            {"improvement": list(matrices.values())}, probability_of_improvement, samples
        )
        comparison["aggregate_games"] = together
        comparison["aggregates"] = aggregates(matrices, samples)
        comparison["improvement"] = {
            "value": float(points["improvement"]),
            "interval": tuple(float(end) for end in np.ravel(intervals["improvement"])),
        }
    return comparison


def lead_holds(scores: list[float], other_scores: list[float]) -> bool:
    """Whether one side's lead on a game (the sign of the difference of the means) stays whichever
    single run of either side is left out: a lead that does not rest on one run. A side of one run
    is that one run."""
    if len(scores) < 2 or len(other_scores) < 2:
        return False
    sign = np.sign(np.mean(scores) - np.mean(other_scores))
    without_one = [(np.delete(scores, i), other_scores) for i in range(len(scores))]
    without_one += [(scores, np.delete(other_scores, i)) for i in range(len(other_scores))]
    return bool(sign != 0 and all(np.sign(np.mean(mine) - np.mean(theirs)) == sign for mine, theirs in without_one))


def comparison_markdown(comparison: dict[str, Any]) -> str:
    out, other = escaped(comparison["sweep"]), escaped(comparison["other"])
    lines = [
        f"| game | {out}: mean | seeds | {other}: mean | seeds | difference | without any one run |",
        "|---" * 7 + "|",
    ]
    for game, entry in comparison["games"].items():
        difference = entry["mean"] - entry["other_mean"]
        holds = "holds" if entry["holds_without_any_one_run"] else "rests on one run" if difference else "no lead"
        lines.append(
            f"| {game} | {entry['mean']:.1f} | {entry['seeds']} | {entry['other_mean']:.1f} | {entry['other_seeds']} "
            f"| {difference:+.1f} | {holds} |"
        )
    if "aggregates" in comparison:
        games = comparison["aggregate_games"]
        percent = round(100 * CONFIDENCE)
        lines += [
            "",
            f"Human-normalised scores over {plural(len(games), 'game')} ({', '.join(games)}); {percent}% stratified "
            "bootstrap intervals (rliable):",
            "",
            *aggregate_table(comparison["aggregates"]),
        ]
        low, high = comparison["improvement"]["interval"]
        value = comparison["improvement"]["value"]
        lines.append(f"\nProbability that a run of {out} beats one of {other}: {value:.3f} [{low:.3f}, {high:.3f}]")
    for run, reason in comparison.get("left_out", {}).items():
        lines += ["", f"Left out {run}: {reason}"]
    return "\n".join(lines)


def write_comparison(out: Path, other: Path, samples: int | None = None) -> str:
    """Write SWEEP/versus-OTHER.md and .json; return the Markdown."""
    comparison = compare(out, other, samples)
    text = comparison_markdown(comparison)
    stem = out / f"versus-{other.name}"
    write_atomically(stem.with_suffix(".md"), lambda path: Path(path).write_text(text + "\n"))
    write_atomically(
        stem.with_suffix(".json"), lambda path: Path(path).write_text(json.dumps(comparison, indent=2) + "\n")
    )
    return f"{text}\n\nWritten: {stem.with_suffix('.md')}, {stem.with_suffix('.json')}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def figure(out: Path, summary: dict[str, Any]) -> Figure:
    """One panel per game with its seeds' evaluation curves; each game's normalised scores beside
    the published ones (Atari 100k); and, over the games of the report's aggregates, the IQM of the
    human-normalised scores over training steps with its interval and the performance profiles."""
    results = collect(out)
    games = list(summary["games"])
    references = reference_scores()
    normalised_games = [game for game in games if game in references]
    extra = bool(normalised_games) + ("aggregates" in summary) * 2
    columns = min(3, len(games) + extra)
    rows = math.ceil((len(games) + extra) / columns)
    drawing = Figure(figsize=(4.5 * columns, 3.2 * rows), dpi=110, layout="constrained")
    panels = drawing.subplots(rows, columns, squeeze=False).ravel()
    for panel, game in zip(panels, games, strict=False):
        curves = [plot.read_curve(out / f"{game}-seed{seed}" / "rewards.txt") for seed in sorted(results[game])]
        plot.draw_on(panel, curves, title=game)
    if normalised_games:
        draw_games(panels[len(games)], summary, references)
    if "aggregates" in summary:
        draw_iqm_curve(panels[len(games) + 1], results, summary["aggregate_games"], references)
        draw_profiles(panels[len(games) + 2], summary, references)
    for panel in panels[len(games) + extra :]:
        panel.set_visible(False)
    return drawing


def draw_games(panel: Any, summary: dict[str, Any], references: dict[str, tuple[float, float]]) -> None:
    """Each game's human-normalised score: our runs as dots and their mean as a bar; each published
    algorithm's mean as a mark, with a line over the middle half of its runs where they are kept."""
    games = [game for game in summary["games"] if "human_normalised" in summary["games"][game]]
    names = sorted({name for game in games for name in summary["games"][game].get("published", {})})
    _, published_runs = published_scores(games) if names else ({}, {})
    for x, game in enumerate(games):
        entry = summary["games"][game]
        runs = list(entry["human_normalised"].values())
        panel.scatter([x] * len(runs), runs, color="black", s=12, label="ours, each run" if x == 0 else None)
        panel.hlines(np.mean(runs), x - 0.15, x + 0.15, color="black", label="ours, mean" if x == 0 else None)
        random, human = references[game]
        for color, (marker, name) in enumerate(zip("s^v", names, strict=False)):
            if name not in entry.get("published", {}):
                continue
            offset = x + 0.2 * (color + 1)
            if name in published_runs:
                quartiles = np.percentile(published_runs[name][:, x], [25, 75])
                panel.vlines(offset, *(quartiles - random) / (human - random), color=f"C{color}", alpha=0.6)
            normalised = (entry["published"][name] - random) / (human - random)
            panel.scatter(
                [offset], [normalised], marker=marker, s=24, color=f"C{color}", label=name if x == 0 else None
            )
    centre = 0.1 * len(names)  # of each game's group of marks
    panel.set_xticks([x + centre for x in range(len(games))], games, rotation=45, ha="right", fontsize=7)
    panel.set_xlim(-0.5, len(games) - 0.5 + 2 * centre)
    published = "\n(line: the middle half of their runs)" if published_runs else ""
    panel.set_title(f"each game: ours and published{published}" if names else "each game: our runs", fontsize=9)
    panel.set_ylabel("human-normalised score")
    panel.grid(alpha=0.3)
    panel.legend(fontsize=7)


def draw_iqm_curve(
    panel: Any,
    results: dict[str, dict[int, list[tuple[int, float, float]]]],
    games: list[str],
    references: dict[str, tuple[float, float]],
) -> None:
    steps, values, lows, highs = iqm_curve(results, games, references)
    panel.plot(steps, values, marker="o", markersize=3, color="black")
    panel.fill_between(steps, lows, highs, color="black", alpha=0.15, linewidth=0)
    panel.set_title(f"IQM over {plural(len(games), 'game')}, {round(100 * CONFIDENCE)}% interval")
    panel.set_xlabel("training steps")
    panel.set_ylabel("human-normalised score")
    panel.grid(alpha=0.3)


def draw_profiles(panel: Any, summary: dict[str, Any], references: dict[str, tuple[float, float]]) -> None:
    """rliable's performance profiles: the fraction of runs scoring above each normalised score."""
    from rliable import library

    matrices = profile_matrices(summary, references)
    top = max(float(matrix.max()) for matrix in matrices.values())
    taus = np.linspace(0.0, min(max(top, 0.1), 3.0), 101)  # beyond 3 only a few runs of a few games
    with seeded_numpy():
        profiles, bands = library.create_performance_profile(matrices, taus, reps=200)
    for name, profile in profiles.items():
        panel.plot(taus, profile, label=name)
        panel.fill_between(taus, bands[name][0], bands[name][1], alpha=0.15, linewidth=0)
    panel.set_title("performance profiles")
    panel.set_xlabel("human-normalised score τ")
    panel.set_ylabel("fraction of runs above τ")
    panel.legend(fontsize=7)
    panel.grid(alpha=0.3)


def profile_matrices(summary: dict[str, Any], references: dict[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    games = summary["aggregate_games"]
    matrices = {"ours": np.array([list(summary["games"][game]["human_normalised"].values()) for game in games]).T}
    if "published_runs" in summary:
        _, runs = published_scores(games)
        scale = np.array([references[game] for game in games])
        matrices.update({name: (raw - scale[:, 0]) / (scale[:, 1] - scale[:, 0]) for name, raw in runs.items()})
    return matrices


def iqm_curve(
    results: dict[str, dict[int, list[tuple[int, float, float]]]],
    games: list[str],
    references: dict[str, tuple[float, float]],
    samples: int = 500,
) -> tuple[list[int], list[float], list[float], list[float]]:
    """The IQM at each evaluation every run of ``games`` has reached at the same step, with its interval
    (every game with as many runs)."""
    reached = min(len(evaluations) for game in games for evaluations in results[game].values())
    steps, values, lows, highs = [], [], [], []
    for index in range(reached):
        if len({evaluations[index][0] for game in games for evaluations in results[game].values()}) > 1:
            break  # evaluated on different schedules: no common step from here on
        matrix = np.array(
            [
                [(evaluations[index][1] - references[game][0]) / (references[game][1] - references[game][0])
                 for evaluations in results[game].values()]
                for game in games
            ]
        ).T  # fmt: skip
        points, intervals = interval_estimates({"iqm": matrix}, rliable_metric("aggregate_iqm"), samples)
        steps.append(next(iter(results[games[0]].values()))[index][0])  # the same for every run
        low, high = np.ravel(intervals["iqm"])
        values.append(float(points["iqm"]))
        lows.append(float(low))
        highs.append(float(high))
    return steps, values, lows, highs


def report(out: Path, samples: int | None = None) -> str:
    """Write SWEEP/report.md, report.json and aggregate.png; return the Markdown."""
    summary = summarize(out, samples)
    text = markdown(summary)
    try:  # the figure first: a failing write leaves the report of before whole, its three files together
        plot.save(figure(out, summary), out / "aggregate.png")
    except plot.PlotError as error:
        raise ReportError(str(error)) from None
    write_atomically(out / "report.md", lambda path: Path(path).write_text(text + "\n"))
    write_atomically(out / "report.json", lambda path: Path(path).write_text(json.dumps(summary, indent=2) + "\n"))
    return f"{text}\n\nWritten: {out / 'report.md'}, {out / 'report.json'}, {out / 'aggregate.png'}"


# --- The learning benchmark (bench.py --learning): main.py --preset cleanrl-short on Breakout ----


# Training games are grouped by the step at which they ended.
SCORE_RANGES = [(0, 20_000), (20_000, 50_000), (50_000, 100_000), (100_000, 150_000), (150_000, 200_000),
                (200_000, 250_000)]  # fmt: skip
# Time to score: the first training game at which the mean raw score of the last SCORE_WINDOW games
# reaches the threshold. 23.3 is CleanRL's dqn_atari.py at 250k steps on Breakout with the settings
# above, on this kind of machine (about 40 minutes of its wall time).
SCORE_THRESHOLD = 23.3
SCORE_WINDOW = 100
# CleanRL's side: its dqn_atari.py with the settings above, one committed run per seed
# (scripts/cleanrl_breakout.sh writes CLEANRL_RUNS/cleanrl-seed<k>/episodes.csv and run.json).
CLEANRL_RUNS = ROOT / "results" / "breakout"


def cleanrl_scores(seed: int, runs: Path = CLEANRL_RUNS) -> dict[tuple[int, int], float]:
    """The mean raw score of the training games of CleanRL's committed run of ``seed`` that ended in
    each of SCORE_RANGES the run covers whole (by its --total-timesteps); {} where none is committed."""
    folder = runs / f"cleanrl-seed{seed}"
    if not (folder / "episodes.csv").exists():
        return {}
    command = json.loads((folder / "run.json").read_text())["command"].split()
    steps = int(command[command.index("--total-timesteps") + 1])
    games = np.loadtxt(folder / "episodes.csv", delimiter=",", skiprows=1, ndmin=2)  # step, return, frames
    return {
        (low, high): float(games[(games[:, 0] > low) & (games[:, 0] <= high), 1].mean())
        for low, high in SCORE_RANGES
        if high <= steps
    }


def time_to_score(games: np.ndarray, threshold: float, window: int = SCORE_WINDOW) -> dict[str, Any]:
    """The step and wall time (episodes.csv's columns) of the first training game at which the
    mean score of the last ``window`` games reached ``threshold``; None for both if none did."""
    reached = {"threshold": threshold, "window": window, "step": None, "seconds": None}
    if len(games) >= window:
        means = np.convolve(games[:, 1], np.ones(window) / window, mode="valid")  # means[i]: games i..i+window-1
        hits = np.flatnonzero(means >= threshold)
        if len(hits):
            game = games[hits[0] + window - 1]
            reached["step"] = int(game[0])
            reached["seconds"] = None if np.isnan(game[4]) else float(game[4])  # older runs kept no wall time
    return reached


def learning_report(run: Path, threshold: float = SCORE_THRESHOLD) -> dict[str, Any]:
    """Mean training-game score per range of steps, the evaluations and the time to score of one run folder."""
    config = read_config(run)
    games = read_episodes(run / EPISODES_FILE)
    curve = plot.read_curve(run / REWARDS_FILE)
    last_step = int(curve.steps[-1])
    cleanrl = cleanrl_scores(config["seed"])
    ranges = []
    for low, high in SCORE_RANGES:
        if low >= last_step:
            break
        scores = games[(games[:, 0] > low) & (games[:, 0] <= high), 1]
        ranges.append(
            {
                "steps": [low, min(high, last_step)],
                "games": len(scores),
                "mean_score": float(scores.mean()) if len(scores) else None,
                "cleanrl": cleanrl.get((low, high)) if high <= last_step else None,
            }
        )
    # --steps too: prioritized replay's beta anneals to 1 over the run's steps, so it changes the run.
    learning = ("steps", "lr", "adam_eps", "loss", "grad_clip", "n_step", "prioritized", "alpha", "beta0", "double")
    learning += ("dueling", "actors", "envs")
    settings = {name: config.get(name, 1 if name == "envs" else None) for name in learning}  # one game before --envs
    if config.get("learn_while_playing"):  # named only where set: the runs before it, and most since, learn after play
        settings["learn_while_playing"] = True
    return {
        "run": str(run),
        "game": config["env"],
        "seed": config["seed"],
        "steps": last_step,
        "settings": settings,
        "ranges": ranges,
        "time_to_score": time_to_score(games, threshold),
        "wall_seconds": float(games[-1, 4]) if len(games) else None,
        "evaluations": [
            {"step": int(step), "mean_score": float(score)}
            for step, score in zip(curve.steps, curve.scores, strict=True)
        ],
    }


def learning_table(reports: list[dict[str, Any]]) -> str:
    """The runs side by side, one row per range of steps, with CleanRL's reference."""

    def cell(row: dict[str, Any] | None, range_end: int) -> str:
        if row is None:
            return ""
        score = "—" if row["mean_score"] is None else f"{row['mean_score']:.2f}"
        partial = "*" if row["steps"][1] < range_end else ""
        return f"{score}{partial} ({row['games']})"

    names = [Path(report["run"]).name for report in reports]
    width = max(14, *(len(name) for name in names)) + 2
    seeds = sorted({report["seed"] for report in reports})
    cleanrl = {seed: cleanrl_scores(seed) for seed in seeds}
    lines = [
        "mean score of the training games that ended in each range of steps (in brackets: how many)",
        f"{'steps':<12}" + "".join(f"{name:>{width}}" for name in names) + f"{'CleanRL':>{6 * len(seeds) + 4}}",
    ]
    for i, (low, high) in enumerate(SCORE_RANGES):
        rows = [report["ranges"][i] if i < len(report["ranges"]) else None for report in reports]
        if not any(rows):
            break
        references = [cleanrl[seed].get((low, high)) for seed in seeds]
        reference = " / ".join("—" if value is None else f"{value:.2f}" for value in references)
        lines.append(
            f"{f'{low // 1000}k-{high // 1000}k':<12}"
            + "".join(f"{cell(row, high):>{width}}" for row in rows)
            + f"{reference:>{6 * len(seeds) + 4}}"
        )
    lines.append(
        f"(* the run ended inside the range; CleanRL: dqn_atari.py, same settings, seed {' / '.join(map(str, seeds))}, "
        "this machine)"
    )
    reached = reports[0]["time_to_score"]
    lines.append(f"time to score: first step (wall time) at which the last {reached['window']} training games "
                 f"averaged {reached['threshold']:g} or more:")  # fmt: skip
    for name, report in zip(names, reports, strict=True):
        lines.append(f"  {name}: {describe_time_to_score(report)}")
    lines.append("evaluation scores (10 games, epsilon 0.05), by step:")
    for name, report in zip(names, reports, strict=True):
        evaluations = ", ".join(f"{e['step'] // 1000}k: {e['mean_score']:.1f}" for e in report["evaluations"])
        lines.append(f"  {name}: {evaluations}")
    lines.append("settings:")
    for name, report in zip(names, reports, strict=True):
        settings = ", ".join(f"{key} {value}" for key, value in report["settings"].items())
        lines.append(f"  {name}: {report['game']}, seed {report['seed']}, {settings}")
    return "\n".join(lines)


def seeds_table(reports: list[dict[str, Any]], up_to: int) -> str:
    """Runs of the same settings but their seed in one column each: per range of steps up to
    ``up_to``, each seed's mean score and their mean, beside CleanRL's for the same seeds, and the
    evaluation at ``up_to`` (Markdown)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for report in sorted(reports, key=lambda report: report["seed"]):
        settings = report["settings"]
        # Only prioritized replay's schedule (beta) depends on the run's length.
        name = f"prioritized, --steps {settings['steps']:,}" if settings["prioritized"] else "uniform"
        name += f", --envs {settings['envs']}" if settings["envs"] != 1 else ""
        flags = ", ".join(f"{key} {value}" for key, value in settings.items() if key not in ("steps", "prioritized"))
        groups.setdefault(f"{name} ({flags})", []).append(report)
    seeds = sorted({report["seed"] for report in reports})
    cleanrl = {seed: cleanrl_scores(seed) for seed in seeds}

    def seeds_of(numbers: list[int]) -> str:
        return f"seed {' / '.join(map(str, numbers))}" + " (mean)" * (len(numbers) > 1)

    header = ["steps", *(f"ours, {name.split(' (')[0]}: {seeds_of([run['seed'] for run in runs])}"
                         for name, runs in groups.items()), f"CleanRL: {seeds_of(seeds)}"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]

    def scores(values: list[float | None]) -> str:
        shown = " / ".join("—" if value is None else f"{value:.2f}" for value in values)
        known = [value for value in values if value is not None]
        return f"{shown} ({np.mean(known):.2f})" if len(known) == len(values) > 1 else shown

    for i, (low, high) in enumerate(range_ for range_ in SCORE_RANGES if range_[1] <= up_to):
        cells = []
        for runs in groups.values():
            rows = [run["ranges"][i] if i < len(run["ranges"]) and run["ranges"][i]["steps"][1] == high else None
                    for run in runs]  # fmt: skip
            cells.append(scores([row["mean_score"] if row else None for row in rows]))
        cells.append(scores([cleanrl[seed].get((low, high)) for seed in seeds]))
        lines.append(f"| {low // 1000}-{high // 1000}k | " + " | ".join(cells) + " |")
    evaluations = [
        scores([next((e["mean_score"] for e in run["evaluations"] if e["step"] == up_to), None) for run in runs])
        for runs in groups.values()
    ]
    lines.append(f"| evaluation at {up_to // 1000}k (10 games, epsilon 0.05) | " + " | ".join(evaluations) + " | |")
    lines.append("")
    lines += [f"- {name}: {', '.join(run['run'] for run in runs)}" for name, runs in groups.items()]
    return "\n".join(lines)


def describe_time_to_score(report: dict[str, Any]) -> str:
    reached = report["time_to_score"]
    if reached["step"] is None:
        return f"not reached in {report['steps']:,} steps"
    wall = "wall time unknown" if reached["seconds"] is None else f"{reached['seconds'] / 60:.1f} min"
    return f"step {reached['step']:,} ({wall})"


# --- The GPU check (bench.py --gpu, scripts/gpu_check.sh) ------------------------------------------


GPU_ROWS = [
    ("train_step_ms", "one learning step, batch 32, eager (ms)", ".3f"),
    ("train_step_graphed_ms", "the same as one CUDA graph (--cuda-graphs) (ms)", ".3f"),
    ("act_ms", "one greedy action, batch 1 (ms)", ".3f"),
    ("act_graphed_ms", "the same as one CUDA graph (ms)", ".3f"),
    ("env_step_ms_all_threads", "one emulator step, torch with all CPUs' threads (ms)", ".3f"),
    ("env_step_ms_one_thread", "one emulator step, torch with one thread (ms)", ".3f"),
    ("sps_uniform_device", "our loop, uniform, frames on the device (steps/s)", ".1f"),
    ("sps_uniform_host", "our loop, uniform, frames in host RAM (steps/s)", ".1f"),
    ("sps_prioritized_device", "our loop, prioritized, frames on the device (steps/s)", ".1f"),
    ("sps_uniform_device_no_graphs", "our loop, uniform, frames on the device, --no-cuda-graphs (steps/s)", ".1f"),
    ("sps_uniform_device_one_thread", "our loop, uniform, frames on the device, --threads 1 (steps/s)", ".1f"),
    ("one_thread_over_all", "uniform: --threads 1 / --threads auto", ".3f"),
    ("graphs_over_no_graphs", "uniform: --cuda-graphs / --no-cuda-graphs", ".3f"),
    ("device_over_host_memory", "uniform: device memory / host memory", ".3f"),
    ("prioritized_over_uniform", "frames on the device: prioritized / uniform", ".3f"),
    ("hours_per_10m_steps", "10M steps at the uniform loop's rate (hours, evaluations excluded)", ".2f"),
    ("gpu_memory_peak_gib", "GPU memory at its peak, 1M steps' frames on the device (GiB)", ".2f"),
]
CLEANRL_ROWS = [
    ("sps_cleanrl", "CleanRL's dqn_atari.py, same settings (steps/s)", ".1f"),
    ("ours_over_cleanrl", "ours (uniform, device memory) / CleanRL's", ".3f"),
]


ATARI100K_GPU_ROWS = [
    ("train_step_ms", "the preset's learning step, batch 32, eager (ms)", ".3f"),
    ("train_step_graphed_ms", "the same as one CUDA graph, its augmentation's draws among its inputs (ms)", ".3f"),
    ("sps_graphed", "our loop with the preset, --cuda-graphs (steps/s)", ".1f"),
    ("sps_eager", "our loop with the preset, --no-cuda-graphs (steps/s)", ".1f"),
    ("graphs_over_eager", "--cuda-graphs / --no-cuda-graphs", ".3f"),
    ("minutes_per_100k_steps", "100k steps at the faster loop's rate (minutes, evaluations excluded)", ".1f"),
]


def gpu_table(
    figures: dict[str, Any], rows: list[tuple[str, str, str]] = GPU_ROWS + CLEANRL_ROWS, what: str = "`bench.py --gpu`"
) -> str:
    """The figures of one part of the GPU check (``run_gpu``'s JSON, or its ``atari100k`` part with
    ATARI100K_GPU_ROWS) as a Markdown table; a loop timed more than once shows each round in brackets."""
    rows = [row for row in rows if row[0] in figures]
    lines = [f"| {figures['settings']['device']}, {what} | |", "|---|---|"]
    for key, label, fmt in rows:
        rounds = figures["sps_rounds"].get(key.removeprefix("sps_"), [])
        each = f" ({', '.join(f'{value:{fmt}}' for value in rounds)})" if len(rounds) > 1 else ""
        lines.append(f"| {label} | {figures[key]:{fmt}}{each} |")
    return "\n".join(lines)


def at_once_markdown(figures: dict[str, Any]) -> str:
    """``bench.py --at-once``'s figures (its JSON) as Markdown: the evaluation at each --eval-envs, the training
    loop at --envs 1 and 2."""
    best = str(figures["eval_best_envs"])
    rounds = ", ".join(f"{ratio:.2f}" for ratio in figures["eval_speedup_rounds"])
    lines = [
        f"Evaluation: {figures['eval_games']} games of the Atari 100k preset on {figures['eval_game']} (an untrained "
        f"agent, mean score {figures['eval_mean_score']:.1f}), 1 torch thread, {figures['rounds']} rounds in turn",
        "",
        "| --eval-envs | seconds, each round | games whose score differs from one at a time |",
        "|---:|---|---:|",
    ]
    for at_once, took in figures["eval_seconds"].items():
        shown = ", ".join(f"{t:.0f}" for t in took)
        lines.append(f"| {at_once} | {shown} | {figures['eval_games_differing'][at_once]} |")
    lines += [
        "",
        f"--eval-envs {best} against 1: **{figures['eval_speedup']:.2f}x** (rounds: {rounds}); with both cores "
        f"(2 threads), {figures['eval_both_cores_speedup']:.2f}x."
        + (  # a file from before evaluations ran in worker processes has none
            f" With the game machines in {figures['eval_workers']} worker processes (`--env-workers`, 1 thread), "
            f"{figures['eval_workers_speedup']:.2f}x, {figures['eval_workers_games_differing']} games differing."
            if "eval_workers" in figures
            else ""
        ),
        "",
        "Training loop (Breakout, the default settings, 1 thread), steps/s once learning started:",
        "",
        "| --envs | steps/s, each round |",
        "|---:|---|",
    ]
    lines += [f"| {n} | {', '.join(f'{v:.0f}' for v in sps)} |" for n, sps in figures["loop_sps"].items()]
    ratios = ", ".join(f"{ratio:.2f}" for ratio in figures["loop_ratio_rounds"])
    lines += ["", f"--envs 2 against 1: {figures['loop_ratio']:.2f}x (rounds: {ratios})."]
    return "\n".join(lines)


def gpu_tables(figures: dict[str, Any]) -> str:
    """The tables of the parts a GPU check ran: our loop beside CleanRL's, the Atari 100k preset, games at once (with
    an evaluation's time), CleanRL's loop with and without --torch-deterministic beside ours."""
    tables = [gpu_table(figures)] if "settings" in figures else []
    if "atari100k" in figures:
        tables.append(gpu_table(figures["atari100k"], ATARI100K_GPU_ROWS, "`bench.py --gpu --gpu-parts atari100k`"))
    if "envs" in figures:
        envs = figures["envs"]
        lines = rounds_table(envs, "envs")
        lines.append(f"| 10M steps at the fastest ({envs['fastest']}), hours | {envs['hours_per_10m_steps']:.2f} |")
        parts = envs.get("round_parts_ms")
        if parts:  # from run 7 on
            where = f"a round of {parts['envs']} games over {parts['workers']} workers"
            for name in ("action", "play", "learning", "rest"):
                lines.append(f"| {where}: {name} (ms) | {parts[name]:.2f} |")
        evaluation = dict(figures.get("evaluation", {}))
        if evaluation:  # a trained agent's evaluation, 40 of which a 10M-step run makes
            step = evaluation.pop("agent_step")
            for name, played in evaluation.items():
                lines.append(
                    f"| an evaluation of the agent of step {step:,} ({len(played['scores'])} games, "
                    f"{played['steps']:,} steps), {name}: seconds | {played['seconds']:.1f} |"
                )
            fastest = min(played["hours_per_40"] for played in evaluation.values())
            lines.append(f"| 10M steps with 40 such evaluations, hours | {envs['hours_per_10m_steps'] + fastest:.2f} |")
        tables.append("\n".join(lines))
    if "cleanrl" in figures:
        cleanrl = figures["cleanrl"]
        lines = rounds_table(cleanrl, "cleanrl")
        lines += [
            f"| ours over {name} | {with_rounds(ratio, cleanrl['ours_over_rounds'][name], 2)} |"
            for name, ratio in cleanrl["ours_over"].items()
        ]
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def rounds_table(part: dict[str, Any], name: str) -> list[str]:
    """The head of a GPU part's table (its device, the part's name) and a row per loop timed: mean steps/s, and each
    round's."""
    head = [
        f"| {part['settings']['device']}, `bench.py --gpu --gpu-parts {name}` | steps/s (each round) |",
        "|---|---|",
    ]
    return head + [
        f"| {loop} | {with_rounds(mean, part['sps_rounds'][loop], 0)} |" for loop, mean in part["sps"].items()
    ]


def with_rounds(mean: float, rounds: list[float], decimals: int) -> str:
    """A figure's mean and, in brackets, each round's: '2316 (2290, 2342)'."""
    return f"{mean:.{decimals}f} ({', '.join(f'{value:.{decimals}f}' for value in rounds)})"


# --- The main job: python main.py on Breakout, 10M steps ----------------------------------------------------------

# references.csv, stops.csv, and a folder per attempt, attempt-K/Breakout-seed0 (a new attempt starts from step 0
# where a machine no longer holds the last one's checkpoint).
MAIN_JOB = ROOT / "results" / "breakout-10m"
STOPS_COLUMNS = ("attempt", "start_step", "stop_step", "threads", "commit", "date", "note")
REFERENCES_COLUMNS = ("name", "game", "score", "spread", "runs", "frames", "optimizer", "evaluation", "sticky_actions")
REFERENCE_SCORE_LIMIT = 1e9  # above any published Atari score: a larger one is a slip or a crafted file
TRAINING_WINDOW = 100  # the training games whose mean stands beside each evaluation
# A released agent's evaluations, once its run has ended: what `main.py --evaluate AGENT --eval-episodes 30
# --eval-epsilon 0.05` printed, kept in the run's folder: whole games (the run's cap, 30 minutes), then with Nature's
# 5-minute cap (--max-episode-frames 18000), their evaluation protocol exactly.
AGENT_EVALUATION = "agent_evaluation.txt"
AGENT_EVALUATIONS = (AGENT_EVALUATION, "agent_evaluation_5min.txt")
NATURE_GAME_FRAMES = 18_000  # 5 minutes at 60 frames a second


def read_playback(path: Path) -> dict[str, Any]:
    """What ``main.py --evaluate`` printed (its header, a line per game, the mean): the agent's step, the epsilon,
    the games' frame cap (None in a header from before it was printed: the run's) and the scores in order. A file
    that cannot be read or is not such output is a RunLogError."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = next(line for line in lines if line.startswith("Playing "))
        step = int(header.split("(trained ", 1)[1].split(" steps)", 1)[0])
        epsilon = float(header.rsplit("epsilon ", 1)[1])
        frames = (
            int(header.split("games of up to ", 1)[1].split(" frames", 1)[0].replace(",", ""))
            if "games of up to " in header
            else None
        )
        scores = [float(line.split("reward: ", 1)[1]) for line in lines if line.startswith("Episode #")]
    except OSError as error:
        raise RunLogError(f"cannot read {path}: {error.strerror}") from None
    except (UnicodeDecodeError, StopIteration, IndexError, ValueError):
        scores = []
    if not scores or not all(math.isfinite(score) for score in [*scores, epsilon]):
        raise RunLogError(f"{path} is not what main.py --evaluate prints (its Playing line, a line per game)")
    return {"step": step, "epsilon": epsilon, "frames": frames, "scores": scores}


def read_csv_rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """A CSV file's rows, lines starting with # left out; a missing file or column is a RunLogError."""
    try:
        with open(path, newline="", encoding="utf-8") as source:
            reader = csv.DictReader(line for line in source if not line.startswith("#"))
            rows = list(reader)
    except OSError as error:
        raise RunLogError(f"cannot read {path}: {error.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as error:
        raise RunLogError(f"{path} is not a CSV text file ({first_line(error)[:80]})") from None
    missing = [column for column in columns if column not in (reader.fieldnames or [])]
    if missing:
        raise RunLogError(f"{path} has no column {', '.join(missing)}")
    return rows


def main_job_attempts(folder: Path = MAIN_JOB) -> list[Path]:
    """Each attempt's run folder, the first attempt first."""
    attempts = sorted(folder.glob("attempt-*/Breakout-seed0"), key=attempt_number)
    if not attempts:
        raise RunLogError(f"{folder} holds no attempt-K/Breakout-seed0 folder")
    return attempts


def attempt_number(run: Path) -> int:
    """K of an attempt's run folder attempt-K/Breakout-seed0."""
    return int(run.parent.name.removeprefix("attempt-"))


def run_progress(run: Path, stops: Sequence[dict[str, str]] = (), up_to: int | None = None) -> dict[str, Any]:
    """One run as its files give it, up to step ``up_to`` (all of it by default): each evaluation (step, the mean,
    spread and range of its games) beside the mean of the last TRAINING_WINDOW training games before it, its wall
    time, and its stops (rows of the main job's stops.csv, each with its wall time and steps/s from episodes.csv);
    ``step`` is the step it reached (its last game, evaluation or stop, at most ``up_to``), not where its last game
    before ``up_to`` ended; an evaluation of a rewards.txt of three columns has no spread, range or game count (nan);
    ``agents`` are its released agent's evaluations (AGENT_EVALUATIONS in its folder) of a step up to ``up_to``."""
    games = read_episodes(run / EPISODES_FILE)  # step, score, length, epsilon, seconds
    rewards = [
        values if len(values) == 7 else [*values, *[math.nan] * 5] for _, values in read_rewards(run / REWARDS_FILE)
    ]
    reached = max([int(games[-1, 0]) if len(games) else 0] + [int(values[0]) for values in rewards])
    if up_to is not None:
        games = games[games[:, 0] <= up_to]
    evaluations = []
    for step, mean, std, low, high, episodes, _seconds in rewards:
        if up_to is not None and step > up_to:
            break
        before = games[games[:, 0] <= step][-TRAINING_WINDOW:, 1]
        training = float(before.mean()) if len(before) else math.nan
        evaluations.append(
            {"step": int(step), "mean": mean, "std": std, "min": low, "max": high,
             "games": int(episodes) if math.isfinite(episodes) else None,
             "training_mean": training, "training_games": len(before)}
        )  # fmt: skip
    seconds = float(games[-1, 4]) if len(games) else 0.0
    recent = games[-TRAINING_WINDOW:, 1]

    def seconds_at(at: int) -> float:
        played = games[games[:, 0] <= at]
        return float(played[-1, 4]) if len(played) else 0.0

    stretches = []
    for row in stops:
        start, stop = int(row["start_step"]), int(row["stop_step"])
        wall = seconds_at(stop) - (0.0 if start == 0 else seconds_at(start))
        stretches.append({**row, "start_step": start, "stop_step": stop, "seconds": wall,
                          "steps_per_second": (stop - start) / wall if wall > 0 else math.nan})  # fmt: skip
    last_game = int(games[-1, 0]) if len(games) else 0
    reached = max([reached] + [stop["stop_step"] for stop in stretches])  # a stop comes after the last game
    agents = [read_playback(run / name) for name in AGENT_EVALUATIONS if (run / name).exists()]
    return {
        "steps": checked_config(run)["steps"],
        "step": reached if up_to is None else min(reached, up_to),
        "wall_seconds": seconds,
        "hours_per_million_steps": seconds / 3600 / (last_game / 1e6) if last_game else math.nan,
        "training_mean": float(recent.mean()) if len(recent) else math.nan,
        "training_games": len(recent),
        "evaluations": evaluations,
        "stops": stretches,
        "agents": [agent for agent in agents if up_to is None or agent["step"] <= up_to],
    }


def main_job_report(folder: Path = MAIN_JOB) -> dict[str, Any]:
    """The main job as its committed files give it: each attempt (its number and ``run_progress``; the last is the
    one under way), the published references (references.csv) and, once released, the last attempt's agent's
    evaluations."""
    stops = read_csv_rows(folder / "stops.csv", STOPS_COLUMNS)
    runs = main_job_attempts(folder)
    attempts = [
        {"attempt": attempt_number(run),
         **run_progress(run, [row for row in stops if int(row["attempt"]) == attempt_number(run)])}
        for run in runs
    ]  # fmt: skip
    references = read_references(folder / "references.csv", game_name(checked_config(runs[0])["env"]))
    return {"attempts": attempts, "references": references, "agents": attempts[-1]["agents"]}


def main_job_figure(folder: Path = MAIN_JOB) -> Figure:
    """The main job's curves from its committed files, over its whole length of steps: each attempt's evaluations
    (mean, band from the lowest to the highest game) and training games (each a dot, the line the mean of the last
    TRAINING_WINDOW), beside the published scores of references.csv as dashed lines."""
    runs = main_job_attempts(folder)
    config = checked_config(runs[-1])
    steps = config["steps"]
    references = read_references(folder / "references.csv", game_name(config["env"]))
    return runs_figure(
        runs,
        [f"attempt {attempt_number(run)}" for run in runs],
        steps,
        "evaluations (10 games, epsilon 0.05)",
        f"python main.py: Breakout, seed 0, {steps:,} steps (10M steps are 40M frames)",
        references,
    )


def runs_figure(
    runs: list[Path],
    labels: list[str],
    steps: int,
    evaluation_title: str,
    title: str,
    references: Sequence[dict[str, Any]] = (),
) -> Figure:
    """Runs' curves up to step ``steps``, side by side: their evaluations (mean, band from the lowest to the highest
    game) and training games (each a dot, the line the mean of the last TRAINING_WINDOW), with any published scores
    (references.csv's rows) as dashed lines; one legend for both, below them, so that long names hide no curve."""
    drawing = Figure(figsize=(12, 5 + 0.15 * (len(runs) + len(references))), dpi=110, layout="constrained")
    evaluations = [curve_up_to(plot.read_curve(run / REWARDS_FILE), steps) for run in runs]
    training = [curve_up_to(plot.read_train_curve(run / EPISODES_FILE, TRAINING_WINDOW), steps) for run in runs]
    titles = evaluation_title, "training games"
    panels = drawing.subplots(1, 2)
    for panel, curves, panel_title in zip(panels, (evaluations, training), titles, strict=True):
        for label, curve in zip(labels, curves, strict=True):
            curve.label = label
        plot.draw_on(panel, curves, title=panel_title, window=TRAINING_WINDOW)
        for index, row in enumerate(references):
            name = row["name"] if "frames" in row["name"] else f"{row['name']}, {row['frames']} frames"
            color = f"C{len(runs) + index}"  # after the runs' colours
            panel.axhline(row["score"], color=color, linestyle="--", linewidth=1, label=name)
        panel.set_xlim(0, steps)
        panel.get_legend().remove()  # plot.draw_on's: the figure's one legend names the same lines
    drawing.legend(*panels[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize="small")
    drawing.suptitle(title)
    return drawing


def curve_up_to(curve: plot.Curve, steps: int) -> plot.Curve:
    """``curve``'s points up to step ``steps``."""
    kept = curve.steps <= steps
    return dataclasses.replace(
        curve,
        **{name: getattr(curve, name)[kept] for name in ("steps", "scores", "low", "high", "raw")
           if getattr(curve, name) is not None},
    )  # fmt: skip


def main_job_scores_markdown(report: dict[str, Any]) -> str:
    """The table of where each attempt (its last evaluation, its last training games) and, once released, the
    agent stand beside each reference: the first of docs/results.md's tables."""
    lines = list(REFERENCES_HEADER)
    for attempt in report["attempts"]:
        name = f"attempt {attempt['attempt']}"
        if attempt["evaluations"]:
            last = attempt["evaluations"][-1]
            lines.append(
                f"| {name}, evaluation at step {last['step']:,} | {last['mean']:.1f} ± {last['std']:.1f} (over its "
                f"{last['games']} games) | 1 seed | {last['step'] * 4 / 1e6:.1f}M | Adam 1e-4, Huber | {last['games']} "
                "games of up to 30 minutes, epsilon 0.05, up to 30 no-op frames | none |"
            )
        if attempt["training_games"]:
            lines.append(
                f"| {name}, training games by step {attempt['step']:,} | {attempt['training_mean']:.1f} (the last "
                f"{attempt['training_games']}) | 1 seed | {attempt['step'] * 4 / 1e6:.1f}M | Adam 1e-4, Huber | the "
                "training games' scores (whole games, epsilon annealed to 0.1 over the first 1M steps) | none |"
            )
    for agent in report["agents"]:
        scores = np.array(agent["scores"])
        protocol = "Nature's protocol" if agent["frames"] == NATURE_GAME_FRAMES else "whole games"
        lines.append(
            f"| the released agent (step {agent['step']:,}), {protocol} | {scores.mean():.1f} ± {scores.std():.1f} "
            f"(over its {len(scores)} games) | 1 seed | {agent['step'] * 4 / 1e6:.1f}M | Adam 1e-4, Huber | "
            f"{agent_games(agent)}, up to 30 no-op frames | none |"
        )
    return "\n".join(lines + reference_rows(report["references"]))


def agent_games(agent: dict[str, Any]) -> str:
    """The games a released agent's evaluation (``read_playback``) played: how many, their cap, the epsilon."""
    cap = "games of up to 5 minutes" if agent["frames"] == NATURE_GAME_FRAMES else "whole games"
    return f"{len(agent['scores'])} {cap}, epsilon {agent['epsilon']:g}"


REFERENCES_HEADER = [
    "| | score | runs | frames | optimizer | evaluation | sticky actions |",
    "|---|---|---|---|---|---|---|",
]


def read_references(path: Path, game: str) -> list[dict[str, Any]]:
    """A references.csv: published scores of ``game``, each with how it was made and its source; an empty spread is
    a single run's score, which has none (nan). A row of another game, one with more or fewer fields than the header,
    or a score or spread that is not a finite number under REFERENCE_SCORE_LIMIT (the spread not negative) is a
    RunLogError naming the file and the row."""
    references = []
    for number, row in enumerate(read_csv_rows(path, REFERENCES_COLUMNS), start=1):
        where = f"{path}: row {number} ({str(row.get('name'))[:40]!r})"
        if None in row or None in row.values():
            raise RunLogError(f"{where}: {'more' if None in row else 'fewer'} fields than the header names")
        try:
            score = float(row["score"])
            spread = float(row["spread"]) if row["spread"] else math.nan  # a single run's score has none
        except ValueError:
            raise RunLogError(f"{where}: its score or spread is not a number") from None
        spread_ok = 0 <= spread < REFERENCE_SCORE_LIMIT or not row["spread"]  # a nan that is written fails
        if not (abs(score) < REFERENCE_SCORE_LIMIT and spread_ok):  # a nan score fails too
            raise RunLogError(
                f"{where}: {row['score'][:20]} ± {row['spread'][:20]} is not a published score (finite, under "
                f"{REFERENCE_SCORE_LIMIT:.0e}, its spread not negative)"
            )
        if row["game"] != game:
            raise RunLogError(f"{where}: a score of {row['game'][:40]!r}, not of {game}, the runs' game")
        references.append({**row, "score": score, "spread": spread})
    return references


def reference_rows(references: list[dict[str, Any]]) -> list[str]:
    """``read_references``' rows under REFERENCES_HEADER."""
    return [
        "| " + " | ".join(
            [cell(ref["name"]),
             f"{ref['score']:.1f}" + ("" if math.isnan(ref["spread"]) else f" ± {ref['spread']:.1f}"),
             *(cell(ref[name]) for name in ("runs", "frames", "optimizer", "evaluation", "sticky_actions"))]
        ) + " |"
        for ref in references
    ]  # fmt: skip


def main_job_markdown(report: dict[str, Any]) -> str:
    """``main_job_report`` as the tables of docs/results.md: where each attempt stands beside each reference
    (``main_job_scores_markdown``), the attempts' evaluations side by side with the training games' mean, and every
    stop and resume."""
    lines = [
        f"Attempt {attempt['attempt']}: step {attempt['step']:,} of {attempt['steps']:,} "
        f"({attempt['wall_seconds'] / 3600:.1f} hours of wall time, {attempt['hours_per_million_steps']:.1f} hours "
        "per million steps on this machine)."
        for attempt in report["attempts"]
    ]
    lines += ["", main_job_scores_markdown(report), ""]
    lines += evaluations_beside([(f"attempt {attempt['attempt']}", attempt) for attempt in report["attempts"]])
    lines += ["", "| attempt | from step | to step | threads | hours | steps/s | commit | date | note |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for stop in (stop for attempt in report["attempts"] for stop in attempt["stops"]):
        lines.append(
            f"| {stop['attempt']} | {stop['start_step']:,} | {stop['stop_step']:,} | {stop['threads']} | "
            f"{stop['seconds'] / 3600:.1f} | {stop['steps_per_second']:.0f} | {cell(stop['commit'])} | "
            f"{cell(stop['date'])} | {cell(stop['note'])} |"
        )
    return "\n".join(lines)


def evaluations_beside(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Runs' evaluations side by side (Markdown): a row per step, for each (label, ``run_progress``) its evaluation
    and the mean of the training games before it."""
    by_step = {(label, row["step"]): row for label, run in runs for row in run["evaluations"]}
    lines = [
        "| step |"
        + "".join(
            f" {cell(label)}: evaluation, mean ± std [min, max] | {cell(label)}: mean of the {TRAINING_WINDOW} training games "
            "before it |"
            for label, _ in runs
        ),
        "|---|" + "---|---|" * len(runs),
    ]
    for step in sorted({step for _, step in by_step}):
        cells = []
        for label, _ in runs:
            row = by_step.get((label, step))
            if row is None:
                cells += ["-", "-"]
                continue
            cells.append(
                f"{row['mean']:.1f} ± {row['std']:.1f} [{row['min']:g}, {row['max']:g}] ({row['games']} games)"
                if row["games"] is not None
                else f"{row['mean']:.1f} (its spread and games not logged)"
            )
            cells.append(
                f"{row['training_mean']:.1f} ({row['training_games']} games)" if row["training_games"] else "-"
            )
        lines.append(f"| {step:,} | " + " | ".join(cells) + " |")
    return lines


# --- Runs side by side (bench.py --beside): one game's runs of different recipes over the same steps --------------


def beside_report(runs: list[Path], up_to: int | None = None, references: Sequence[Path] = ()) -> dict[str, Any]:
    """Runs of one game up to step ``up_to`` (by default the first run's --steps): the game, and for each run its name
    (its folder under results/ where it is there), its recipe (its preset, --prioritized, or the defaults), CPU
    threads, evaluation epsilon, ``run_progress`` and, for a prioritized run that logged it, its memory's health at
    each evaluation up to the step (HEALTH_FILE's rows); and the published scores of the references.csv files of that
    game given, in their order. Runs of different games are a RunLogError."""
    configs = [checked_config(run) for run in runs]
    games = {run: game_name(config["env"]) for run, config in zip(runs, configs, strict=True)}
    if len(set(games.values())) > 1:
        played = ", ".join(f"{run}: {game}" for run, game in games.items())
        raise RunLogError(f"runs of different games ({played[:300]}): set one game's runs side by side")
    up_to = up_to or configs[0]["steps"]
    reports = []
    for run, config in zip(runs, configs, strict=True):
        try:
            name = str(run.resolve().relative_to(ROOT / "results"))
        except ValueError:
            name = str(run)
        recipe = (
            f"--preset {config['preset']}"
            if config.get("preset")
            else ("--prioritized" if config.get("prioritized") else "the defaults")
        )
        health = read_log(run / HEALTH_FILE, HEALTH_HEADER) if (run / HEALTH_FILE).exists() else None
        reports.append({"name": name, "recipe": recipe, "eval_epsilon": config["eval_epsilon"],
                        "threads": config.get("threads"), **run_progress(run, up_to=up_to),
                        "health": None if health is None else health[health[:, 0] <= up_to]})  # fmt: skip
    game = games[runs[0]]
    return {"game": game, "up_to": up_to, "runs": reports,
            "references": [row for path in references for row in read_references(path, game)]}  # fmt: skip


def beside_markdown(report: dict[str, Any]) -> str:
    """``beside_report`` as Markdown: ``beside_scores_markdown``, then the runs' evaluations side by side, then the
    health of each prioritized run's memory that logged it."""
    lines = [beside_scores_markdown(report), "", *evaluations_beside([(run["name"], run) for run in report["runs"]])]
    for run in report["runs"]:
        if run["health"] is not None:
            lines += ["", f"The replay memory of {cell(run['name'])} at each evaluation ({HEALTH_FILE}):", ""]
            lines += health_markdown(run["health"])
    return "\n".join(lines)


def health_markdown(health: np.ndarray) -> list[str]:
    """A prioritized memory's health (HEALTH_FILE's rows) as a Markdown table: the sum tree's total against its leaves
    summed again (the relative error), the smallest and largest priority of a sampleable slot, the priority a new
    transition gets, beta, and the largest importance weight before any normalisation."""
    lines = [
        "| step | relative error of the total | priorities | a new one's | beta | largest weight |",
        "|---|---|---|---|---|---|",
    ]
    for step, _total, _exact, error, low, high, new, beta, weight, _sampleable in health:
        lines.append(
            f"| {int(step):,} | {error:.2g} | {low:#.3g} to {high:#.4g} | {new:#.4g} | {beta:.3f} | {weight:.1f} |"
        )
    return lines


def beside_scores_markdown(report: dict[str, Any]) -> str:
    """Where each run of ``beside_report`` stands at the step (its last evaluation, its last training games, its
    released agent's evaluations, its wall time per million steps and threads), the published scores beside them."""
    lines = [
        f"{report['game']}: {len(report['runs'])} runs up to step {report['up_to']:,}.",
        "",
        f"| run | recipe | step reached | last evaluation (step, games, epsilon) | mean of the last {TRAINING_WINDOW} "
        "training games | released agent | hours per million steps (CPU threads) |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        last = run["evaluations"][-1] if run["evaluations"] else None
        evaluation = (
            "-"
            if last is None
            else (
                f"{last['mean']:.1f} ± {last['std']:.1f} (step {last['step']:,}, {last['games']} games, epsilon "
                f"{run['eval_epsilon']:g})"
                if last["games"] is not None
                else f"{last['mean']:.1f} (step {last['step']:,}, epsilon {run['eval_epsilon']:g}; games not logged)"
            )
        )
        agents = "; ".join(
            f"{np.mean(agent['scores']):.1f} ± {np.std(agent['scores']):.1f} (step {agent['step']:,}, "
            f"{agent_games(agent)})"
            for agent in run["agents"]
        )
        threads = "" if run["threads"] is None else f" ({run['threads']})"
        lines.append(
            f"| {cell(run['name'])} | {cell(run['recipe'])} | {run['step']:,} of {report['up_to']:,} | {evaluation} | "
            f"{run['training_mean']:.1f} ({run['training_games']} games) | {agents or '-'} | "
            f"{run['hours_per_million_steps']:.1f}{threads} |"
        )
    if report["references"]:
        lines += ["", *REFERENCES_HEADER, *reference_rows(report["references"])]
    return "\n".join(lines)


def beside_figure(report: dict[str, Any], runs: list[Path]) -> Figure:
    """``beside_report``'s runs drawn up to its step (``runs_figure``)."""
    names = [f"{run['name']} ({run['recipe']})" for run in report["runs"]]
    up_to = report["up_to"]
    title = f"{report['game']}: {len(runs)} runs up to step {up_to:,}"
    return runs_figure(runs, names, up_to, "evaluations (each run's games and epsilon)", title, report["references"])
