"""What the README and the help texts promise about exit codes, errors and options, against the installed `boe`.

The doc-tests run the fenced blocks; these check the prose around them: "2: usage or configuration error ... an
input or ledger that cannot be opened", bad input named with its option, and help texts that say what runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from boe.sim.ledgers import pool_ledger
from tests.conftest import write_ledger

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))
ROOT = Path(__file__).resolve().parents[2]


def boe(*args: str, cwd: Path | None = None, **more_env: str) -> subprocess.CompletedProcess[str]:
    assert BOE is not None, "the boe console script is not installed next to this interpreter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOE_")}
    env["COLUMNS"] = "400"  # help texts on one line each
    env.update(more_env)
    return subprocess.run([BOE, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def one_error(res: subprocess.CompletedProcess[str]) -> str:
    """The single `error:` line a mistake prints (README: never a traceback, never a crash log)."""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "internal error" not in res.stderr, res.stderr
    return lines[0]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store holding one imported run `r`."""
    from boe.db import Store, import_ledger

    ledger = write_ledger(tmp_path / "pool.jsonl", pool_ledger(12, seed=3))
    db = tmp_path / "runs.db"
    with Store(db) as s:
        import_ledger(s, [ledger], "r")
    return db


@pytest.mark.parametrize(
    "args",
    [
        ("replay", "--db", "{db}", "--run", "r"),
        ("export", "--db", "{db}", "--run", "r", "--out", "x.jsonl"),
        ("costs", "--db", "{db}", "--run", "r"),
        ("report", "--db", "{db}", "--run", "r", "--out", "r.html"),
        ("show", "q", "--db", "{db}"),
        ("calibrate", "--db", "{db}", "--run", "r", "--out", "c.json"),
    ],
    ids=lambda a: a[0],
)
def test_a_store_that_is_not_there_exits_2_and_is_not_created(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A mistyped --db is an input that cannot be opened (exit 2), and no command that reads creates it."""
    missing = tmp_path / "typo.db"
    res = boe(*(a.format(db=missing) for a in args), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert f"no store at {missing}" in one_error(res)
    assert not missing.exists()  # `boe costs` opened it for writing and left an empty store behind


@pytest.mark.parametrize("command", ["replay", "export", "costs", "report", "calibrate"])
def test_a_run_that_is_not_there_exits_2_naming_the_runs(store: Path, tmp_path: Path, command: str) -> None:
    extra = {"export": ["--out", "x.jsonl"], "report": ["--out", "r.html"], "calibrate": ["--out", "c.json"]}
    res = boe(command, "--db", str(store), "--run", "nope", *extra.get(command, []), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert re.search(r"no run named 'nope' in .*; runs: r$", one_error(res)), res.stderr


def test_calibrate_without_out_says_the_option_is_missing(store: Path) -> None:
    res = boe("calibrate", "--db", str(store), "--run", "r")
    assert res.returncode == 2 and "missing option --out" in one_error(res)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--k", "0"), "Invalid value for '--k'"),  # it wrote records with no candidate, which replay refuses
        (("--costs", "1,a,4,8"), "error: --costs expects four numbers: structured,vlm,grounded,whole; got '1,a,4,8'"),
        (("--vlm-acc", "2"), "--vlm-acc and --unresolved must lie in [0, 1]"),
        (("--factor-cost", "-1"), "error: --factor-cost must be a finite number > 0, got -1"),  # records replay refused
    ],
)
def test_sim_ledger_names_the_bad_option(args: tuple[str, ...], words: str) -> None:
    kind = "factor-code" if "--factor-cost" in args else "pool"
    res = boe("sim", "ledger", "--kind", kind, "--n", "2", *args)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and "internal error" not in res.stderr and not res.stdout, res.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--pool", "adaptive", "--sample-cost", "-1"), "error: --sample-cost must be a finite number >= 0, got -1.0"),
        (
            ("--pool", "adaptive", "--eta", "-1"),
            "error: --eta must be a finite number >= 0 with --pool adaptive, got -1.0",
        ),
        (("--eta", "nan"), "error: --eta must be a finite number, got nan"),
    ],
)
def test_replay_names_the_bad_option(pool_file: Path, args: tuple[str, ...], words: str) -> None:
    res = boe("replay", str(pool_file), *args)  # they said "the sample cost ...", "eta must be ..."
    assert res.returncode == 2
    assert one_error(res) == words


def _help_line(command: list[str], option: str) -> str:
    res = boe(*command, "--help")
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if re.search(rf"│ +{re.escape(option)} ", x))
    return " ".join(line.strip("│ ").split())


def test_show_help_says_which_run_it_reads_without_run(store: Path) -> None:
    """`boe show` without --run reads the most recent run holding the question (README, 'Seeing the evidence')."""
    assert "the most recent run holding the question" in _help_line(["show"], "--run")
    assert "may be left out when the store holds one run" not in _help_line(["show"], "--run")


@pytest.mark.parametrize("command", ["ask", "batch", "demo"])
def test_the_agent_eta_help_names_the_default_policy(command: str) -> None:
    """--eta is passed to the policy and an adaptive pool, not to `boe` alone; the default policy is bayes."""
    text = _help_line([command], "--eta")
    assert "bayes" in text and "adaptive pool" in text and not text.startswith("--eta <float> boe stops"), text


def test_readme_names_the_batch_that_records_an_adaptive_replay(sim, tmp_path: Path) -> None:
    """The README's command for a ledger an adaptive replay needs writes format 1.3; without --pool adaptive, 1.1."""
    from boe.sim.dataset import generate_dataset

    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    claim = re.search(r"`boe batch (--ledger full[^`]*)` records everything an adaptive replay needs", text)
    assert claim is not None
    data = generate_dataset(tmp_path / "data", 2, seed=4, size=64)
    formats = {}
    for name, options in (("readme", claim.group(1).split()), ("fixed", ["--ledger", "full", "--k", "16"])):
        db = tmp_path / f"{name}.db"
        common = ["--base-url", sim.base_url, "--model", "boe-sim", "--db", str(db), "--run", name, "--no-progress"]
        res = boe("batch", str(data), *options, *common, BOE_WORKER_LOCKS=str(tmp_path / "locks"))
        assert res.returncode == 0, res.stderr
        out = boe("export", "--db", str(db), "--run", name, "--out", "-")
        formats[name] = {line.split('"format":"', 1)[1].split('"', 1)[0] for line in out.stdout.splitlines()}
    assert formats["readme"] == {"boe-ledger/1.3"} and "boe-ledger/1.3" not in formats["fixed"], formats


def test_batch_resume_of_a_store_that_is_not_there_creates_nothing(tmp_path: Path) -> None:
    """--resume continues "a run that must exist already": a mistyped --db is refused, not created empty."""
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(tmp_path / "data", 1, seed=4, size=64)
    missing = tmp_path / "typo.db"
    res = boe(
        "batch", str(data), "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--db", str(missing), "--run", "r",
        "--resume", BOE_WORKER_LOCKS=str(tmp_path / "locks"),
    )  # fmt: skip
    assert res.returncode == 2 and f"no store at {missing}" in one_error(res)
    assert not missing.exists()


def test_report_policy_help_names_the_agents_policy() -> None:
    """A full-ledger run's report adds the policy its agent ran (boe/report/model.py resolve_settings)."""
    assert "the policy of the agent that made a full-ledger run" in _help_line(["report"], "--policy")


def test_the_python_api_names_its_own_argument(pool_file: Path) -> None:
    """`boe.fit_calibration(cheap_kappa=...)` is a Python call: its error names the argument, not a CLI option."""
    import boe
    from boe.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^cheap_kappa must lie in \(0, 1\), got 2"):
        boe.fit_calibration(pool_file, cheap_kappa=2)


def test_report_json_holds_the_keys_json_output_md_names(pool_file: Path, tmp_path: Path) -> None:
    """docs/json-output.md's row for boe.report/1 names the keys the document has (it said `html`)."""
    import json

    row = next(x for x in (ROOT / "docs/json-output.md").read_text().splitlines() if x.startswith("| `boe.report/1`"))
    named = set(re.findall(r"`([a-z_]+)`", row.split("|")[3]))
    res = boe("report", "--ledger", str(pool_file), "--out", str(tmp_path / "r.html"), "--json", "--policy", "raw",
              "--budget", "1", "--resamples", "0")  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["schema"] == "boe.report/1" and named and named <= set(data), (named, sorted(data))


def _options(command: str) -> set[str]:
    res = boe(command, "--help")
    return set(re.findall(r"^│ +(--[a-z][a-z0-9-]*)", res.stdout, flags=re.M))


def test_ask_batch_and_demo_take_the_agent_options_but_what_they_set_themselves() -> None:
    """README: one option per AgentConfig field on each, but for what batch and demo set themselves."""
    from boe.agent.configuration import AgentConfig

    ask = _options("ask")
    fields = {f"--{name.replace('_', '-')}" for name in AgentConfig.model_fields} & ask
    assert {"--k", "--budget", "--policy", "--eta", "--base-url", "--dataset", "--root", "--approve"} <= fields
    assert fields - _options("batch") == {"--dataset", "--root", "--approve"}
    own = {"--base-url", "--judge-base-url", "--model", "--dataset", "--root", "--approve"}
    assert fields - _options("demo") == own


def test_out_of_range_values_exit_2(tmp_path: Path, pool_file: Path) -> None:
    """README: a bad value (a number out of its range, an empty list) is a usage error, not a run that reports
    nothing (`boe replay --policy ,` printed empty tables) or replays at a negative budget (`boe show`)."""
    res = boe("replay", str(pool_file), "--policy", ",")
    assert res.returncode == 2 and one_error(res) == "error: --policy: give at least one policy"
    res = boe("show", "pool-7-000000", "--ledger", str(pool_file), "--budget", "-1")
    assert res.returncode == 2 and "Invalid value for '--budget'" in res.stderr, res.stderr
    res = boe("import", str(pool_file), "--db", str(tmp_path / "r.db"), "--run", "")
    assert res.returncode == 2, res.stderr
    assert one_error(res) == "error: a run name (--run) must have 1 to 200 characters, got 0"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"policies": []}, "give at least one policy"),
        ({"budgets": []}, "budgets must be"),
        ({"budgets": -1}, "budgets"),
    ],
)
def test_python_replay_refuses_what_the_command_refuses(pool_file: Path, kwargs: dict, words: str) -> None:
    import boe
    from boe.errors import ConfigError

    with pytest.raises(ConfigError, match=words):
        boe.replay(pool_file, **{"policies": ["raw"], "budgets": [4], **kwargs})


