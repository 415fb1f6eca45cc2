"""Which calibration an evaluation of labelled data uses, and what every command says about it.

One rule for `boe replay`, `boe report`, `boe show` and the batch summary:

* no ``--calibration``: a full ledger (or any labelled data) is replayed under ``crossfit:5`` fitted on the
  data itself (each question under a fit on the other folds: held out, the honest number); an online run,
  whose records hold only what its agent bought, under the calibration it ran with (``run``);
* ``fit`` is the paper's in-sample protocol (optimistic; said so);
* ``run`` and a ``FILE`` stay available, with a warning when they do not cover a dataset being evaluated
  or are the hand-set prior.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from boe.errors import ConfigError

if TYPE_CHECKING:
    from boe.core.calibration import Calibration
    from boe.core.graph import Question

__all__ = ["DEFAULT_FOLDS", "CalibrationChoice", "choose_calibration", "fit_calibration", "utc_now"]

DEFAULT_FOLDS = 5


@dataclass
class CalibrationChoice:
    """The calibration to replay under (a mode string or a loaded file), in words, with its warnings."""

    value: str | Calibration
    label: str
    warnings: list[str] = field(default_factory=list)
    default: bool = False
    from_run: bool = False  # the calibration the run's agent scored with

    @property
    def mode(self) -> str:
        """``fit``, ``crossfit:K``, or ``file`` (a loaded calibration, the run's included)."""
        return self.value if isinstance(self.value, str) else "file"


def _crossfit_text(k: int) -> str:
    return f"crossfit:{k} (each question replayed under a calibration fitted on the other {k - 1} folds: held out)"


def choose_calibration(
    arg: str | None,
    questions: Sequence[Question],
    *,
    run_calibration: Mapping[str, Any] | None = None,
    online: bool = False,
) -> CalibrationChoice:
    """Resolve ``--calibration`` (None: the default above) against the questions it will evaluate."""
    from boe.core.calibration import Calibration, describe_calibration, load_calibration
    from boe.core.channels import calibration_warnings

    datasets = sorted({q.dataset for q in questions})
    n = len(questions)
    default = arg is None
    if arg is None:
        if online and isinstance(run_calibration, Mapping):
            arg = "run"
        elif n >= DEFAULT_FOLDS:
            arg = f"crossfit:{DEFAULT_FOLDS}"
        elif n >= 2:
            arg = f"crossfit:{n}"
        else:
            arg = "fit"
    warnings: list[str] = []
    if arg == "fit":
        label = "fit on these questions (in-sample, the paper's protocol)"
        warnings.append(
            "in-sample calibration: kappa and p were fitted on the very questions scored here, so the numbers are "
            "optimistic; the default crossfit:5 holds each question out of its own fit"
        )
        if default:
            warnings.append(f"only {n} question(s): too few to cross-fit")
        return CalibrationChoice("fit", label, warnings, default)
    m = re.fullmatch(r"crossfit(?::(\d+))?", arg)
    if m:
        k = int(m.group(1)) if m.group(1) else DEFAULT_FOLDS
        if k < 2:
            raise ConfigError(f"--calibration {arg}: K must be an integer >= 2")
        if k > n:
            raise ConfigError(f"--calibration {arg}: {n} question(s) cannot be split into {k} folds")
        unlabelled = sum(1 for q in questions if not q.labelled)
        if unlabelled == n and n:
            warnings.append(
                "no question has a reference: a cross-fit on unlabelled questions gives every check kappa 0.5"
            )
        return CalibrationChoice(f"crossfit:{k}", _crossfit_text(k), warnings, default)
    if arg == "run":
        if not isinstance(run_calibration, Mapping):
            raise ConfigError("--calibration run: the run stores no calibration (use crossfit[:K], fit or a FILE)")
        cal = Calibration.model_validate({k: v for k, v in run_calibration.items() if k != "source"})
        cal.source = str(run_calibration.get("source") or "the run's calibration")
        label = f"the run's: {describe_calibration(cal)}"
    elif arg.startswith("crossfit") or arg in ("neutral",):
        raise ConfigError(f"--calibration: unknown mode {arg!r} (crossfit[:K], fit, run or a FILE.json)")
    else:
        cal = load_calibration(arg)
        label = describe_calibration(cal)
    warnings += coverage_warnings(cal, datasets)
    warnings += calibration_warnings(cal)
    return CalibrationChoice(cal, label, warnings, default, from_run=arg == "run")


def coverage_warnings(cal: Calibration, datasets: Sequence[str]) -> list[str]:
    """What a calibration file cannot say about these datasets."""
    out = []
    if cal.is_prior:
        out.append(
            "the calibration is the hand-set PRIOR (channel kappa of the order the paper reports), not fitted on "
            "data: fit one with boe calibrate --db DB --run RUN --out FILE"
        )
    missing = [d for d in datasets if not cal.covers(d)]
    if missing and not cal.is_prior:
        prior = " (its prior channel defaults stand in)" if cal.defaults else " (its checks have kappa 0.5: no weight)"
        out.append(
            f"the calibration does not cover dataset(s) {', '.join(missing)}{prior}; the numbers are not those of a "
            "calibration fitted on this data: use the default (crossfit:5) or boe calibrate"
        )
    return out


def utc_now() -> str:
    """The time a calibration is written, as its ``info.created`` holds it."""
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fit_calibration(
    questions: Sequence[Question],
    group_keys: Sequence[str],
    cheap_kappa: float | None = None,
    *,
    fitted_on: Sequence[str] = (),
    command: str | None = None,
) -> Calibration:
    """The deployable calibration of labelled full-ledger questions (what `boe calibrate` writes): the plug-in
    fit on all of them plus the observation model of every installed policy that fits one (`bayes`)."""
    from boe.core.experiment import fit_deployable_calibration
    from boe.core.policies import POLICIES, _load_plugins

    _load_plugins()
    policies = [name for name in ("bayes",) if name in POLICIES]
    return fit_deployable_calibration(
        questions,
        group_keys,
        policies=policies,
        cheap_kappa=cheap_kappa,
        created=utc_now(),
        fitted_on=fitted_on,
        command=command,
    )
