"""Ledger JSONL in and out of the store: round trips, replay equality, bad lines, resume, kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from boe.core.experiment import load_questions, run_experiment
from boe.core.ledger import iter_ledger
from boe.core.replay import transcripts
from boe.db import Store, export_ledger, import_ledger
from boe.db import models as m
from boe.errors import RecordError, StoreError

from .conftest import factor_records, pool_records, write_jsonl

POLICIES = ["raw", "boe", "boe-factor", "random-factor", "whole", "label-guided"]


def boe_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real `boe` command."""
    out = subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True, timeout=240)
    if check and out.returncode != 0:
        raise AssertionError(f"boe {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out


@pytest.mark.parametrize("kind", ["pool", "factor-code"])
@pytest.mark.parametrize("parallel", [False, True], ids=["in-process", "helper-process"])
def test_import_export_round_trip(store_url: str, tmp_path: Path, kind: str, parallel: bool) -> None:
    recs = pool_records(40, seed=3) if kind == "pool" else factor_records(30, seed=2)
    src = write_jsonl(tmp_path / "in.jsonl", recs)
    with Store(store_url) as store:
        report = import_ledger(store, src, "r", parallel=parallel, batch_rows=2_000)
        assert (report.stored, report.skipped, report.bad) == (len(recs), 0, 0)
        assert export_ledger(store, "r", tmp_path / "out.jsonl") == len(recs)
    out = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in out] == recs  # equal values, same order
    assert out == src.read_text(encoding="utf-8").splitlines()  # in fact the very same lines
    assert tables_view(store_url, "r") == [core_view(r) for r in recs]


def core_view(rec: dict[str, Any]) -> dict[str, Any]:
    """The ledger fields the normalised tables hold, from a record."""
    claims = [c["id"] for c in rec["claims"]]
    return {
        "key": (rec["dataset"], rec["question_id"]),
        "candidates": [(c["index"], c["answer"], c["valid"], c["utility"], c.get("slots")) for c in rec["candidates"]],
        "claims": [(c["id"], c["slot"], c["value"]) for c in rec["claims"]],
        "edges": sorted((claims.index(e["claim"]), e["candidate"], e["sign"]) for e in rec["edges"]),
        "actions": [
            (
                a["id"],
                a["kind"],
                None if a["claim"] is None else claims.index(a["claim"]),
                a["candidate"],
                float(a["cost"]),
                a["group"],
                a["outcome"],
            )
            for a in rec["actions"]
        ],
    }


def tables_view(url: str, run: str) -> list[dict[str, Any]]:
    """The same fields read back from the normalised tables through the ORM models."""
    with Store(url) as store, Session(store.engine) as s:
        run_id = store.get_run(run).id
        questions = s.scalars(select(m.Question).where(m.Question.run_id == run_id).order_by(m.Question.id))
        return [
            {
                "key": (q.dataset, q.source_id),
                "candidates": [(c.idx, c.answer, c.valid, c.utility, c.slots) for c in q.candidates],
                "claims": [(c.claim_id, c.slot, c.value) for c in q.claims],
                "edges": [(e.claim_pos, e.candidate_idx, e.sign) for e in q.edges],
                "actions": [
                    (
                        a.action_id,
                        a.kind,
                        a.claim_pos,
                        a.candidate_idx,
                        a.cost,
                        a.group_name,
                        a.outcome.outcome if a.outcome else None,
                    )
                    for a in q.actions
                ],
            }
            for q in questions
        ]


def _transcripts(records: object) -> list[dict[str, object]]:
    questions, groups = load_questions(records)  # type: ignore[arg-type]
    exp = run_experiment(questions, groups.keys, POLICIES, [1, 4, 16], calibration="crossfit:3", seed=5)
    return [line for run in exp.runs for line in transcripts(run, questions)]


