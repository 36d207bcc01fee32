"""Smoke test of bench.py: every figure is there and positive (no wall-time assertions)."""

import json
import math

import bench

KEYS = [
    "train_step_ms", "act_ms", "env_step_ms", "bound_isolated_sps", "work_in_loop_order_uniform_ms", "bound_uniform_sps",
    "work_in_loop_order_prioritized_ms", "bound_prioritized_sps",
    "sps_uniform", "sps_prioritized", "efficiency_uniform", "efficiency_prioritized", "bytes_per_transition_uniform",
    "bytes_per_transition_prioritized", "memory_push_us", "memory_sample_us", "memory_sample_3step_us", "priority_update_us",
    "priority_cycle_us", "sps_alone", "sps_beside_busy_core", "sps_two_runs_total", "busy_core_over_alone",
    "two_runs_over_alone",
]  # fmt: skip


def test_quick_benchmark_reports_every_figure():
    figures = bench.run("Breakout", quick=True, train_every=4)
    for key in KEYS:
        assert math.isfinite(figures[key]) and figures[key] > 0, key
    assert figures["bytes_per_transition_uniform"] <= 7_100
    # The sum tree (16 bytes) and the TD error a transition arrived with (4).
    assert figures["bytes_per_transition_prioritized"] - figures["bytes_per_transition_uniform"] <= 20
    settings = figures["settings"]
    assert settings["game"] == "ALE/Breakout-v5" and settings["train_every"] == 4 and settings["torch"]
    assert json.loads(json.dumps(figures)) == figures
    rendered = bench.table(figures)
    assert "priority cycle" in rendered and "ale-py" in rendered
