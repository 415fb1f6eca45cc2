"""How hard the simulated VLM is: Oracle@K, raw majority, and a claim judge on the whole image vs a crop.

    python benchmarks/sim_difficulty.py                    # 300 questions, seed 2026, T=1.0, K=16
    python benchmarks/sim_difficulty.py --n 100 --k 8 --temperature 0.7 --workers 4

Generates fresh questions, starts `boe sim serve` in this process on a free
loopback port and talks to it over real HTTP with the `openai` client, using
the reference requests of docs/prompt-protocol.md (boe.sim.requests).

* Oracle@K: at least one of the K sampled answers equals the reference.
* Raw majority: the most frequent parsed answer (ties: first seen) equals it.
* Claim judge: for every question whose image has a finding, the factor judge
  rules on `finding=<true finding>` (should confirm) and `finding=<another>`
  (should reject), once on the whole image and once on a crop around the
  finding taken from the sidecar truth (fine for a benchmark; the agent crops
  from the claim's words). Unresolved counts as wrong.

Target ranges (issue #4, at T=1.0, K=16): Oracle@K 0.60-0.95, raw majority
0.30-0.70, crop judge at least 10 points above whole-image judge.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np


def _answers(client: Any, q: dict[str, Any], k: int, temperature: float, seed: int) -> list[str | None]:
    from boe.sim.model import candidate_answer
    from boe.sim.protocol import parse_intent
    from boe.sim.requests import generation_request

    png = Path(q["images"][0]).read_bytes()
    r = client.chat.completions.create(
        model="boe-sim-vlm",
        n=k,
        temperature=temperature,
        seed=seed,
        **generation_request(png, q["question"], q["options"]),
    )
    intent = parse_intent(q["question"], q["options"])
    return [candidate_answer(intent, c.message.content or "") for c in r.choices]


def _crop(path: str, facts: dict[str, Any]) -> bytes:
    img = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
    x0, y0, x1, y1 = facts["lesion_box"]
    cx, cy, half = (x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0) + 16
    h, w = img.shape
    box = (int(max(0, cx - half)), int(max(0, cy - half)), int(min(w, cx + half)), int(min(h, cy + half)))
    return cv2.imencode(".png", img[box[1] : box[3], box[0] : box[2]])[1].tobytes()


def _judge(
    client: Any, q: dict[str, Any], facts: dict[str, Any], temperature: float, seed: int
) -> list[tuple[str, bool]]:
    from boe.sim.requests import factor_verdict_request
    from boe.sim.vocab import LESIONS

    truth = facts["finding"]
    wrong = LESIONS[(LESIONS.index(truth) + 1 + seed % (len(LESIONS) - 1)) % len(LESIONS)]
    views = {"whole": Path(q["images"][0]).read_bytes(), "crop": _crop(q["images"][0], facts)}
    out = []
    for claim, expect in ((truth, "confirm"), (wrong, "reject")):
        for kind, img in views.items():
            r = client.chat.completions.create(
                model="boe-sim-vlm",
                temperature=temperature,
                seed=seed,
                **factor_verdict_request(img, q["question"], "finding", claim, kind=kind, figure=q["image_id"]),
            )
            out.append((kind, json.loads(r.choices[0].message.content)["verdict"] == expect))
    return out


def run(n: int, seed: int, k: int, temperature: float, workers: int) -> dict[str, Any]:
    """Generate, serve, ask; return the measured numbers."""
    import openai

    from boe.sim.dataset import generate_dataset, load_facts, load_sim_dataset
    from boe.sim.server import serve_in_thread

    with tempfile.TemporaryDirectory() as tmp:
        root = generate_dataset(Path(tmp) / "questions", n, seed=seed)
        questions, facts = load_sim_dataset(root), load_facts(root)
        t0 = time.perf_counter()
        with serve_in_thread() as sim:
            client = openai.OpenAI(base_url=sim.base_url, api_key="unused", max_retries=0, timeout=120)

            def one(i: int) -> dict[str, Any]:
                q = questions[i]
                answers = _answers(client, q, k, temperature, seed * 100_003 + i)
                f = facts[q["image_id"]]
                judged = _judge(client, q, f, temperature, seed * 100_003 + i) if f["lesion_box"] else []
                return {"q": q, "answers": answers, "judged": judged}

            with ThreadPoolExecutor(workers) as pool:
                rows = list(pool.map(one, range(len(questions))))
            stats = sim.stats()
        seconds = time.perf_counter() - t0
    per: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    judge: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        ref, answers = row["q"]["answer"], row["answers"]
        counts = Counter(a for a in answers if a is not None)
        top = counts.most_common(1)[0][0] if counts else None
        per[row["q"]["asks"]].append((ref in answers, top == ref))
        for kind, ok in row["judged"]:
            judge[kind].append(ok)
    allrows = [x for v in per.values() for x in v]
    return {
        "n": len(allrows),
        "k": k,
        "temperature": temperature,
        "seed": seed,
        "oracle": float(np.mean([o for o, _ in allrows])),
        "majority": float(np.mean([m for _, m in allrows])),
        "per_asks": {
            a: (len(v), float(np.mean([o for o, _ in v])), float(np.mean([m for _, m in v])))
            for a, v in sorted(per.items())
        },
        "judge_whole": float(np.mean(judge["whole"])),
        "judge_crop": float(np.mean(judge["crop"])),
        "judge_n": len(judge["whole"]),
        "seconds": seconds,
        "requests": stats["requests"],
        "prompt_tokens": stats["prompt_tokens"],
        "completion_tokens": stats["completion_tokens"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=4, help="concurrent HTTP clients")
    args = ap.parse_args()
    r = run(args.n, args.seed, args.k, args.temperature, args.workers)
    print(
        f"boe-sim-vlm (a simulator) difficulty: {r['n']} questions, seed {r['seed']}, T={r['temperature']}, K={r['k']}"
    )
    print(f"{'metric':34s} {'value':>7s}  target")
    print(f"{'Oracle@K':34s} {r['oracle']:7.3f}  0.60-0.95")
    print(f"{'raw-majority accuracy':34s} {r['majority']:7.3f}  0.30-0.70")
    print(f"{'claim judge, whole image':34s} {r['judge_whole']:7.3f}")
    print(f"{'claim judge, crop around finding':34s} {r['judge_crop']:7.3f}  >= whole + 0.10")
    print(f"{'  (claims judged per view)':34s} {r['judge_n']:7d}")
    print("\nper question type:  n   Oracle@K  majority")
    for asks, (cnt, orc, maj) in r["per_asks"].items():
        print(f"  {asks:14s} {cnt:4d}   {orc:6.2f}   {maj:6.2f}")
    print(
        f"\n{r['requests']} requests, {r['prompt_tokens']} prompt + {r['completion_tokens']} completion tokens, "
        f"{r['seconds']:.1f} s"
    )


if __name__ == "__main__":
    main()
