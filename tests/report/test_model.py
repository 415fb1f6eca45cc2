"""What a report computes and embeds: settings from the run, the question views, costs, images, escaping."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record_dict
from boe.db import Store
from boe.report import make_question_page, make_report
from boe.report.costs import call_costs, cost_rows
from boe.report.html import _json
from boe.report.questions import anchor


def _records(db: str, run: str) -> dict[str, dict]:
    with Store(db, create=False) as store:
        return {json.loads(x)["question_id"]: json.loads(x) for x in store.iter_ledger_lines(run)}


def test_agent_run_report_replays_it_as_it_ran_and_shows_its_own_evidence(agent_db, tmp_path):
    db, run = agent_db
    files = make_report(tmp_path / "r.html", db=db, run=run)
    rep = files.report
    records = _records(db, run)
    # an online run: raw and the agent's policy, at its budget, under the calibration it ran with
    agent = next(iter(records.values()))["agent"]
    assert rep.settings.online and rep.settings.policies == ["raw", agent["policy"]]
    assert rep.settings.budgets == [agent["budget"]]
    assert rep.settings.calibration.source == agent["calibration"]
    strings = rep.strings
    for view, row in zip(rep.questions, rep.table, strict=True):
        rec = records[view["id"]]
        assert view["sel"] == rec["agent"]["selected"] and view["raw"] == rec["agent"]["raw_selected"]
        assert "agent's run" in strings[view["how"]]
        log = rec["evidence_log"]
        assert [strings[s[0]] for s in view["log"]] == [e["id"] for e in log]
        assert [s[9]["up"] for s in view["log"]] == [e["moved_up"] for e in log]
        crops = [e["view"]["box"] for e in log if e["view"].get("box")]
        assert [s[8][2] for s in view["log"] if s[8] and s[8][2]] == [[float(v) for v in b] for b in crops]
        assert view["img"] and rep.images[view["img"][0]].src.startswith("data:image/webp;base64,")
        ok = rec["candidates"][view["sel"]]["utility"] >= 0.5
        raw_ok = rec["candidates"][view["raw"]]["utility"] >= 0.5
        assert ("rescued" in row.tags) == (ok and not raw_ok)
        assert ("majority-wrong" in row.tags) == (not raw_ok)
    # the replay of the agent's policy at its budget selects what the agent selected
    focus = rep.experiment.run(rep.settings.focus, rep.settings.main_budget)
    assert [int(focus.selected[r]) for r in range(len(rep.questions))] == [v["sel"] for v in rep.questions]
    # its token cost is the sum of the recorded calls; every bought action was observed
    cost = next(c for c in rep.costs if c.dataset == "all" and c.policy == rep.settings.focus)
    total = np.mean(
        [sum(c["prompt_tokens"] + c["completion_tokens"] for c in r["model_calls"]) for r in records.values()]
    )
    assert cost.tokens == pytest.approx(total) and cost.observed == 1.0
    assert not any("never ran" in w for w in rep.warnings)


def test_other_policies_on_an_online_run_are_flagged_as_not_measured(agent_db, tmp_path):
    db, run = agent_db
    rep = make_report(  # the demo ran online with the default policy, bayes
        tmp_path / "r.html", db=db, run=run, policies=["raw", "bayes", "random-factor"], budgets=[16]
    ).report
    observed = {c.policy: c.observed for c in rep.costs if c.dataset == "all"}
    assert observed["bayes"] == 1.0 and observed["random-factor"] < 1.0
    assert any("random-factor at budget 16" in w and "never ran" in w for w in rep.warnings)
    assert not any(w.startswith("bayes at") for w in rep.warnings)


def test_ledger_report_pages_show_the_focus_replay(pool_ledger, tmp_path):
    files = make_report(tmp_path / "r.html", ledgers=[pool_ledger], budgets=[2, 8], resamples=200)
    rep = files.report
    exp = rep.experiment
    assert rep.settings.policies == ["raw", "boe", "random-factor", "whole"] and rep.settings.focus == "boe"
    assert rep.settings.compare == [("boe", "raw"), ("boe", "random-factor")]
    assert {(c.a, c.b, c.budget) for c in exp.comparisons} == {
        (a, b, c) for a, b in rep.settings.compare for c in (2.0, 8.0)
    }
    run = exp.run("boe", 8.0)
    for r, (q, view) in enumerate(zip(exp.questions, rep.questions, strict=True)):
        assert [rep.strings[s[0]] for s in view["log"]] == [q.action_ids[a] for a in run.actions_of(r)]
        assert [s[5] for s in view["log"]] == [{1: "c", -1: "r", 0: "u"}[int(q.outcome[a])] for a in run.actions_of(r)]
        assert view["sel"] == run.selected[r] and view["img"] == []
        assert view["inc"] == ["".join("+" if v > 0 else "-" if v < 0 else "." for v in row) for row in q.incidence]
        assert sorted(view["co"]) == list(range(q.k)) and sorted(view["lo"]) == list(range(len(q.claim_ids)))
    assert all(c.tokens is None and c.seconds is None for c in rep.costs)
    assert any("no images" in w for w in rep.warnings)
    html = files.html.read_text()
    # every question has a row linking to its page element
    for t in rep.table:
        assert f'href="#{t.anchor}"' in html and f'<section class="qpage" id="{t.anchor}" hidden>' in html
    mw = next(r for r in exp.rows if r.policy == "boe" and r.budget == 8.0)
    assert f">{mw.majority_wrong:,}<" in html


def test_call_costs_split_shared_calls_from_the_calls_of_bought_actions():
    rec = {
        "format": "boe-ledger/1",
        "question_id": "q",
        "dataset": "d",
        "candidates": [{"index": 0, "answer": "a", "utility": 1.0}, {"index": 1, "answer": "b", "utility": 0.0}],
        "claims": [{"id": "x=a"}],
        "edges": [{"candidate": 0, "claim": "x=a", "sign": 1}, {"candidate": 1, "claim": "x=a", "sign": -1}],
        "actions": [
            {
                "id": "v:x=a",
                "kind": "vlm_factor",
                "claim": "x=a",
                "cost": 4,
                "group": "vlm",
                "outcome": "confirm",
                "calls": ["c2"],
            },
            {
                "id": "w:1",
                "kind": "whole_response",
                "candidate": 1,
                "cost": 8,
                "group": "whole",
                "outcome": "reject",
                "observed": False,
            },
        ],
        "model_calls": [
            {
                "call_id": "c1",
                "purpose": "generation",
                "prompt_tokens": 100,
                "completion_tokens": 50,
                "latency_ms": 500,
            },
            {"call_id": "c2", "prompt_tokens": 30, "completion_tokens": 5, "latency_ms": 40},
            {"call_id": "c3", "prompt_tokens": 20, "completion_tokens": 2, "latency_ms": 20, "tags": {"action": "w:1"}},
        ],
    }
    q = Question.from_dict(parse_record_dict(json.dumps(rec)), GroupIndex())
    c = call_costs(rec, q)
    assert (c.base_tokens, c.base_seconds) == (150.0, 0.5)
    assert c.action_tokens.tolist() == [35.0, 22.0] and c.observed.tolist() == [True, False]

    class Run:  # one question that bought both actions
        policy, budget = "p", 12.0
        cost = np.array([12.0])

        @staticmethod
        def actions_of(r):
            return np.array([0, 1])

    (row,) = cost_rows([q], [Run], [c])
    assert row.tokens == 150 + 35 + 22 and row.seconds == pytest.approx(0.5 + 0.04 + 0.02)
    assert row.observed == 0.5 and row.mean_cost == 12.0


def test_record_text_cannot_break_out_of_the_page(tmp_path):
    evil = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    rec = {
        "format": "boe-ledger/1",
        "question_id": "q<1>",
        "dataset": "d",
        "reference": "a",
        "task": {"question": evil, "image": None, "options": None},
        "candidates": [
            {"index": 0, "answer": evil, "utility": 1.0},
            {"index": 1, "answer": "b", "utility": 0.0},
            {"index": 2, "answer": "b", "utility": 0.0},
        ],
        "claims": [],
        "edges": [],
        "actions": [],
    }
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    html = make_report(tmp_path / "r.html", ledgers=[path], budgets=[1], resamples=50).html.read_text()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert html.count("<script") == 3  # the two JSON blocks and the page script
    data = re.search(r'<script type="application/json" id="boe-data">(.*?)</script>', html, re.S).group(1)
    assert evil in json.loads(data)["strings"]
    assert _json("</script>") == '"\\u003c/script>"'
    page = make_question_page("q<1>", ledgers=[path], budget=1)
    assert "<script>alert" not in page.html and anchor("d", "q<1>") == "q/d/q<1>"


def test_show_finds_a_question_by_dataset_and_says_which_are_missing(agent_db):
    from boe.errors import ConfigError

    db, run = agent_db
    page = make_question_page("boe-sim-dicom/sim-0-00020-dicom", db=db, run=run)
    assert page.view["ds"] == "boe-sim-dicom" and page.view["menu"] and page.view["calls"]
    assert len(page.view["rawtext"]) == len(page.view["cand"])
    with pytest.raises(ConfigError, match="no question 'nope'"):
        make_question_page("nope", db=db, run=run)


def test_show_without_run_reads_the_most_recent_run_holding_the_question(agent_db, tmp_path):
    """`boe demo` stores two runs; `boe show ID --db boe-demo.db` (the README's command) shows the later and names
    the other."""
    import shutil

    from boe.db import Store
    from boe.errors import ConfigError

    db, run = agent_db
    path = tmp_path / "two.db"
    shutil.copy(db.removeprefix("sqlite:///"), path)
    with Store(path) as store:  # a second run holding one of the questions, stored later
        records = [rec for rec in (json.loads(line) for line in store.iter_ledger_lines(run))]
        later = store.create_run("later")
        from boe.core.ledger import LedgerRecord

        store.save_question(later, LedgerRecord.model_validate(records[1]))
    qid = records[1]["question_id"]
    page = make_question_page(qid, db=str(path))
    assert (page.run, page.also_in) == ("later", [run])
    page = make_question_page(records[0]["question_id"], db=str(path))  # only the first run holds it
    assert (page.run, page.also_in) == (run, [])
    with pytest.raises(ConfigError, match=f"no question 'nope' in any run of sqlite:///{path} \\({run}, later\\)"):
        make_question_page("nope", db=str(path))