def test_config_help_names_the_variables_of_view_and_frame(tmp_path: Path) -> None:
    """--view and --frame read BOE_GROUNDED_VIEW and BOE_DICOM_FRAME (their fields), not BOE_VIEW: the help says so,
    and the variable it names is the one read."""
    from boe.sim.dataset import generate_dataset

    text = _help_line(["batch"], "--config")
    assert "BOE_GROUNDED_VIEW for --view" in text and "BOE_DICOM_FRAME for --frame" in text, text
    data = generate_dataset(tmp_path / "data", 1, seed=4, size=64)
    args = ["batch", str(data), "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--db", "x.db", "--run", "x"]
    res = boe(*args, "--dry-run", cwd=tmp_path, BOE_GROUNDED_VIEW="bogus")
    assert res.returncode == 2 and one_error(res).startswith("error: BOE_GROUNDED_VIEW (grounded_view)")


def test_demo_names_its_data_option(tmp_path: Path) -> None:
    res = boe("demo", "--data", "nodir", "--db", "d.db", cwd=tmp_path)  # it said "root: dataset root ..."
    assert res.returncode == 2 and one_error(res).startswith("error: --data: nodir is not a folder")
    assert not (tmp_path / "d.db").exists()


def test_sim_serve_help_names_the_judge_model() -> None:
    """README: the simulator serves a second model, boe-sim-judge (`--judge-model boe-sim-judge`)."""
    res = boe("sim", "--help")
    assert "boe-sim-judge" in next(x for x in res.stdout.splitlines() if "│ serve " in x)


