"""Calibration of kappa_g and p_g (spec section 4): same-ledger fit, k-fold cross-fit, files.

A calibration maps each group key ``"dataset/group"`` to a discrimination
index kappa and pooled outcome masses p. Groups that a calibration does not
contain get its ``defaults`` entry for the group without the dataset (or for
its channel, the group's first part) when it has one, else kappa = 0.5 and
p = 1/3 for each outcome. Policies may attach their own fitted parameters
under ``extra`` (the `bayes` policy stores its observation model there), so
one file holds everything a replay needs; ``info`` says what the file covers
(datasets, questions, how and when it was fitted).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from boe.errors import CalibrationError

__all__ = [
    "DEFAULT_CHEAP_KAPPA",
    "KAPPA_CLIP",
    "Calibration",
    "CalibrationInfo",
    "GroupCalibration",
    "Priors",
    "crossfit_folds",
    "default_names",
    "describe_calibration",
    "fit_groups",
    "load_calibration",
    "save_calibration",
]

DEFAULT_CHEAP_KAPPA = 0.55
KAPPA_CLIP = (0.001, 0.999)
FORMAT = "boe-calibration/1"


class GroupCalibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kappa: float = Field(gt=0.0, lt=1.0)
    p: dict[str, float]
    pairs: dict[str, float] | None = None  # fit diagnostics (support / contradict pair counts)

    @field_validator("p")
    @classmethod
    def _masses(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = set(v) - {"confirm", "reject", "unresolved"}
        if unknown:
            raise ValueError(f"unknown outcomes {sorted(unknown)}")
        if any(x < 0 for x in v.values()):
            raise ValueError("outcome masses must be >= 0")
        return {o: float(v.get(o, 0.0)) for o in ("confirm", "reject", "unresolved")}

    def masses(self) -> tuple[float, float, float]:
        return (self.p["confirm"], self.p["reject"], self.p["unresolved"])


UNSEEN = GroupCalibration(kappa=0.5, p={"confirm": 1 / 3, "reject": 1 / 3, "unresolved": 1 / 3})


class CalibrationInfo(BaseModel):
    """What a calibration covers and how it was made (written by `boe calibrate` and the shipped fit)."""

    model_config = ConfigDict(extra="allow")

    method: str  # "fit" (plug-in on a full ledger), "prior" (hand-set channel values), ...
    how: str | None = None  # the method in words
    datasets: dict[str, int] = Field(default_factory=dict)  # dataset -> questions fitted on
    questions: int = 0
    groups: int = 0
    created: str | None = None  # ISO time, UTC
    fitted_on: list[str] = Field(default_factory=list)  # runs or files (credential-free)
    command: str | None = None


def default_names(key: str) -> list[str]:
    """The dataset-free default names of a group key "dataset/channel/slot", most specific first."""
    rest = key.partition("/")[2]  # the group without its dataset: "channel/slot" or "channel"
    channel, _, slot = rest.partition("/")
    return [n for n in (rest, f"{channel}/answer" if slot.startswith("answer:") else "", channel) if n]


class Calibration(BaseModel):
    """kappa and p per calibration group, the cheap kappa, channel defaults, policy extras, and what it covers."""

    model_config = ConfigDict(extra="ignore")

    format: str = FORMAT
    cheap_kappa: float = Field(default=DEFAULT_CHEAP_KAPPA, gt=0.0, lt=1.0)
    groups: dict[str, GroupCalibration] = Field(default_factory=dict)
    # dataset-free fallbacks: "channel/slot" or "channel" -> calibration (see the module docstring)
    defaults: dict[str, GroupCalibration] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    info: CalibrationInfo | None = None
    source: str | None = None

    def group(self, key: str) -> GroupCalibration:
        """The calibration of one group: its own, else its dataset-free default, else the neutral default."""
        found = self.groups.get(key)
        if found is not None:
            return found
        for name in default_names(key) if self.defaults else ():
            hit = self.defaults.get(name)
            if hit is not None:
                return hit
        return UNSEEN

    def datasets(self) -> set[str]:
        """The datasets this calibration has fitted groups of."""
        named = set(self.info.datasets) if self.info is not None else set()
        return named | {k.partition("/")[0] for k in self.groups}

    def covers(self, dataset: str) -> bool:
        """Whether the calibration was fitted on (has groups of) ``dataset``."""
        return dataset in self.datasets()

    @property
    def is_prior(self) -> bool:
        """A hand-set prior, not fitted on data."""
        return self.info is not None and self.info.method == "prior"

    def arrays(self, keys: list[str]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """kappa (G,) and p (G, 3) in the order of ``keys``."""
        kappa = np.array([self.group(k).kappa for k in keys], dtype=np.float64)
        p = np.array([self.group(k).masses() for k in keys], dtype=np.float64).reshape(len(keys), 3)
        return kappa, p


def fit_groups(
    stats: npt.NDArray[np.float64], keys: list[str], cheap_kappa: float = DEFAULT_CHEAP_KAPPA, source: str = "fit"
) -> Calibration:
    """kappa_g and p_g from summed group statistics (see `Question.group_stats`)."""
    groups: dict[str, GroupCalibration] = {}
    for key, row in zip(keys, stats, strict=True):
        n_pos, s_pos, n_neg, s_neg, c, r, u = (float(x) for x in row)
        n_act = c + r + u
        if n_act == 0:
            continue  # the group does not occur in the calibration data
        if n_pos > 0 and n_neg > 0:
            kappa = 0.5 + 0.5 * (s_pos / n_pos - s_neg / n_neg)
        else:
            kappa = 0.5
        kappa = min(max(kappa, KAPPA_CLIP[0]), KAPPA_CLIP[1])
        groups[key] = GroupCalibration(
            kappa=kappa,
            p={"confirm": c / n_act, "reject": r / n_act, "unresolved": u / n_act},
            pairs={"support": n_pos, "contradict": n_neg, "actions": n_act},
        )
    return Calibration(cheap_kappa=cheap_kappa, groups=groups, source=source)


#: A prior per channel: kappa and the outcome masses (confirm, reject, unresolved). The channels and their values
#: are the action kinds' (`boe.kinds.KindSpec.priors`, handed in by the layer that knows the kinds).
Priors = Mapping[str, tuple[float, tuple[float, float, float]]]


def describe_calibration(cal: Calibration) -> str:
    """One line: where a calibration comes from and what it covers."""
    src = cal.source or "given"
    info = cal.info
    if info is None:
        names = ", ".join(sorted(cal.datasets())) or "none"
        return f"{src} (datasets {names}; {len(cal.groups)} groups)"
    if info.method == "prior":
        return src
    ds = ", ".join(f"{d} {n}" for d, n in sorted(info.datasets.items())) or "none"
    when = f"; {info.created}" if info.created else ""
    return f"{src} ({info.method} on {info.questions} labelled questions: {ds}; {info.groups} groups{when})"


def crossfit_folds(question_keys: list[str], n_folds: int, seed: int = 0) -> npt.NDArray[np.int32]:
    """Balanced fold ids by question, independent of file order.

    Questions are ordered by sha256("seed:key") and dealt round-robin into
    ``n_folds`` folds.
    """
    if n_folds < 2:
        raise CalibrationError(f"cross-fitting needs at least 2 folds, got {n_folds}")
    if len(question_keys) < n_folds:
        raise CalibrationError(f"cross-fitting with {n_folds} folds needs at least {n_folds} questions")
    digests = [hashlib.sha256(f"{seed}:{k}".encode()).digest() for k in question_keys]
    order = sorted(range(len(question_keys)), key=digests.__getitem__)
    folds = np.empty(len(question_keys), dtype=np.int32)
    for rank, q in enumerate(order):
        folds[q] = rank % n_folds
    return folds


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file (spec section 4 format, plus optional policy extras)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CalibrationError(f"cannot read calibration file {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: a calibration file holds a JSON object")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise CalibrationError(f"{path}: unknown calibration format {fmt!r} (this boe reads {FORMAT!r})")
    try:
        cal = Calibration.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CalibrationError(f"{path}: {where}: {err['msg']}") from exc
    cal.source = str(path)
    return cal


def save_calibration(cal: Calibration, path: str | Path) -> None:
    """Write a calibration file that `load_calibration` reads back identically."""
    data = cal.model_dump(mode="json", exclude_none=True)
    data.pop("source", None)
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
