"""`langgraph.json` served by the real `langgraph dev` (langgraph-cli, in-memory runtime) in strict msgpack mode,
driven by the real `langgraph-sdk` client: a question, an approval interrupt, a veto and a resume.

The served graph's checkpoints go through langgraph-api's own serializer (not one we compile with), so this is
where a state value that is not plain data would warn (``Deserializing unregistered type``) or, in strict mode,
come back as a dict. The model endpoint is the built-in simulator over loopback; the graph stores the run in a
SQLite file (``BOE_DB``) that `boe replay` reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from langgraph_sdk import get_sync_client

from boe.sim.dataset import generate_dataset, load_sim_dataset

pytestmark = pytest.mark.slow  # the server takes several seconds to start

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# the settings of the docs' example (docs/langgraph.md): the simulator's models, K=6, boe at budget 12
SETTINGS = {"judge_model": "boe-sim-judge", "k": "6", "budget": "12", "policy": "boe"}


def documented_command(base_url: str, db: Path, port: int) -> str:
    """The `langgraph dev` command of docs/langgraph.md, on the simulator, a test store and a free port."""
    doc = (REPO / "docs" / "langgraph.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", doc, re.S) if "langgraph dev" in b]
    cmd = " ".join(line.strip().removesuffix("\\") for line in block.splitlines())
    for old, new in (("http://127.0.0.1:8000/v1", base_url), ("my-vlm", "boe-sim-vlm"),
                     ("sqlite:///served.db", f"sqlite:///{db}")):  # fmt: skip
        assert old in cmd, f"docs/langgraph.md: the langgraph dev command no longer has {old!r}"
        cmd = cmd.replace(old, new)
    return f"{cmd} --host 127.0.0.1 --port {port} --no-browser --no-reload"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def group_alive(pgid: int) -> bool:
    """Whether a process of this group is still running (zombies aside), from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(group) == pgid and state != "Z":
            return True
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End the server and everything it started (its own process group), and wait until none of it runs."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None and not group_alive(proc.pid):
                return
            time.sleep(0.1)
    raise AssertionError(f"langgraph dev (process group {proc.pid}) outlived SIGKILL")


@pytest.fixture
def served(sim, tmp_path):
    """`langgraph dev` on a free loopback port, configured for the simulator; (url, log file, store, question)."""
    root = generate_dataset(tmp_path / "data", 3, seed=5, size=64)
    question = load_sim_dataset(root)[0]
    db, log = tmp_path / "runs.db", tmp_path / "server.log"
    port = free_port()
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),  # this environment's langgraph
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "BOE_ROOT": str(root),
        **{f"BOE_{k.upper()}": v for k, v in SETTINGS.items()},
    }
    cmd = documented_command(sim.base_url, db, port)
    assert "LANGGRAPH_STRICT_MSGPACK=true" in cmd and "BOE_RUN=served" in cmd
    # `langgraph dev` resolves the graph's path from where it runs and keeps its own state (.langgraph_api/)
    # there: run it in a folder laid out like the repository (its langgraph.json, its boe package)
    app = tmp_path / "app"
    app.mkdir()
    shutil.copyfile(REPO / "langgraph.json", app / "langgraph.json")
    (app / "boe").symlink_to(REPO / "boe", target_is_directory=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", cmd], cwd=app, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"langgraph dev exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"langgraph dev did not answer:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield url, log, db, question
    finally:
        stop(proc)


def run_leg(client, thread_id: str, **kwargs) -> tuple[list[dict], list[dict]]:
    """Stream one leg of the question; (custom progress events, interrupt values). An error event fails."""
    custom, asked = [], []
    for part in client.runs.stream(thread_id, "boe", stream_mode=["updates", "custom"], **kwargs):
        assert part.event != "error", part.data
        if part.event == "custom":
            custom.append(part.data)
        elif part.event == "updates" and "__interrupt__" in part.data:
            asked.extend(i["value"] for i in part.data["__interrupt__"])
    return custom, asked


def test_served_graph_asks_is_vetoed_resumes_and_stores_a_ledger_that_replays(served, tmp_path):
    url, log, db, q = served
    client = get_sync_client(url=url, api_key=None)
    thread_id = client.threads.create()["thread_id"]
    question = {"question": q["question"], "image_path": q["images"][0], "options": q.get("options")}
    custom, asked = run_leg(client, thread_id, input={**question, "question_id": q["id"]})
    assert asked, "the question did not pause before a purchase: nothing to veto"
    assert [e["event"] for e in custom] == ["generated"]  # nothing bought before the approval
    vetoed = asked[0]["action"]["id"]
    legs = [run_leg(client, thread_id, command={"resume": {"approve": False, "reason": "not this one"}})]
    while legs[-1][1]:  # approve every later purchase
        legs.append(run_leg(client, thread_id, command={"resume": True}))
    events = [e for leg in legs for e in leg[0]]
    assert [e["id"] for e in events if e["event"] == "veto"] == [vetoed]
    bought = [e["id"] for e in events if e["event"] == "purchase"]
    assert bought and vetoed not in bought

    state = client.threads.get_state(thread_id)
    assert not state["next"]
    values = state["values"]
    record, transcript = values["record"], values["transcript"]
    # the answer itself, not only its index
    chosen = values["candidates"][values["selected"]]
    assert values["answer"] == chosen["answer"] and values["answer"] is not None
    assert values["answer_text"] == chosen["answer_text"]
    assert [b["id"] for b in values["bought"]] == bought == transcript["actions"]
    assert values["skipped"] == [{"action": asked[0]["index"], "id": vetoed, "reason": "veto: not this one",
                                  "after": 0}]  # fmt: skip
    assert record["agent"]["selected"] == values["selected"] == events[-1]["selected"]

    text = log.read_text()
    assert "unregistered type" not in text and "Blocked deserialization" not in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]

    # the run the served graph stored replays to the same selection, purchases and veto
    out = tmp_path / "replayed.jsonl"
    done = subprocess.run(
        [str(BIN / "boe"), "replay", "--db", f"sqlite:///{db}", "--run", "served", "--calibration", "run",
         "--policy", SETTINGS["policy"], "--budget", SETTINGS["budget"], "--transcripts", str(out), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (replayed,) = map(json.loads, out.read_text().splitlines())
    assert replayed["question_id"] == values["question_id"] == q["id"]
    assert replayed["selected"] == values["selected"]
    assert replayed["actions"] == transcript["actions"] and replayed["skipped"] == [vetoed]