def test_an_adaptive_pool_with_a_negative_eta_is_refused_before_any_call(sim, tmp_path: Path) -> None:
    """It failed every question after paying for its samples (exit 1, "run the command again to retry them")."""
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(tmp_path / "data", 2, seed=4, size=64)
    args = ["--base-url", sim.base_url, "--model", "boe-sim", "--db", "e.db", "--run", "e", "--no-progress"]
    res = boe("batch", str(data), *args, "--pool", "adaptive", "--ledger", "online", "--eta", "-1", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "eta (--eta) must be >= 0 with an adaptive pool" in one_error(res)
    assert sim.stats().get("requests", 0) == 0 and not (tmp_path / "e.db").exists()


@pytest.mark.parametrize(("n", "label"), [(5, "crossfit:5"), (3, "crossfit:3"), (1, "fit on these questions")])
def test_the_default_calibration_of_a_small_ledger(tmp_path: Path, n: int, label: str) -> None:
    """README: crossfit:5 by default; fewer than five questions get one fold each, a single question `fit`."""
    import json

    ledger = write_ledger(tmp_path / "small.jsonl", pool_ledger(n, seed=5))
    res = boe("replay", str(ledger), "--policy", "raw", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["calibration"]["label"].startswith(label)


def test_sim_ledger_help_names_the_format_it_writes_with_a_sample_cost() -> None:
    """README (adaptive pool): `boe sim ledger ... --sample-cost 0.25` writes format 1.3."""
    line = next(x for x in boe("sim", "--help").stdout.splitlines() if "│ ledger " in x)
    assert "1.3 with --sample-cost" in line, line  # it named 1.1 only
    res = boe("sim", "ledger", "--kind", "pool", "--n", "1", "--sample-cost", "0.25")
    assert res.stdout.startswith('{"format":"boe-ledger/1.3"'), res.stdout[:80]


@pytest.mark.parametrize("command", [["report"], ["show"]])
def test_image_root_help_says_where_images_come_from_by_default(command: list[str]) -> None:
    """boe/report/source.py: a ledger's own folder, or the dataset folder a stored batch run read (show said nothing,
    report named only the ledger's folder)."""
    text = _help_line(command, "--image-root")
    assert "the first ledger's folder" in text and "the dataset folder a stored batch run read" in text, text


def test_an_unknown_live_policy_lists_only_the_policies_that_can_run_live(tmp_path: Path) -> None:
    """`boe ask --help` lists the live policies; the error for a typo listed label-guided too, which it refuses."""
    res = boe("ask", __file__, "q", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--policy", "bayse")
    line = one_error(res)
    assert res.returncode == 2 and "unknown policy 'bayse'; known: bayes," in line and "label-guided" not in line


def test_replay_and_calibrate_read_a_stores_one_run_without_run(store: Path, tmp_path: Path) -> None:
    """--run may be left out when the store holds one run (as for report and show); with two it names them."""
    import json

    opts = ("--policy", "raw,boe", "--budget", "4", "--json")
    named = boe("replay", "--db", str(store), "--run", "r", *opts)
    alone = boe("replay", "--db", str(store), *opts)
    assert named.returncode == 0 and alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["results"] == json.loads(named.stdout)["results"]
    cal = boe("calibrate", "--db", str(store), "--out", str(tmp_path / "c.json"))
    assert cal.returncode == 0 and (tmp_path / "c.json").is_file(), cal.stderr
    from boe.db import Store, import_ledger

    with Store(store) as s:
        import_ledger(s, [write_ledger(tmp_path / "more.jsonl", pool_ledger(5, seed=4))], "s")
    two = boe("replay", "--db", str(store), *opts)
    assert two.returncode == 2 and "--db needs --run NAME; runs in" in one_error(two) and "r, s" in two.stderr
