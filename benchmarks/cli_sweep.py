"""The offline targets, each against a baseline measured in the same run: loading vs the orjson parse floor, the
`boe replay` sweep vs the literal reading of the spec, `boe --version` vs a bare interpreter.

    python benchmarks/cli_sweep.py                         # 6,000 questions, K = 13 (~136 MB), 5 policies x 5 budgets
    python benchmarks/cli_sweep.py --policy boe,boe-factor,random-factor,whole,label-guided
    python benchmarks/cli_sweep.py --baseline 6aeef2c      # also the same figures for an older commit, same run
    python benchmarks/cli_sweep.py --n 1000 --repeats 1    # a quicker look
    python benchmarks/cli_sweep.py --load-only --baseline main   # only the parse floor and the loads

Generates (once, cached) a pool ledger with ``boe sim ledger --kind pool``,
then, for this tree and (with ``--baseline REV``) the package of commit REV
extracted to a temporary folder, each in fresh processes, best of
``--repeats`` (interleaved, so a change in the machine's load hits all alike):

* **parse floor**: reading the file and ``orjson.loads`` of every line, the
  least any loader can do (imports not timed);
* **load**: `boe.core.loading.load_ledgers` as `boe replay` calls it (imports
  not timed), *cold* (``BOE_LEDGER_CACHE=off``: validate and build) and
  *warm* (the ledger cache already holds the file); ratio to the parse floor;
* **sweep**: ``boe replay LEDGER --policy ... --budget ...`` as a user runs
  it (the installed console script; the baseline through the same
  interpreter with its package first on ``PYTHONPATH``), wall time, cold and
  warm. The literal reference (`boe.core.literal.literal_replay`, one
  question and one action at a time, on records validated beforehand,
  calibration fitted once) replays a sample of questions under the same
  policies and budgets in this process; the ratio is literal seconds per
  question (all runs) over the sweep's end-to-end seconds per question
  (start-up and loading included);
  (and the same with the sweep's CPU time, all its processes: the figure
  a busy machine disturbs least);
* **start-up**: ``boe --version`` wall time against ``python -c pass``.

Each load also reports its CPU time (every process: the cold load forks
workers) against the parse floor's. With ``--load-only``, only the parse
floor and the loads are timed.

Targets (issue 27): load (cold and warm) <= 2x the parse floor, sweep >= 100x the
literal reference, ``boe --version`` < 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
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
import inspect, resource, sys, time
from boe.core.loading import load_ledgers
kw = {}
if "cache" in inspect.signature(load_ledgers).parameters:  # not in a tree from before the cache
    from boe.ledger_cache import default_ledger_cache
    kw = {"cache": default_ledger_cache()}
t, c = time.perf_counter(), time.process_time()
qs, groups = load_ledgers([sys.argv[1]], **kw)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(time.perf_counter() - t, len(qs), time.process_time() - c + r.ru_utime + r.ru_stime)
"""
PARSE_SNIPPET = """
import sys, time, orjson
t, c = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as fh:
    n = sum(1 for line in fh if line.strip() and orjson.loads(line) is not None)
print(time.perf_counter() - t, n, time.process_time() - c)
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


def env_for(src: Path | None, cache: Path | None = None) -> dict[str, str]:
    """The environment of a run of the tree at ``src`` (None: this one) with the ledger cache in ``cache``."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["BOE_LEDGER_CACHE"] = str(cache) if cache is not None else "off"
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_cli(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (every process it ran) of a command."""
    t, c = time.perf_counter(), children_cpu()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True, cwd=NEUTRAL)
    return time.perf_counter() - t, children_cpu() - c


def time_snippet(snippet: str, path: Path, env: dict[str, str]) -> float:
    return time_snippet_cpu(snippet, path, env)[0]


def time_snippet_cpu(snippet: str, path: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds a snippet reports (its CPU: the parse floor's, one process, is its wall)."""
    out = subprocess.run(
        [sys.executable, "-c", snippet, str(path)], env=env, capture_output=True, check=True, cwd=NEUTRAL
    ).stdout.split()
    return float(out[0]), float(out[2]) if len(out) > 2 else float(out[0])


def literal_per_question(
    path: Path, n: int, policies: list[str], budgets: list[float], sample: int, seed: int
) -> float:
    """CPU seconds the literal implementation takes per question for every (policy, budget) (one thread, so
    also its wall time on an idle core)."""
    from boe.core.ledger import read_ledger
    from boe.core.literal import literal_calibration, literal_replay

    records = list(read_ledger(path))
    cal = literal_calibration(records)
    rng = random.Random(seed)
    chosen = [records[i] for i in sorted(rng.sample(range(len(records)), min(sample, len(records))))]
    del records
    t = time.process_time()
    for rec in chosen:
        for p in policies:
            for b in budgets:
                literal_replay(rec, cal, p, b, rng=random.Random(0))
    return (time.process_time() - t) / len(chosen)


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
    ap.add_argument("--load-only", action="store_true", help="time only the parse floor and the loads")
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
        trees.insert(0, (f"baseline {args.baseline}", extract(args.baseline, Path(tmp.name) / "src")))

    lit = 0.0 if args.load_only else literal_per_question(path, args.n, policies, budgets, args.sample, args.seed)
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
    caches = {name: Path(tmp.name) / f"cache-{i}" for i, (name, _) in enumerate(trees)}
    for name, src in trees:  # fill each tree's cache (a tree without one just loads)
        time_snippet(LOAD_SNIPPET, path, env_for(src, caches[name]))
    times: dict[tuple[str, str], list[float]] = {}

    def timed(key: tuple[str, str], seconds: float) -> None:
        times.setdefault(key, []).append(seconds)

    for _ in range(args.repeats):
        wall, cpu = time_snippet_cpu(PARSE_SNIPPET, path, env_for(None))
        timed(("", "parse"), wall)
        timed(("", "parse cpu"), cpu)
        timed(("", "python"), time_cli([sys.executable, "-c", "pass"], env_for(None))[0])
        for name, src in trees:
            cold, warm = env_for(src), env_for(src, caches[name])
            for what, env in (("load cold", cold), ("load warm", warm)):
                wall, cpu = time_snippet_cpu(LOAD_SNIPPET, path, env)
                timed((name, what), wall)
                timed((name, what + " cpu"), cpu)
            if args.load_only:
                continue
            for what, env in (("sweep cold", cold), ("sweep warm", warm)):
                wall, cpu = time_cli(cmds[name], env)
                timed((name, what), wall)
                timed((name, what + " cpu"), cpu)
            version = [boe_script(), "--version"] if src is None else [sys.executable, "-c", CLI_SNIPPET, "--version"]
            timed((name, "version"), time_cli(version, cold)[0])
    tmp.cleanup()
    best = {key: min(v) for key, v in times.items()}
    parse, parse_cpu, python = best["", "parse"], best["", "parse cpu"], best["", "python"]
    runs = len(policies) * len(budgets)
    print(
        f"{args.n:,} questions, {size_mb:.0f} MB ledger, {len(policies)} policies x {len(budgets)} budgets "
        f"({runs} runs: {args.policy}), {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
        f"best of {args.repeats}"
    )
    print(
        f"parse floor (orjson, every line): {parse:.2f} s ({parse_cpu:.2f} s CPU); "
        f"python -c pass: {python * 1e3:.0f} ms"
    )
    if not args.load_only:
        print(
            f"literal reference: {lit * 1e3:.1f} ms CPU per question for all {runs} runs "
            f"({args.sample} sampled questions)"
        )
    print()
    rows = []
    figures = [
        ("load cold", "<= 2x parse"),
        ("load warm", "<= 2x parse"),
        ("sweep cold", ">= 100x"),
        ("sweep warm", ">= 100x"),
        ("version", "< 0.3 s"),
    ]
    for name, _ in trees:
        for what, target in figures[:2] if args.load_only else figures:
            sec = best[name, what]
            if what.startswith("load"):
                cpu = best[name, what + " cpu"]
                ratio = f"{sec / parse:.2f}x parse floor; CPU: {cpu / parse_cpu:.2f}x its CPU ({cpu:.2f} s)"
            elif what.startswith("sweep"):
                cpu = best[name, what + " cpu"]
                ratio = (
                    f"{lit / (sec / args.n):.0f}x literal ({sec / args.n * 1e3:.3f} ms/question); "
                    f"CPU: {lit / (cpu / args.n):.0f}x ({cpu:.1f} s)"
                )
            else:
                ratio = f"{sec / python:.1f}x python -c pass"
            label = {"version": "boe --version"}.get(what, what)
            rows.append([name, label, f"{sec:.2f}", f"{statistics.median(times[name, what]):.2f}", ratio, target])
    print(table(rows, ["tree", "figure", "best s", "median s", "against the baseline", "target"]))


if __name__ == "__main__":
    main()
