"""Check the exact request bodies `boe` sends against vLLM's own request model (where vllm is importable).

For each kind of request (generation with n = K, claim extraction, factor judge,
grounded factor judge, whole-response judge) the body is built by the real
`ModelClient` for a vLLM server, validated by vLLM's `ChatCompletionRequest`, and
turned into the `SamplingParams` vLLM would run, once with no server defaults and
once with a generation config like Qwen2.5-VL-7B-Instruct's (``top_k: 1``; vLLM's
default ``--generation-config auto`` applies it to every field a request leaves
out). A last row shows what a request that sets only ``temperature`` would get.

vllm is about 9 GB with torch and CUDA wheels and is not a dependency of boe:

    python3 -m venv /tmp/vllm-venv && /tmp/vllm-venv/bin/pip install vllm
    PYTHONPATH=. /tmp/vllm-venv/bin/python benchmarks/vllm_contract.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: Sampling defaults vLLM reads from a generation_config.json like Qwen2.5-VL-7B-Instruct's (QwenLM/Qwen3-VL
#: issue 722, vllm issue 13322: top_k 1). vLLM takes temperature, top_p, top_k, min_p, repetition_penalty.
QWEN25_VL_DEFAULTS = {"repetition_penalty": 1.05, "temperature": 0.1, "top_k": 1, "top_p": 0.001}


def bodies() -> list[tuple[str, dict[str, Any]]]:
    """The request bodies of each kind, as the client builds them for a vLLM server."""
    from boe.core.calls import ModelCall
    from boe.prompts import figures_block, load_prompt, options_block, with_figure_key
    from boe.sim.dataset import demo_dir
    from boe.tools.client import ModelClient, _Ask, build_messages
    from boe.tools.images import open_image

    img = open_image(sorted((Path(demo_dir()) / "images").glob("*.png"))[0])
    url = img.data_url
    client = ModelClient(base_url="http://127.0.0.1:9/v1", model="Qwen/Qwen2.5-VL-7B-Instruct", server="vllm")
    q = "Which side is the lesion on?"
    opts = options_block(None)
    gen = with_figure_key(load_prompt("generation").render(question=q, options_block=opts), ["0"])
    kinds = [
        ("generation n=16", gen, [url], 16, 1.1, 0),
        (
            "claim extraction",
            load_prompt("claim_extraction").render(question=q, options_block=opts, candidate='{"answer": "left"}'),
            [url],
            1,
            0.0,
            0,
        ),
        (
            "factor judge",
            load_prompt("factor_judge").render(
                view_kind="whole", figure="0", question=q, slot="attribute", value="left"
            ),
            [url],
            1,
            0.0,
            0,
        ),
        (
            "grounded judge",
            load_prompt("grounded_factor_judge").render(
                view_kind="crop",
                figure="0",
                view_image="2",
                view_text="a crop of figure 0 around the left part of the imaged body",
                question=q,
                slot="attribute",
                value="left",
                figures_block=figures_block(["0"]),
            ),
            [url, url],
            1,
            0.0,
            0,
        ),
        (
            "whole judge",
            load_prompt("whole_judge").render(
                figure="0", question=q, options_block=opts, candidate='{"answer": "left"}'
            ),
            [url],
            1,
            0.0,
            0,
        ),
        (
            "answer judge",
            load_prompt("answer_judge").render(
                figure="0", question=q, options_block=opts, figures_block="", candidate='{"answer": "left"}'
            ),
            [url],
            1,
            0.0,
            0,
        ),
    ]
    out = []
    ep = client.endpoint
    for name, prompt, urls, n, temperature, seed in kinds:
        ask = _Ask(
            prompt, build_messages(prompt, urls), temperature, seed, ModelCall("", "", "", "", "", "", 1, 0.0, "", "")
        )
        out.append((name, client._body(ep, ask, n)))
    only_t = dict(out[0][1])
    for k in ("top_p", "top_k", "min_p"):
        only_t.pop(k)
    out.append(("generation, temperature only (before)", only_t))
    return out


def main() -> int:
    """Validate each body and print the sampling vLLM derives; exit 1 if any body is refused."""
    try:
        import vllm
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    except ImportError as exc:
        print(f"vllm is not importable here ({exc}); see this script's docstring", file=sys.stderr)
        return 2
    print(f"vllm {vllm.__version__}")
    print(
        f"{'request':<38} {'defaults':<9} {'ok':<3} {'n':>3} {'temp':>5} {'top_p':>6} {'top_k':>5} "
        f"{'min_p':>5} {'seed':>4} {'max_tok':>7} structured  image uuid"
    )
    bad = 0
    for name, body in bodies():
        try:
            req = ChatCompletionRequest(**json.loads(json.dumps(body)))
        except Exception as exc:  # pydantic ValidationError and the like: the body is refused
            bad += 1
            print(f"{name:<38} REFUSED: {str(exc)[:300]}")
            continue
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 512
        parts = [p for m in req.messages if isinstance(m.get("content"), list) for p in m["content"]]
        uuids = sum(1 for p in parts if isinstance(p, dict) and p.get("uuid"))
        for label, defaults in (("none", {}), ("qwen2.5", QWEN25_VL_DEFAULTS)):
            sp = req.to_sampling_params(max_tokens, defaults)
            so = sp.structured_outputs
            kind = "json" if so is not None and getattr(so, "json", None) is not None else "-"
            print(
                f"{name:<38} {label:<9} {'yes':<3} {sp.n:>3} {sp.temperature:>5.2f} {sp.top_p:>6.3f} "
                f"{sp.top_k:>5} {sp.min_p:>5.2f} {sp.seed if sp.seed is not None else '-':>4} "
                f"{sp.max_tokens:>7} {kind:<11} {uuids}"
            )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
