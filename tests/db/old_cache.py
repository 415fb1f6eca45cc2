"""The request made into `data/old-cache.db`, a store whose request cache an earlier boe wrote.

`data/old-cache.db` was built by running this file with boe at commit 025b0dc (before the client and the
store shared one `request_key`): ``python tests/db/old_cache.py tests/db/data/old-cache.db``. It holds
one run and the cache entry of `QUESTION`'s generation request, answered with `REPLIES`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx2

from boe.agent.persist import StoreCache
from boe.db import Store
from boe.prompts import options_block
from boe.prompts._loader import parse_template
from boe.tools.client import ModelClient

BASE_URL = "http://vlm.test/v1"
MODEL = "m"
IMG = "data:image/png;base64,AAAA"
#: Not ASCII on purpose: the client's and the store's keys of earlier versions differed on such text.
QUESTION = "welche Modalität? — ¿qué modalidad? 何の撮影法?"
REPLIES = ['{"answer": "ct"}', '{"answer": "mri"}']
SEED = 3


def prompt() -> Any:
    """The generation prompt for `QUESTION`, from the template as it was when the store was written
    (`data/generation-old-cache.tmpl`: a changed template is a different request, which no old entry answers)."""
    text = (Path(__file__).parent / "data" / "generation-old-cache.tmpl").read_text(encoding="utf-8")
    return parse_template("generation", text).render(question=QUESTION, options_block=options_block(None))


def client(store: Store, handler: Any) -> ModelClient:
    """A client on the store's request cache whose HTTP requests go to ``handler``."""
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return ModelClient(base_url=BASE_URL, model=MODEL, http_client=http, api_key="EMPTY", cache=StoreCache(store))


def _reply(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    choices = [
        {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
        for i, t in enumerate(REPLIES)
    ]
    usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    return httpx2.Response(
        200, json={"id": "c", "object": "chat.completion", "model": body["model"], "choices": choices, "usage": usage}
    )


def make(path: Path) -> str:
    """Write the store at ``path`` with the running boe; returns the cache key it used."""
    with Store(f"sqlite:///{path}") as store:
        store.create_run("old")
        comp = asyncio.run(client(store, _reply).complete(prompt(), [IMG], n=len(REPLIES), temperature=1.0, seed=SEED))
        assert comp.texts == REPLIES and not comp.call.cache_hit
        return comp.call.request_key


if __name__ == "__main__":
    print(make(Path(sys.argv[1])))
