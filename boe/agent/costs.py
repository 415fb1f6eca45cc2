"""Action costs: the paper's design costs, or costs derived from measured tokens / seconds per action kind.

Every action the agent runs records what it took: ``tokens`` (prompt plus
completion tokens of its model calls; a cached call counts the tokens it
cost when it was first made) and ``seconds`` (wall time of the tool,
segmentation and waiting for a free request slot included). A `CostMeter`
sums them per action kind.

**Measured costs** (``--costs measured`` or a measurement FILE). A
record check calls no model; it is the unit and keeps its design cost
(1). The model-judged kinds with measurements split the design cost they
have together in proportion to what they were measured to take::

    c_k = 1 + s * m_k,    s = sum_K (d_k - 1) / sum_K m_k

where ``m_k`` is the mean tokens (or seconds) of one action of kind ``k``,
``d_k`` its design cost and ``K`` the measured model kinds. So the measured
costs of ``K`` add up to their design costs (a budget keeps its meaning),
while their ratios follow the measurements; a kind not measured yet keeps
its design cost. With the paper's 1/4/4/8 and a whole-response judgement
that reads all K candidates' worth of text, say, the whole response may
come out at 6 and a grounded check at 5.

**Samples** (an adaptive pool, spec section 12). One sample is measured
by the completion tokens (and seconds) of the generation calls divided by
the samples they returned: its prompt is shared by the samples of a call
and served from the prefix cache in later rounds. Its measured cost is what
a judge call of that many tokens costs at the measured kinds' rate,
``c_sample = m_sample * sum_K d_k / sum_K m_k``.

**Costs as text** (``--costs``, ``BOE_COSTS``, ``costs = "..."`` in a file; `costs_fields`): ``paper`` (each kind's
design cost), ``kind=cost`` pairs (``vlm_factor=4,whole_response=8``: the kinds named, every other its default),
``measured[:tokens|:seconds]``, a FILE, a JSON object, or the paper's kinds' numbers by position (``1,4,4,8`` or
``1,4,4,8,8``), read so only while the built-in kinds are exactly the paper's: with one more, a number could be read
for another kind, so a list by position is refused with the names to use. Any of them may carry ``sample=X`` (one
sample of an adaptive pool: ``measured,sample=0.5``, ``1,4,4,8,sample=0.5``, ``sample=0.5``).

Where measurements come from: ``measured`` uses this run's earlier
questions (the first question is planned at design costs, each later one
at the costs measured so far); a FILE fixes them for a whole run (``boe
costs --db DB --run RUN --out FILE`` measures a stored run). The cost a
question was planned with is the ``cost`` of each action in its ledger
record, so offline replays use exactly those numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from boe.errors import ConfigError

#: The measurement row of one sample (`boe.agent.configuration.SAMPLE`).
SAMPLE = "sample"

__all__ = [
    "COST_FORMAT",
    "cost_kinds",
    "costs_fields",
    "model_kinds",
    "CostMeter",
    "QuestionCosts",
    "load_costs_file",
    "measure_run",
    "measured_costs",
]

COST_FORMAT = "boe-costs/1"


def cost_kinds() -> tuple[str, ...]:
    """Every registered action kind, in menu order."""
    from boe.kinds import kind_names

    return kind_names()


def model_kinds() -> tuple[str, ...]:
    """The kinds whose check is a model call (their cost can be measured)."""
    from boe.kinds import kind_names, kind_spec

    return tuple(k for k in kind_names() if kind_spec(k).prompt is not None)


Basis = Literal["tokens", "seconds"]


def costs_fields(text: str) -> dict[str, Any]:
    """The `AgentConfig` cost fields a costs text sets (module docstring); `ConfigError` says what was wrong."""
    from boe.kinds import builtin_kinds, kind_spec

    text, kinds = text.strip(), builtin_kinds()
    items = [p.strip() for p in text.split(",")]
    if any(p.startswith(SAMPLE + "=") for p in items) and not all("=" in p for p in items):
        return _with_sample(text, items)
    mode, _, basis = text.partition(":")
    named = ",".join(f"{k}={kind_spec(k).cost:g}" for k in kinds)
    parts = [p.partition("=") for p in text.split(",")]
    values = _floats([v if sep else k for k, sep, v in parts])
    if text in ("", "paper"):
        return {}
    if mode == "measured" and basis in ("", "tokens", "seconds"):
        return {"cost_mode": "measured", "cost_basis": basis or "tokens"}
    if "=" in text and values is not None and all(sep for _, sep, _ in parts):
        return {"costs": {k.strip(): x for (k, _, _), x in zip(parts, values, strict=True)}}
    if values is None or "=" in text:
        return _costs_file(text, len(parts), named)
    return {"costs": _by_position(values, kinds, named)}


def _with_sample(text: str, items: list[str]) -> dict[str, Any]:
    """The cost of one sample given beside a form that is not kind=cost pairs (measured, numbers by position,
    a FILE): that form's fields, with the sample's cost added."""
    samples = [p for p in items if p.startswith(SAMPLE + "=")]
    if len(samples) > 1:
        raise ConfigError(f"{text!r} gives {SAMPLE}= {len(samples)} times")
    sample = samples[0]
    rest = costs_fields(",".join(p for p in items if p != sample))
    return {**rest, "costs": {**rest.get("costs", {}), SAMPLE: sample.partition("=")[2]}}


def _costs_file(text: str, n_parts: int, named: str) -> dict[str, Any]:
    """The cost fields of a costs file (fixed costs, or measured ones with their basis)."""
    path = Path(text).expanduser()
    if n_parts > 1 or not path.is_file():
        raise ConfigError(f"{text!r} is not paper, measured[:tokens|:seconds], kind=cost pairs ({named}) or a file")
    fixed, _, file_basis = load_costs_file(path)
    if fixed is not None:
        return {"costs": fixed}
    return {"cost_mode": "measured", "cost_basis": file_basis, "cost_file": str(path)}


def _by_position(values: list[float], kinds: Sequence[str], named: str) -> dict[str, float]:
    """Numbers by position over the ledger format's kinds in menu order, refused once more than one reading is
    possible (a built-in kind outside the paper's)."""
    from boe.core.ledger import FORMAT
    from boe.kinds import kind_spec

    paper = [k for k in kinds if kind_spec(k).ledger is not None]  # the kinds of the ledger format, in menu order
    sizes = sorted({sum(kind_spec(k).ledger == FORMAT for k in paper), len(paper)})
    if len(paper) != len(kinds):
        raise ConfigError(f"numbers by position can be read more than one way now that the built-in kinds are "
                          f"{', '.join(kinds)}: name them, e.g. {named}")  # fmt: skip
    if len(values) not in sizes:
        raise ConfigError(
            f"{' or '.join(map(str, sizes))} numbers ({', '.join(paper)}), got {len(values)}; or name them: {named}"
        )
    return dict(zip(paper, values, strict=False))


def _floats(parts: list[str]) -> list[float] | None:
    try:
        return [float(p) for p in parts]
    except ValueError:
        return None


@dataclass
class _Sum:
    actions: int = 0
    tokens: float = 0.0
    seconds: float = 0.0

    def mean(self, basis: Basis) -> float:
        return (self.tokens if basis == "tokens" else self.seconds) / self.actions if self.actions else 0.0


@dataclass
class CostMeter:
    """Tokens and seconds per action kind, summed over the actions that ran."""

    sums: dict[str, _Sum] = field(default_factory=dict)

    def add(self, kind: str, tokens: float, seconds: float) -> None:
        """One action of ``kind`` that took ``tokens`` and ``seconds``."""
        s = self.sums.setdefault(kind, _Sum())
        s.actions += 1
        s.tokens += float(tokens)
        s.seconds += float(seconds)

    def add_samples(self, calls: Iterable[Mapping[str, Any]]) -> int:
        """Add the samples of every generation call (completion tokens and seconds shared by its samples)."""
        n = 0
        for c in calls:
            k = c.get("n") or 0
            if c.get("purpose") != "generation" or not k or c.get("completion_tokens") is None:
                continue
            s = self.sums.setdefault(SAMPLE, _Sum())
            s.actions += int(k)
            s.tokens += float(c["completion_tokens"])
            s.seconds += float(c.get("latency_ms") or 0.0) / 1000.0
            n += int(k)
        return n

    def add_actions(self, actions: Iterable[Mapping[str, Any]]) -> int:
        """Add every action that records a measurement (``tokens`` / ``seconds``); returns how many."""
        n = 0
        for a in actions:
            if a.get("tokens") is None or a.get("seconds") is None:
                continue
            self.add(str(a["kind"]), float(a["tokens"]), float(a["seconds"]))
            n += 1
        return n

    def table(self) -> dict[str, dict[str, float]]:
        """Per kind: actions measured, mean tokens and mean seconds per action."""
        order = cost_kinds()
        return {
            k: {"actions": s.actions, "tokens": round(s.mean("tokens"), 3), "seconds": round(s.mean("seconds"), 4)}
            for k, s in sorted(self.sums.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)
        }

    def to_json(self, basis: Basis = "tokens") -> dict[str, Any]:
        """The measurement FILE format (``boe-costs/1``)."""
        return {"format": COST_FORMAT, "basis": basis, "kinds": self.table()}

    @classmethod
    def from_table(cls, kinds: Mapping[str, Mapping[str, Any]]) -> CostMeter:
        """A meter holding the means of a measurement table."""
        meter = cls()
        known = (*cost_kinds(), SAMPLE)
        for kind, row in kinds.items():
            if kind not in known:
                raise ConfigError(f"cost file: unknown action kind {kind!r}; known: {', '.join(known)}")
            try:
                n = int(row["actions"])
                tokens, seconds = float(row["tokens"]), float(row["seconds"])
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"cost file: kind {kind!r} needs numbers 'actions', 'tokens', 'seconds'") from None
            if n < 0 or tokens < 0 or seconds < 0:
                raise ConfigError(f"cost file: kind {kind!r} has a negative measurement")
            if n:
                meter.sums[kind] = _Sum(n, tokens * n, seconds * n)
        return meter


