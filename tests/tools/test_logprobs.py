"""The judge's verdict probability from token logprobs: read as a server tokenises, None when it cannot be read,
and end to end through the simulator over real HTTP with the real openai client."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from boe.prompts import load_prompt
from boe.sim import serve_in_thread
from boe.tools.client import ModelClient
from boe.tools.images import open_image
from boe.tools.logprobs import TOP_LOGPROBS, verdict_probability


def _tok(token: str, logprob: float = 0.0, alts: dict[str, float] | None = None) -> dict:
    entry = {"token": token, "logprob": logprob, "bytes": list(token.encode())}
    entry["top_logprobs"] = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in (alts or {}).items()]
    return entry


def test_the_verdict_token_alternatives_give_the_verdicts_share() -> None:
    # a BPE split as a real tokenizer makes it: the quote glued to the verdict's first piece
    text = '{"verdict": "confirm", "rationale": "a mass."}'
    alts = {' "conf': math.log(0.6), ' "re': math.log(0.3), ' "un': math.log(0.05), ' "maybe': math.log(0.05)}
    content = [_tok('{"'), _tok("verdict"), _tok('":'), _tok(' "conf', math.log(0.6), alts), _tok("irm")]
    content.append(_tok('", "rationale": "a mass."}'))
    assert verdict_probability(text, content, "confirm") == pytest.approx(0.6 / 0.95)
    # the recorded verdict is the reply's own, whatever probability its token had (a sample at T > 0)
    assert verdict_probability(text.replace("confirm", "reject"), None, "reject") is None


@pytest.mark.parametrize(
    ("text", "content"),
    [
        pytest.param('{"verdict": "confirm"}', [_tok('{"verdict": "confirm"}')][:0], id="no-logprobs"),
        pytest.param('{"verdict": "confirm"}', [_tok('{"verdict": "conf'), _tok("irm")], id="tokens-spell-other-text"),
        pytest.param('{"answer": "confirm"}', [_tok('{"answer": "'), _tok("confirm"), _tok('"}')], id="no-verdict-key"),
        pytest.param(
            '{"verdict": "confirm"}',
            [_tok('{"verdict": "'), _tok("confirm", -0.1, {"reject": -2.0}), _tok('"}')][:1] + [_tok("x")],
            id="misaligned",
        ),
    ],
)
def test_what_cannot_be_read_is_none(text: str, content: list) -> None:
    assert verdict_probability(text, content, "confirm") is None


def test_the_recorded_verdict_missing_from_the_alternatives_is_none() -> None:
    text = '{"verdict": "confirm"}'
    content = [_tok('{"verdict": "'), {"token": "confirm", "logprob": 1.5, "top_logprobs": []}, _tok('"}')]
    assert verdict_probability(text, content, "confirm") is None  # a logprob above 0 is no probability


def test_the_simulator_gives_its_own_verdict_distribution_through_the_openai_client() -> None:
    image = open_image(Path(__file__).parents[1] / "datasets" / "fixtures" / "vqa-rad" / "images" / "synpic21604.jpg")
    prompt = load_prompt("factor_judge").render(
        view_kind="whole", figure="0", question="what modality?", slot="modality", value="ct"
    )

    async def go(top: int | None) -> tuple:
        with serve_in_thread() as sim:
            client = ModelClient(base_url=sim.base_url, model="boe-sim-judge")
            try:
                comp = await client.complete(prompt, [image.data_url], seed=3, top_logprobs=top)
            finally:
                await client.aclose()
        return comp

    comp = asyncio.run(go(TOP_LOGPROBS))
    text, content = comp.texts[0], comp.logprobs[0]
    assert "".join(t["token"] for t in content) == text
    verdict = json.loads(text)["verdict"]
    p = verdict_probability(text, content, verdict)
    assert p is not None and 0 < p < 1
    at = next(t for t in content if t["token"] == verdict)
    shares = {a["token"]: math.exp(a["logprob"]) for a in at["top_logprobs"]}
    assert set(shares) == {"confirm", "reject", "unresolved"} and sum(shares.values()) == pytest.approx(1.0)
    assert p == pytest.approx(shares[verdict])
    plain = asyncio.run(go(None))
    assert plain.logprobs is None and plain.texts == comp.texts  # asking for logprobs does not change the reply
