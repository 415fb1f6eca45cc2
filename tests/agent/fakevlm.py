"""A scripted OpenAI-compatible VLM for agent unit tests (httpx2.MockTransport, no network).

Generation returns a fixed pool of replies; factor judges confirm the claims in
``truth`` and reject the others; the whole-response judge confirms candidates whose
answer is ``truth["answer"]``. Every request body is kept for inspection.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable

import httpx2

CLAIM = re.compile(r'<claim slot="(\w+)">(.*?)</claim>', re.S)
CANDIDATE = re.compile(r"<candidate_response>(.*?)</candidate_response>", re.S)


def reply(answer: str | None, **slots: str | None) -> str:
    return json.dumps(
        {"answer": answer, **{s: slots.get(s) for s in ("modality", "region", "plane", "finding", "attribute")}}
    )


class FakeVLM:
    def __init__(
        self,
        pool: list[str],
        truth: dict[str, str],
        judge_status: int = 200,
        fail: Callable[[dict, int], httpx2.Response | None] | None = None,
    ) -> None:
        self.pool = pool
        self.truth = truth
        self.judge_status = judge_status
        self.fail = fail
        self.bodies: list[dict] = []

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self)

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=self.transport())

    def tasks(self) -> list[str]:
        return [b["response_format"]["json_schema"]["name"] for b in self.bodies]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        if self.fail is not None:
            forced = self.fail(body, len(self.bodies))
            if forced is not None:
                return forced
        task = body["response_format"]["json_schema"]["name"]
        user = body["messages"][1]["content"][-1]["text"]
        n = body.get("n", 1)
        if task == "boe_generation":
            texts = [self.pool[i % len(self.pool)] for i in range(n)]
        else:
            if self.judge_status != 200:
                return httpx2.Response(self.judge_status, json={"error": {"message": "judge down"}})
            m = CLAIM.search(CANDIDATE.sub("", user))
            if m:
                ok = self.truth.get(m.group(1)) == html.unescape(m.group(2))
            else:
                cand = html.unescape(CANDIDATE.search(user).group(1))
                try:
                    ok = json.loads(cand).get("answer", "").lower() == self.truth["answer"]
                except json.JSONDecodeError:
                    ok = False
            texts = [json.dumps({"verdict": "confirm" if ok else "reject", "rationale": "scripted"})] * n
        return httpx2.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                    for i, t in enumerate(texts)
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10 * n, "total_tokens": 100 + 10 * n},
            },
        )
