"""The paper's finite theory: exact values, the information ceiling, replays against the exact curves, the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from boe.core.theory import (
    binary_entropy_bits,
    bsc_information_bits,
    bsc_information_nats,
    candidate_queries_needed,
    candidate_success,
    factor_success,
    fit_calibration,
    information_ceiling,
    mode_gain,
    mode_success,
    replay_success,
)
from boe.sim.ledgers import factor_code_ledger


def test_factor_code_curves_match_the_paper():
    k = 64
    assert [factor_success(q, k) for q in range(8)] == [1 / 64, 2 / 64, 4 / 64, 8 / 64, 16 / 64, 0.5, 1.0, 1.0]
    assert candidate_success(0, k) == 1 / 64 and candidate_success(63, k) == 1.0 and candidate_success(200, k) == 1.0
    # "candidate queries need 60 checks to exceed 95% success"
    assert candidate_queries_needed(0.05, k) == 60
    assert candidate_success(59, k) < 0.95 <= candidate_success(60, k)
    assert candidate_queries_needed(0.0, k) == k - 1 and candidate_queries_needed(0.99, 4) == 0
    with pytest.raises(ValueError):
        candidate_queries_needed(1.0, k)


@pytest.mark.parametrize("k", [2, 4, 16, 64, 1024])
def test_candidate_bound_is_the_least_q_reaching_the_target(k):
    for eps in (0.0, 0.05, 0.25, 0.5, 0.9):
        q = candidate_queries_needed(eps, k)
        assert candidate_success(q, k) >= 1 - eps - 1e-12
        assert q == 0 or candidate_success(q - 1, k) < 1 - eps


def test_noisy_model_values():
    assert binary_entropy_bits(0.5) == 1.0 and binary_entropy_bits(1.0) == 0.0
    assert mode_gain(0.5, 4) == 0.0 and mode_gain(1.0, 4) == 1 - 1 / 16
    assert math.isclose(mode_success(0.75, 4), 0.75**4)
    assert bsc_information_bits(1.0, 4) == 4.0 and bsc_information_bits(0.5, 4) == 0.0
    assert math.isclose(bsc_information_nats(1.0, 4), 4 * math.log(2))
    assert math.isclose(information_ceiling(2.0, m_sel=4), 2.0)


@pytest.mark.parametrize("m", [1, 2, 4, 6, 10])
def test_gain_never_exceeds_the_information_ceiling(m):
    """rho^M - 1/K <= sqrt(Lambda / 2) with Lambda = ln2 M [1 - H_b(rho)], on a fine grid of rho."""
    for rho in np.linspace(0.5, 1.0, 501):
        assert mode_gain(float(rho), m) <= information_ceiling(bsc_information_nats(float(rho), m)) + 1e-12


def test_replays_follow_the_exact_factor_and_candidate_curves():
    """bayes buys factor checks (2^q / K); the paper's whole policy buys candidate checks ((q + 1) / K)."""
    m, n = 5, 800
    k = 2**m
    cal = fit_calibration(factor_code_ledger(300, m=m, seed=11), ["bayes", "boe", "whole"])
    budgets = [0, 4, 8, 12, 16, 20, 40]
    runs = replay_success(cal, factor_code_ledger(n, m=m, seed=12), ["bayes", "whole"], budgets)
    got = {(r.policy, r.budget): r for r in runs}
    for b in budgets:
        bayes, whole = got["bayes", float(b)], got["whole", float(b)]
        q_f = min(b // 4, m)
        p = factor_success(q_f, k)
        assert bayes.factor_checks == q_f
        assert abs(bayes.success - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12
        p = candidate_success(b // 8, k)
        assert whole.checks == b // 8
        assert abs(whole.success - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12
        assert whole.se == pytest.approx(math.sqrt(whole.success * (1 - whole.success) / n))


def _boe(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True, timeout=600, env=env)


def test_cli_factor_code_json_and_png(tmp_path):
    png = tmp_path / "fc.png"
    out = _boe(
        "theory",
        "factor-code",
        "--m",
        "3",
        "--n",
        "120",
        "--train",
        "120",
        "--budget",
        "0,8,12,56",
        "--policy",
        "bayes,whole",
        "--json",
        "--png",
        str(png),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["k"] == 8 and data["candidate_checks_for_95pct"] == 7
    rows = {r["budget"]: r for r in data["rows"]}
    assert rows[12.0]["exact_factor"] == 1.0 and rows[12.0]["replays"]["bayes"]["success"] == 1.0
    assert rows[56.0]["exact_candidate"] == 1.0 and rows[56.0]["replays"]["whole"]["success"] == 1.0
    assert rows[0.0]["replays"]["bayes"]["checks"] == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_noisy_table_and_errors(tmp_path):
    png = tmp_path / "noisy.png"
    out = _boe("theory", "noisy", "--m", "2", "--rho", "0.5,1", "--n", "100", "--train", "100", "--png", str(png))
    assert out.returncode == 0, out.stderr
    assert "ceiling" in out.stdout and png.exists()
    out = _boe("theory", "noisy", "--m", "2", "--rho", "0.5,1", "--n", "100", "--train", "100", "--json")
    rows = json.loads(out.stdout)["rows"]
    assert rows[1]["replays"]["bayes"]["success"] == 1.0 and rows[1]["exact_gain"] == 0.75
    bad = _boe("theory", "noisy", "--rho", "0.3")
    assert bad.returncode != 0 and "rho" in bad.stderr
    bad = _boe("theory", "factor-code", "--policy", "nope")
    assert bad.returncode != 0 and "unknown policy" in bad.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("noisy", "--m", "2", "--rho", "0.5,0.75,1", "--n", "100", "--train", "100"),
        ("factor-code", "--m", "3", "--n", "100", "--train", "100", "--budget", "0,4,12,28"),
    ],
    ids=["noisy", "factor-code"],
)
def test_theory_tables_fit_80_columns_without_cutting_a_number(args):
    out = subprocess.run(
        [sys.executable, "-m", "boe", "theory", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout, out.stdout
    assert max(map(len, out.stdout.splitlines())) <= 80
    assert "±" in out.stdout and ("ceiling" in out.stdout or "cand. checks" in out.stdout)
