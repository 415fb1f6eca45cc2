"""The end-to-end `boe replay` sweep against the literal reading of the spec, per question.

    python benchmarks/cli_sweep.py                         # 6,000 questions, K = 13 (~136 MB), 5 policies x 5 budgets
    python benchmarks/cli_sweep.py --baseline 6aeef2c      # also the same sweep on an older commit, same run
    python benchmarks/cli_sweep.py --n 1000 --repeats 1    # a quicker look

Generates (once, cached) a pool ledger with ``boe sim ledger --kind pool``,
then, for this tree and (with ``--baseline REV``) the package of commit REV
extracted to a temporary folder:

* ``boe replay LEDGER --policy ... --budget ...`` as a user runs it (a fresh
  process, the installed console script; the baseline through the same
  interpreter with its package first on ``PYTHONPATH``), wall time, best of
  ``--repeats``;
* loading alone (`boe.core.loading.load_ledgers`, default workers) in a fresh
  process, best of ``--repeats``.

The literal reference (`boe.core.literal.literal_replay`, one question and
one action at a time, on records validated beforehand, calibration fitted
once) replays a sample of questions under the same policies and budgets in
this process. The ratio is literal seconds per question (all runs) over the
sweep's end-to-end seconds per question (start-up and loading included).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEUTRAL = tempfile.gettempdir()
# The baseline's package comes first on sys.path (PYTHONPATH; processes run in a neutral folder so that
# the current one does not come before it), ahead of the editable install's finder.
CLI_SNIPPET = "import sys\nsys.argv[0] = 'boe'\nfrom boe.cli import main\nmain()\n"
LOAD_SNIPPET = """
import sys, time
t = time.perf_counter()
from boe.core.loading import load_ledgers
qs, groups = load_ledgers([sys.argv[1]])
print(time.perf_counter() - t, len(qs))
"""


def ledger_path(n: int, k: int, seed: int, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"pool-{n}-k{k}-seed{seed}.jsonl"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        cmd = [boe_script(), "sim", "ledger", "--kind", "pool", "--n", str(n), "--k", str(k), "--seed", str(seed)]
        with tmp.open("wb") as fh:
            subprocess.run(cmd, stdout=fh, check=True)
        tmp.rename(path)
    return path


def boe_script() -> str:
    script = Path(sys.executable).parent / "boe"
    return str(script) if script.exists() else "boe"


def extract(rev: str, into: Path) -> Path:
    """The ``boe`` package of commit ``rev`` under ``into`` (for PYTHONPATH)."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "boe"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def env_for(src: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def time_cli(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True, cwd=NEUTRAL)
    return time.perf_counter() - t


def time_load(path: Path, env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", LOAD_SNIPPET, str(path)], env=env, capture_output=True, check=True, cwd=NEUTRAL
    )
    return float(out.stdout.split()[0])


def literal_per_question(
    path: Path, n: int, policies: list[str], budgets: list[float], sample: int, seed: int
) -> float:
    """Seconds the literal implementation takes per question for every (policy, budget)."""
    from boe.core.ledger import read_ledger
    from boe.core.literal import literal_calibration, literal_replay

    records = list(read_ledger(path))
    cal = literal_calibration(records)
    rng = random.Random(seed)
    chosen = [records[i] for i in sorted(rng.sample(range(len(records)), min(sample, len(records))))]
    del records
    t = time.perf_counter()
    for rec in chosen:
        for p in policies:
            for b in budgets:
                literal_replay(rec, cal, p, b, rng=random.Random(0))
    return (time.perf_counter() - t) / len(chosen)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--k", type=int, default=13, help="candidates per question (13: ~136 MB at 6,000 questions)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", default="raw,boe,boe-factor,random-factor,whole")
    ap.add_argument("--budget", default="1,2,4,8,16")
    ap.add_argument("--calibration", default=None, help="passed to boe replay (default: its default)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each timing; the best is reported")
    ap.add_argument("--sample", type=int, default=40, help="questions replayed by the literal implementation")
    ap.add_argument("--baseline", default=None, help="a git revision to time the same way, in the same run")
    ap.add_argument("--cache", type=Path, default=Path(".benchmarks"))
    args = ap.parse_args()

    path = ledger_path(args.n, args.k, args.seed, args.cache).resolve()
    size_mb = path.stat().st_size / 1e6
    policies = args.policy.split(",")
    budgets = [float(b) for b in args.budget.split(",")]
    replay_args = ["replay", str(path), "--policy", args.policy, "--budget", args.budget]
    if args.calibration:
        replay_args += ["--calibration", args.calibration]

    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    tmp = tempfile.TemporaryDirectory(prefix="boe-baseline-")
    if args.baseline:
        trees.insert(0, (f"baseline {args.baseline}", extract(args.baseline, Path(tmp.name))))

    lit = literal_per_question(path, args.n, policies, budgets, args.sample, args.seed)
    cmds = {}
    for name, src in trees:
        if src is not None:  # the baseline's package must win over the installed one
            where = subprocess.run(
                [sys.executable, "-c", "import boe; print(boe.__file__)"],
                env=env_for(src),
                capture_output=True,
                text=True,
                cwd=NEUTRAL,
            ).stdout.strip()
            assert where.startswith(str(src)), where
        cmds[name] = [boe_script(), *replay_args] if src is None else [sys.executable, "-c", CLI_SNIPPET, *replay_args]
    walls: dict[str, list[float]] = {name: [] for name, _ in trees}
    loads: dict[str, list[float]] = {name: [] for name, _ in trees}
    for _ in range(args.repeats):  # interleaved, so that a change in the machine's load hits every tree alike
        for name, src in trees:
            walls[name].append(time_cli(cmds[name], env_for(src)))
            loads[name].append(time_load(path, env_for(src)))
    rows = []
    for name, _ in trees:
        wall, load = min(walls[name]), min(loads[name])
        per_q = wall / args.n
        rows.append(
            [
                name,
                f"{wall:.2f}",
                f"{statistics.median(walls[name]):.2f}",
                f"{load:.2f}",
                f"{wall - load:.2f}",
                f"{per_q * 1e3:.3f}",
                f"{lit / per_q:.0f}x",
            ]
        )
    tmp.cleanup()
    runs = len(policies) * len(budgets)
    print(
        f"boe replay sweep: {args.n:,} questions, {size_mb:.0f} MB ledger, {len(policies)} policies x "
        f"{len(budgets)} budgets ({runs} runs), {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}; best of {args.repeats}"
    )
    print(f"literal reference: {lit * 1e3:.1f} ms per question for all {runs} runs ({args.sample} sampled questions)")
    print()
    print(
        table(
            rows,
            ["tree", "sweep s", "median s", "load s", "rest s", "ms/question", "literal / sweep"],
        )
    )


if __name__ == "__main__":
    main()