def measured_costs(design: Mapping[str, float], meter: CostMeter, basis: Basis = "tokens") -> dict[str, float]:
    """Costs from measurements (module docstring): record checks keep their design cost; measured model kinds
    share their design total in proportion to their mean tokens (or seconds); unmeasured kinds keep design."""
    out = {k: float(design[k]) for k in cost_kinds() if k in design}
    judged = model_kinds()
    measured = [k for k in judged if k in out and k in meter.sums and meter.sums[k].actions > 0]
    total = sum(meter.sums[k].mean(basis) for k in measured)
    if not measured or total <= 0:
        return out
    base = min(float(design[k]) for k in out if k not in judged)  # the unit: a check that calls no model
    scale = sum(float(design[k]) - base for k in measured) / total
    if scale <= 0:
        return out
    for k in measured:
        out[k] = round(base + scale * meter.sums[k].mean(basis), 4)
    if SAMPLE in meter.sums and meter.sums[SAMPLE].actions:  # a sample at the measured judges' rate
        out[SAMPLE] = round(meter.sums[SAMPLE].mean(basis) * sum(float(design[k]) for k in measured) / total, 4)
    return out


@dataclass(frozen=True)
class QuestionCosts:
    """The costs one question is planned with, the design costs beside them, and where they came from."""

    used: dict[str, float]
    design: dict[str, float]
    source: str
    measurements: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"used": self.used, "design": self.design, "source": self.source, "measurements": self.measurements}


