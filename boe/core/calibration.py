"""Calibration of kappa_g and p_g (spec section 4): same-ledger fit, k-fold cross-fit, files.

A calibration maps each group key ``"dataset/group"`` to a discrimination
index kappa and pooled outcome masses p. Groups that a calibration does not
contain get kappa = 0.5 and p = 1/3 for each outcome. Policies may attach
their own fitted parameters under ``extra`` (the `bayes` policy stores its
observation model there), so one file holds everything a replay needs.
"""

from __future__ import annotations

import hashlib
import json
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
    "GroupCalibration",
    "crossfit_folds",
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


class Calibration(BaseModel):
    """kappa and p per calibration group, the cheap kappa, and policy extras."""

    model_config = ConfigDict(extra="ignore")

    format: str = FORMAT
    cheap_kappa: float = Field(default=DEFAULT_CHEAP_KAPPA, gt=0.0, lt=1.0)
    groups: dict[str, GroupCalibration] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None

    def group(self, key: str) -> GroupCalibration:
        """The calibration of one group, or the neutral default for an unseen group."""
        return self.groups.get(key, UNSEEN)

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