def test_export_then_replay_equals_replay_from_the_store(store_url: str, tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", pool_records(60, seed=4) + factor_records(20, seed=1))
    with Store(store_url) as store:
        import_ledger(store, src, "r")
        export_ledger(store, "r", tmp_path / "exported.jsonl")
        from_store = _transcripts(store.iter_records("r"))
        assert _transcripts(store.iter_record_dicts("r")) == from_store
    assert _transcripts(iter_ledger(tmp_path / "exported.jsonl")) == from_store
    assert len(from_store) == 80 * len(POLICIES) * 3


def test_cli_replay_from_store_equals_replay_from_export(sqlite_url: str, tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", pool_records(50, seed=6))
    boe_cli("import", str(src), "--db", sqlite_url, "--run", "r")
    boe_cli("export", "--db", sqlite_url, "--run", "r", "--out", str(tmp_path / "exported.jsonl"))
    opts = ["--policy", ",".join(POLICIES), "--budget", "1,2,4,8,16", "--calibration", "crossfit:3"]
    a = boe_cli("replay", "--db", sqlite_url, "--run", "r", *opts, "--json", "--transcripts", str(tmp_path / "a.jsonl"))
    b = boe_cli("replay", str(tmp_path / "exported.jsonl"), *opts, "--json", "--transcripts", str(tmp_path / "b.jsonl"))
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert json.loads(a.stdout)["results"] == json.loads(b.stdout)["results"]


def test_bad_records_are_reported_by_line_and_the_good_ones_stored(sqlite_url: str, tmp_path: Path) -> None:
    good = pool_records(4, seed=8)
    lines = [
        json.dumps(good[0]).encode(),  # 1 good
        b'{"format": "boe-ledger/1", "question_id": ',  # 2 not JSON
        b"",  # 3 blank
        json.dumps(good[1]).encode().replace(b"what", b"wh\xffat"),  # 4 not UTF-8
        json.dumps(good[2]).encode(),  # 5 good
        json.dumps({**good[3], "candidates": [{**good[3]["candidates"][0], "utility": 2.0}]}).encode(),  # 6 bad field
        json.dumps(good[0]).encode(),  # 7 duplicate of line 1
        json.dumps({**good[1], "format": "boe-ledger/9"}).encode(),  # 8 unknown format
        json.dumps(good[3]).encode(),  # 9 good
    ]
    src = tmp_path / "mixed.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = boe_cli("import", str(src), "--db", sqlite_url, "--run", "r")
    reported = sorted(
        int(line.split(f"{src}:")[1].split(",")[0].split(":")[0])
        for line in out.stderr.splitlines()
        if f"{src}:" in line
    )
    assert reported == [2, 4, 6, 7, 8], out.stderr
    assert "candidates[0].utility" in out.stderr and "already seen" in out.stderr and "not UTF-8" in out.stderr
    assert "stored 3 question(s)" in out.stdout and "4 bad" not in out.stdout and "5 bad record(s)" in out.stdout
    with Store(sqlite_url) as store:
        assert [r.question_id for r in store.iter_records("r")] == [good[i]["question_id"] for i in (0, 2, 3)]
    # in-process: the same errors reach on_error, with their lines
    errors: list[RecordError] = []
    with Store(tmp_path / "second.db") as store:
        report = import_ledger(store, src, "r", on_error=errors.append)
    assert [e.line for e in errors] == [2, 4, 6, 7, 8] and (report.stored, report.bad) == (3, 5)
    # a file with nothing good fails
    bad_only = tmp_path / "bad.jsonl"
    bad_only.write_text('{"x": 1}\n')
    failed = boe_cli("import", str(bad_only), "--db", sqlite_url, "--run", "r2", check=False)
    assert failed.returncode == 1 and "bad.jsonl:1" in failed.stderr


def test_import_resumes_and_can_replace(store_url: str, tmp_path: Path) -> None:
    recs = pool_records(30, seed=9)
    half = write_jsonl(tmp_path / "half.jsonl", recs[:12])
    full = write_jsonl(tmp_path / "full.jsonl", recs)
    with Store(store_url) as store:
        assert import_ledger(store, half, "r").stored == 12
        again = import_ledger(store, full, "r")
        assert (again.stored, again.skipped) == (18, 12)
        assert [r.question_id for r in store.iter_records("r")] == [r["question_id"] for r in recs]
        changed = [{**r, "reference": "changed"} for r in recs[:5]]
        assert import_ledger(store, write_jsonl(tmp_path / "c.jsonl", changed), "r").skipped == 5
        assert import_ledger(store, tmp_path / "c.jsonl", "r", replace=True).stored == 5
        stored = {r.question_id: r.reference for r in store.iter_records("r")}
        assert len(stored) == 30 and sum(v == "changed" for v in stored.values()) == 5
    with pytest.raises(StoreError, match="no store at"), Store(tmp_path / "none.db", create=False):
        pass


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def assert_whole_questions(url: str, run: str) -> int:
    """Every stored question has all its rows; no question is stored twice. Returns how many are stored."""
    with Store(url) as store:
        records = {(r.dataset, r.question_id): r for r in store.iter_records(run)}
        with store.engine.connect() as conn:
            q = m.Question.__table__
            stmt = select(q.c.id, q.c.dataset, q.c.source_id).where(q.c.run_id == store.get_run(run).id)
            keys = conn.execute(stmt).all()
            assert len(keys) == len({(d, s) for _, d, s in keys}) == len(records)
            pk_key = {pk: (d, s) for pk, d, s in keys}
            for table, attr in (
                (m.Candidate, "candidates"),
                (m.Claim, "claims"),
                (m.Edge, "edges"),
                (m.Action, "actions"),
                (m.Outcome, "actions"),
            ):  # every action of a ledger was run
                t = table.__table__
                counts = dict(conn.execute(select(t.c.question_pk, func.count()).group_by(t.c.question_pk)).all())
                for pk, key in pk_key.items():
                    assert counts.get(pk, 0) == len(getattr(records[key], attr)), (table.__name__, key)
    return len(records)


def test_kill_9_mid_import_then_rerun(store_url: str, tmp_path: Path) -> None:
    n = 500 if store_url.startswith("sqlite") else 250  # 5 or 3 transactions of about 100 questions
    recs = pool_records(n, seed=11)
    src = write_jsonl(tmp_path / "big.jsonl", recs)
    cmd = [sys.executable, "-m", "boe", "import", str(src), "--db", store_url, "--run", "big", "--parallel"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    helpers: list[int] = []
    deadline = time.monotonic() + 120
    with Store(store_url) as watcher:
        while True:
            assert proc.poll() is None, f"the import ended before it could be killed: {proc.stderr.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            helpers = helpers or _children(proc.pid)
            try:
                if watcher.count_questions("big") > 0:  # the first transaction is in
                    break
            except StoreError:
                pass  # the run does not exist yet
            time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert helpers, "the import did not use its parser process"
    stored = assert_whole_questions(store_url, "big")
    assert 0 < stored < n
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in helpers):  # the orphaned parser notices and exits
        assert time.monotonic() < deadline, "the parser process outlived the killed import"
        time.sleep(0.1)
    done = boe_cli("import", str(src), "--db", store_url, "--run", "big")
    assert f"stored {n - stored} question(s), {stored} already there" in done.stdout
    assert assert_whole_questions(store_url, "big") == n
    with Store(store_url) as store:
        export_ledger(store, "big", tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").read_bytes() == src.read_bytes()


def test_import_boe_and_replaying_files_do_not_load_sqlalchemy(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", pool_records(5, seed=1))
    code = (
        "import sys\n"
        "import boe, boe.db, boe.cli\n"
        f"sys.argv = ['boe', 'replay', {str(src)!r}, '--policy', 'raw,boe', '--budget', '4']\n"
        "try:\n"
        "    boe.cli.app(standalone_mode=False)\n"
        "finally:\n"
        "    print('LOADED' if 'sqlalchemy' in sys.modules else 'CLEAN', file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "CLEAN"


def test_parallel_loading_equals_sequential_loading(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from boe.core.loading import load_lines
    from boe.db import loading
    from boe.db.rows import pack_record

    recs = pool_records(30, seed=12) + factor_records(12, seed=4)
    with Store(store_url) as store:
        import_ledger(store, write_jsonl(tmp_path / "in.jsonl", recs), "r")
        with store.engine.begin() as conn:  # two records go bad behind the store's back
            q = m.table(m.Question)
            for qid in (recs[8]["question_id"], recs[33]["question_id"]):
                conn.execute(q.update().where(q.c.source_id == qid).values(record=pack_record("{}")))
        seq_errors: list[RecordError] = []
        seq_q, seq_g = load_lines(store.iter_ledger_lines("r"), f"{store.url}#r", on_error=seq_errors.append)
        monkeypatch.setattr(loading, "PARALLEL_QUESTIONS", 10)
        monkeypatch.setattr(loading, "CHUNK", 7)
        par_errors: list[RecordError] = []
        par_q, par_g = loading.load_questions(store, "r", on_error=par_errors.append, workers=2)
    assert par_g.keys == seq_g.keys and len(par_q) == len(seq_q) == 40
    for a, b in zip(par_q, seq_q, strict=True):
        assert a.question_id == b.question_id
        assert np.array_equal(a.group, b.group) and np.array_equal(a.alpha, b.alpha)
    described = [(e.line, e.question_id, str(e)) for e in seq_errors]
    assert [(e.line, e.question_id, str(e)) for e in par_errors] == described
    assert [e.line for e in par_errors] == [9, 34]