def load_costs_file(path: str | Path) -> tuple[dict[str, float] | None, CostMeter | None, Basis]:
    """A ``--costs FILE``: fixed costs (``{"costs": {kind: number}}``) or a measurement table
    (``{"format": "boe-costs/1", "basis": "tokens", "kinds": {kind: {actions, tokens, seconds}}}``)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read cost file {str(path)!r}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"cost file {str(path)!r} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"cost file {str(path)!r} must hold a JSON object")
    basis = data.get("basis", "tokens")
    if basis not in ("tokens", "seconds"):
        raise ConfigError(f"cost file {str(path)!r}: basis must be tokens or seconds, got {basis!r}")
    if "costs" in data:
        costs = data["costs"]
        known = cost_kinds()
        if not isinstance(costs, dict) or set(costs) - set(known):
            raise ConfigError(f"cost file {str(path)!r}: 'costs' maps action kinds ({', '.join(known)}) to numbers")
        return {k: float(v) for k, v in costs.items()}, None, basis
    if data.get("format") != COST_FORMAT or not isinstance(data.get("kinds"), dict):
        raise ConfigError(
            f"cost file {str(path)!r}: expected {{'costs': {{...}}}} or a {COST_FORMAT} measurement table "
            "(boe costs --db DB --run RUN --out FILE writes one)"
        )
    return None, CostMeter.from_table(data["kinds"]), basis


def measure_run(store: Any, run: str) -> CostMeter:
    """Tokens and seconds per action kind over every action a stored agent run ran (all of them in a
    full-ledger run, the bought ones in an online run)."""
    meter = CostMeter()
    for line in store.iter_ledger_lines(run):
        rec = json.loads(line)
        meter.add_actions(a for a in rec.get("actions", []) if a.get("observed", True))
        meter.add_samples(rec.get("model_calls") or [])
    return meter


def __getattr__(name: str) -> Any:
    # the tuples of earlier versions, now read off the kind registry
    if name == "KINDS":
        return cost_kinds()
    if name == "MODEL_KINDS":
        return model_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
