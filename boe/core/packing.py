"""Many `Question`s as a few flat arrays: how a loaded ledger is cached and passed between processes.

`pack_questions` concatenates the arrays of every question (per question,
candidate, claim, action and matrix entry) and their strings into one
`PackedQuestions`; `unpack_questions` gives the questions back as views into
those arrays, their calibration groups renumbered into the caller's
`GroupIndex`. `to_bytes` / `from_bytes` write it as an uncompressed ``.npz``
(read without pickle). The round trip is exact (tests/core/test_packing.py).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
import numpy.typing as npt
from msgspec import msgpack

from boe.core.graph import GroupIndex, Question

__all__ = ["PackedQuestions", "from_bytes", "pack_questions", "to_bytes", "unpack_questions"]

#: Per-candidate, per-action and matrix arrays of a `Question`, with their dtypes.
_CANDIDATE = {"valid": np.bool_, "counts": np.float64, "answer_id": np.int32, "utility": np.float64}
_ACTION = {
    "kind": np.int8,
    "action_claim": np.int32,
    "action_candidate": np.int32,
    "cost": np.float64,
    "group": np.int32,
    "outcome": np.int8,
}
_FORMAT = 1


@dataclass(eq=False)
class PackedQuestions:
    """The questions of one or more ledgers as flat arrays (``arrays``) and strings, groups by local id."""

    arrays: dict[str, npt.NDArray[Any]]
    question_ids: list[str]
    datasets: list[str]
    answers: list[str | None]
    claim_ids: list[str]
    action_ids: list[str]
    group_keys: list[str]

    def __len__(self) -> int:
        return len(self.question_ids)

    def __getstate__(self) -> tuple[dict[str, npt.NDArray[Any]], bytes | list[list[Any]]]:
        """Pickled (from a load worker) with the strings as one msgpack blob: pickle's memo makes its own pass over
        hundreds of thousands of short strings three times as slow. (As lists when one is not UTF-8: a lone
        surrogate the pydantic model let through.)"""
        strings: list[list[Any]] = [
            self.question_ids,
            self.datasets,
            self.answers,
            self.claim_ids,
            self.action_ids,
            self.group_keys,
        ]
        try:
            return self.arrays, msgpack.encode(strings)
        except UnicodeEncodeError:
            return self.arrays, strings

    def __setstate__(self, state: tuple[dict[str, npt.NDArray[Any]], bytes | list[list[Any]]]) -> None:
        self.arrays, strings = state
        if isinstance(strings, bytes):
            strings = msgpack.decode(strings)
        self.question_ids, self.datasets, self.answers, self.claim_ids, self.action_ids, self.group_keys = strings


def pack_questions(questions: list[Question], group_keys: list[str], lines: list[int] | None = None) -> PackedQuestions:
    """The questions' arrays concatenated, with the line of each (1, 2, ... unless given).

    Their group ids index ``group_keys``; the packed ones index only the groups the questions use, in the order
    a sequential load of them registers them.
    """
    qs = questions
    arrays: dict[str, npt.NDArray[Any]] = {
        "line": np.array(range(1, len(qs) + 1) if lines is None else lines, dtype=np.int64),
        "k": np.array([q.k for q in qs], dtype=np.int32),
        "n_actions": np.array([q.n_actions for q in qs], dtype=np.int32),
        "n_claims": np.array([len(q.claim_ids) for q in qs], dtype=np.int32),
    }
    for name, dtype in {**_CANDIDATE, **_ACTION}.items():
        arrays[name] = _concat([getattr(q, name) for q in qs], dtype)
    arrays["incidence"] = _concat([q.incidence.ravel() for q in qs], np.int8)
    arrays["alpha"] = _concat([q.alpha.ravel() for q in qs], np.int8)
    for name in ("unobserved", "skipped"):  # None (all observed, none skipped) is its own flag
        arrays[f"has_{name}"] = np.array([getattr(q, name) is not None for q in qs], dtype=np.bool_)
        arrays[name] = _concat([_flags(getattr(q, name), q.n_actions) for q in qs], np.bool_)
    # format 1.3: each candidate's sample cost (spec section 12); None (not recorded) is its own flag
    arrays["has_sample_cost"] = np.array([q.sample_cost is not None for q in qs], dtype=np.bool_)
    arrays["sample_cost"] = _concat([np.zeros(q.k) if q.sample_cost is None else q.sample_cost for q in qs], np.float64)
    used, first = np.unique(arrays["group"], return_index=True)
    order = used[np.argsort(first, kind="stable")]
    local = np.zeros(len(group_keys), dtype=np.int32)
    local[order] = np.arange(order.size, dtype=np.int32)
    arrays["group"] = local[arrays["group"]]
    return PackedQuestions(
        arrays=arrays,
        question_ids=[q.question_id for q in qs],
        datasets=[q.dataset for q in qs],
        answers=[a for q in qs for a in q.answers],
        claim_ids=[c for q in qs for c in q.claim_ids],
        action_ids=[a for q in qs for a in q.action_ids],
        group_keys=[group_keys[g] for g in order.tolist()],
    )


def unpack_questions(packed: PackedQuestions, groups: GroupIndex) -> list[Question]:
    """The questions back, their groups registered in ``groups`` (in the order a sequential load meets them)."""
    a = packed.arrays
    remap = np.array([groups.id(key) for key in packed.group_keys], dtype=np.int32)
    group = remap[a["group"]] if remap.size else a["group"]
    k, n_act, n_claims = (a[name].tolist() for name in ("k", "n_actions", "n_claims"))
    c_off = [0, *accumulate(k)]
    a_off = [0, *accumulate(n_act)]
    m_off = [0, *accumulate(n_claims)]
    i_off = [0, *accumulate(m * kk for m, kk in zip(n_claims, k, strict=True))]
    x_off = [0, *accumulate(na * kk for na, kk in zip(n_act, k, strict=True))]
    has_unobserved = a["has_unobserved"].tolist()
    has_skipped = a["has_skipped"].tolist()
    has_sample_cost, sample_cost = a["has_sample_cost"].tolist(), a["sample_cost"]
    valid, counts, answer_id, utility = a["valid"], a["counts"], a["answer_id"], a["utility"]
    kind, claim, cand, cost, outcome = (a[n] for n in ("kind", "action_claim", "action_candidate", "cost", "outcome"))
    incidence, alpha, unobserved, skipped = a["incidence"], a["alpha"], a["unobserved"], a["skipped"]
    out = []
    for i, (qid, dataset) in enumerate(zip(packed.question_ids, packed.datasets, strict=True)):
        c0, c1, a0, a1, kk = c_off[i], c_off[i + 1], a_off[i], a_off[i + 1], k[i]
        out.append(
            Question(
                question_id=qid,
                dataset=dataset,
                answers=packed.answers[c0:c1],
                valid=valid[c0:c1],
                counts=counts[c0:c1],
                answer_id=answer_id[c0:c1],
                utility=utility[c0:c1],
                claim_ids=packed.claim_ids[m_off[i] : m_off[i + 1]],
                incidence=incidence[i_off[i] : i_off[i + 1]].reshape(n_claims[i], kk),
                action_ids=packed.action_ids[a0:a1],
                kind=kind[a0:a1],
                action_claim=claim[a0:a1],
                action_candidate=cand[a0:a1],
                cost=cost[a0:a1],
                group=group[a0:a1],
                alpha=alpha[x_off[i] : x_off[i + 1]].reshape(n_act[i], kk),
                outcome=outcome[a0:a1],
                unobserved=unobserved[a0:a1] if has_unobserved[i] else None,
                skipped=skipped[a0:a1] if has_skipped[i] else None,
                sample_cost=sample_cost[c0:c1] if has_sample_cost[i] else None,
            )
        )
    return out


def to_bytes(packed: PackedQuestions) -> bytes:
    """An uncompressed ``.npz``: the arrays, and the strings as UTF-8 JSON in a byte array (a lone surrogate, which
    the pydantic model lets through in an answer, kept as such)."""
    strings = [packed.question_ids, packed.datasets, packed.answers, packed.claim_ids, packed.action_ids]
    text = json.dumps([_FORMAT, packed.group_keys, *strings], ensure_ascii=False, separators=(",", ":"))
    buf = io.BytesIO()
    arrays: dict[str, Any] = {
        "strings": np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8),
        **packed.arrays,
    }
    np.savez(buf, **arrays)
    return buf.getvalue()


def from_bytes(data: bytes) -> PackedQuestions:
    """What `to_bytes` wrote; `ValueError` when it is not that (another format, a damaged file)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        fmt, group_keys, qids, datasets, answers, claim_ids, action_ids = json.loads(
            arrays.pop("strings").tobytes().decode("utf-8", "surrogatepass")
        )
    except Exception as exc:  # a zip, npy or JSON error: all mean "not a packed ledger"
        raise ValueError(f"not packed questions ({type(exc).__name__}: {exc})") from None
    if fmt != _FORMAT:
        raise ValueError(f"packed questions of format {fmt!r}, not {_FORMAT}")
    return PackedQuestions(arrays, qids, datasets, answers, claim_ids, action_ids, group_keys)


def _concat(parts: list[npt.NDArray[Any]], dtype: Any) -> npt.NDArray[Any]:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


def _flags(values: npt.NDArray[np.bool_] | None, n: int) -> npt.NDArray[np.bool_]:
    return np.zeros(n, dtype=np.bool_) if values is None else values
