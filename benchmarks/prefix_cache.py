"""How much of a question's image prefill a prefix-caching server (the simulator's vLLM-like accounting) reuses.

One full-ledger question at default settings (K=16, every check run once) against a
fresh simulator: every request of the question opens with the same system text and
figure, so after the first request the figure's tokens come from the prefix cache.
Prints per question the image tokens sent after its first request and the share
served from the cache, for the current layout and, as the baseline in the same run,
the layout before it (the task's instructions in the system message, before the image).

    .venv/bin/python benchmarks/prefix_cache.py [--questions 3] [--k 16]
"""

from __future__ import annotations

import argparse
import asyncio
from contextlib import contextmanager
from dataclasses import replace
from typing import Any


async def one(base_url: str, q: dict[str, Any], k: int) -> None:
    from boe.agent import Agent
    from boe.agent.demo import demo_config

    cfg = demo_config(base_url, k=k, ledger="full")
    async with Agent(cfg) as agent:
        await agent.ask(q["images"][0], q["question"], options=q.get("options"))


@contextmanager
def old_layout(on: bool):
    """The earlier prompt layout: each task's instructions as the system message, before the image."""
    from boe.prompts._loader import PromptTemplate

    original = PromptTemplate.render
    if on:

        def render(self: PromptTemplate, **values: object) -> Any:
            r = original(self, **values)
            task, _, rest = r.user.partition("\n<")  # the user sections start with a marker
            return replace(r, system=task, user="<" + rest)

        PromptTemplate.render = render  # type: ignore[method-assign]
    try:
        yield
    finally:
        PromptTemplate.render = original  # type: ignore[method-assign]


def main() -> None:
    """Run the questions and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--k", type=int, default=16)
    args = ap.parse_args()
    from boe.agent.demo import demo_questions
    from boe.sim.server import serve_in_thread

    print(
        f"{'layout':<8} {'question':<14} {'requests':>8} {'image tok (after 1st)':>21} {'from cache':>10} "
        f"{'share':>7} {'image misses':>12} {'prompt tok':>10} {'cached':>7} {'prefilled':>9}"
    )
    shares = {}
    for layout in ("before", "now"):
        total_img = total_cached = 0
        for q in demo_questions()[: args.questions]:
            with serve_in_thread() as sim, old_layout(layout == "before"):  # a fresh server: an empty cache
                asyncio.run(one(sim.base_url, q, args.k))
                log = list(sim.server.stats.prefix_log)
                stats = sim.stats()
            rest = log[1:]  # after the question's first request (its generation)
            img = sum(r[2] for r in rest)
            cached = sum(r[1] for r in rest)
            total_img += img
            total_cached += cached
            share = cached / img if img else float("nan")
            misses = sum(1 for r in log if r[2] - r[1] >= 16)  # requests that computed an image (part) again
            pt, ct = stats["prompt_tokens"], stats["cached_tokens"]
            print(
                f"{layout:<8} {q['id']:<14} {len(log):>8} {img:>21} {cached:>10} {share:>7.1%} {misses:>12} "
                f"{pt:>10} {ct:>7} {pt - ct:>9}"
            )
        shares[layout] = total_cached / max(1, total_img)
        print(f"{layout:<8} {'all':<14} {'':>8} {total_img:>21} {total_cached:>10} {shares[layout]:>7.1%}")


if __name__ == "__main__":
    main()
