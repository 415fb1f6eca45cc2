"""One replay experiment: questions x policies x budgets under a calibration plan, with metrics.

This is what `boe replay` runs (from files or from the store) and what the
report draws; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.calibration import Calibration
from boe.core.channels import calibration_warnings
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import LedgerRecord, RecordDict
from boe.core.metrics import Comparison, MetricRow, compare, summarize
from boe.core.policies import FittablePolicy, Policy, make_policy, prepare_fit
from boe.core.pool import PoolSpec, make_pool_policy
from boe.core.replay import CalibrationPlan, ReplayRun, fold_replay, plan_calibration, replay
from boe.core.version import __version__
from boe.errors import ConfigError

__all__ = ["Experiment", "fit_deployable_calibration", "load_questions", "run_experiment"]

REPORT_FORMAT = "boe-replay/1"


def load_questions(
    records: Iterable[LedgerRecord | RecordDict], groups: GroupIndex | None = None
) -> tuple[list[Question], GroupIndex]:
    """Turn records (models or validated dicts) into compact `Question`s; records are not kept."""
    groups = GroupIndex() if groups is None else groups
    return [
        Question.from_dict(r, groups) if isinstance(r, dict) else Question.from_record(r, groups) for r in records
    ], groups


@dataclass(eq=False)
class Experiment:
    questions: list[Question]
    group_keys: list[str]
    plan: CalibrationPlan
    runs: list[ReplayRun]
    raw: ReplayRun
    rows: list[MetricRow]
    comparisons: list[Comparison]
    settings: dict[str, Any] = field(default_factory=dict)
    #: (policy, budget) -> questions whose replay bought an action the stored online run never ran
    unobserved: dict[tuple[str, float], int] = field(default_factory=dict)

    def warnings(self) -> list[str]:
        """Reasons to distrust some figures (printed by the CLI, kept in the JSON)."""
        out = [
            f"{policy} at budget {budget:g} bought, on {n} question(s), checks the stored online run never ran; "
            "their outcomes are placeholders (replay a --ledger full run to compare policies)"
            for (policy, budget), n in self.unobserved.items()
        ]
        if self.plan.mode != "file":  # a file's channels are named when it is chosen (boe.calibrations)
            folds = "" if len(self.plan.calibrations) == 1 else " (in the first fold's fit)"
            out += [f"calibration channels{folds}: {w}" for w in calibration_warnings(self.plan.calibrations[0])]
        return out

    def run(self, policy: str, budget: float) -> ReplayRun:
        for r in self.runs:
            if r.policy == policy and r.budget == float(budget):
                return r
        raise KeyError((policy, budget))

    def deployable_calibration(
        self, *, created: str | None = None, fitted_on: Sequence[str] = (), command: str | None = None
    ) -> Calibration:
        """The calibration to deploy after this experiment: the file it replayed under, as given; after ``fit``
        or ``crossfit`` the plug-in fit on every question (each fold's fit is held out, the deployable one is
        not), with the replayed policies' fitted extras."""
        if self.plan.mode == "file":
            return self.plan.calibrations[0]
        return fit_deployable_calibration(
            self.questions,
            self.group_keys,
            policies=self.settings.get("policies", ()),
            cheap_kappa=self.plan.calibrations[0].cheap_kappa,
            created=created,
            fitted_on=fitted_on,
            command=command,
        )

    def to_json(self) -> dict[str, Any]:
        """The machine-readable summary printed by `boe replay --json`."""
        plan = self.plan
        cal: dict[str, Any] = {"mode": plan.mode}
        if plan.mode.startswith("crossfit"):
            cal.update(folds=plan.folds, seed=plan.seed)
        if plan.mode == "file":
            cal["file"] = plan.calibrations[0].source
        cal["groups"] = {
            k: {"kappa": g.kappa, "p": g.p}
            for k, g in (plan.calibrations[0].groups.items() if len(plan.calibrations) == 1 else [])
        }
        if len(plan.calibrations) > 1:
            cal["groups_by_fold"] = [
                {k: {"kappa": g.kappa, "p": g.p} for k, g in c.groups.items()} for c in plan.calibrations
            ]
        cal["cheap_kappa"] = plan.calibrations[0].cheap_kappa
        return {
            "format": REPORT_FORMAT,
            "boe_version": __version__,
            "settings": self.settings,
            "questions": len(self.questions),
            "labelled_questions": sum(1 for q in self.questions if q.labelled),
            "calibration": cal,
            "bootstrap": {"resamples": self.settings.get("resamples"), "seed": self.settings.get("seed")},
            "results": [r.as_dict() for r in self.rows],
            "comparisons": [c.as_dict() for c in self.comparisons],
            "warnings": self.warnings(),
        }


def run_experiment(
    questions: list[Question],
    group_keys: list[str],
    policies: Sequence[str],
    budgets: Sequence[float],
    *,
    calibration: str | Calibration = "fit",
    cheap_kappa: float | None = None,
    eta: float = 0.0,
    seed: int = 0,
    compare_pairs: Sequence[tuple[str, str]] = (),
    resamples: int = 2000,
    progress: Callable[[int], None] | None = None,
    pool: PoolSpec | None = None,
) -> Experiment:
    """Calibrate, replay every (policy, budget), and compute metrics and comparisons.

    ``pool`` (default: fixed, every candidate) replays the first K candidates or an adaptive pool (spec
    section 12); its policies are wrapped for it, and the next sample's predictive is fitted with them."""
    _check_inputs(questions, policies, budgets, compare_pairs, pool or PoolSpec())
    options = {"eta": eta, "seed": seed}
    spec = pool or PoolSpec()
    built = [make_pool_policy(p, spec, **options) for p in policies]
    # the metrics' baseline: raw BoN on the same pool (fixed or fixed:K), or on every candidate for a pool that
    # draws them (the fixed pool it stands in for)
    base = PoolSpec() if spec.adaptive else spec
    has_raw = any(p.name == "raw" for p in built) and not spec.adaptive
    plan, done, raw_done = _plan_replays(
        questions, group_keys, built, budgets, spec, base, has_raw, calibration, cheap_kappa, seed, progress
    )
    runs = replay(questions, group_keys, built, list(budgets), plan, progress=progress, pool=spec, done=done)
    raw_runs = [r for r in runs if r.policy == "raw"] if has_raw else []
    raw = raw_runs[0] if raw_runs else replay(questions, group_keys, ["raw"], [0.0], plan, pool=base, done=raw_done)[0]
    rows = summarize(questions, runs, raw)
    unobserved = {(r.policy, r.budget): n for r in runs if (n := unobserved_purchases(r, questions))}
    by_key = {(r.policy, r.budget): r for r in runs}
    comps = [
        c
        for a, b in compare_pairs
        for budget in budgets
        for c in compare(questions, by_key[a, float(budget)], by_key[b, float(budget)], resamples, seed)
    ]
    settings = {
        "policies": list(policies),
        "budgets": [float(b) for b in budgets],
        "calibration": calibration if isinstance(calibration, str) else "file",
        "cheap_kappa": cheap_kappa,
        "eta": eta,
        "seed": seed,
        "resamples": resamples,
        "pool": spec.label,
        **({"sample_cost": spec.sample_cost} if spec.adaptive or spec.size is not None else {}),
    }
    return Experiment(questions, group_keys, plan, runs, raw, rows, comps, settings, unobserved)


def _check_inputs(
    questions: Sequence[Question],
    policies: Sequence[str],
    budgets: Sequence[float],
    compare_pairs: Sequence[tuple[str, str]],
    spec: PoolSpec,
) -> None:
    """`ConfigError` for an experiment that cannot run: no questions, a comparison of a policy not replayed, or
    an adaptive pool whose budget cannot pay for a question's first sample."""
    if not questions:
        raise ConfigError("no questions to replay")
    for a, b in compare_pairs:
        for p in (a, b):
            if p not in policies:
                raise ConfigError(f"--compare {a}:{b}: policy {p!r} is not among --policy {','.join(policies)}")
    if spec.adaptive:
        first = max(
            float(q.sample_cost[0]) if q.sample_cost is not None and q.k else spec.sample_cost for q in questions
        )
        low = [b for b in budgets if b < first]
        if low:
            raise ConfigError(
                f"an adaptive pool pays for its samples from the budget: budget {low[0]:g} cannot pay for the "
                f"first sample of every question (the costliest costs {first:g})"
            )


def _plan_replays(
    questions: list[Question],
    group_keys: list[str],
    built: list[Policy],
    budgets: Sequence[float],
    spec: PoolSpec,
    base: PoolSpec,
    has_raw: bool,
    calibration: str | Calibration,
    cheap_kappa: float | None,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[CalibrationPlan, list[Any], list[Any]]:
    """The calibration plan, and the batches already replayed beside a cross-fit's folds (`fold_replay`): the
    policies', and raw BoN's at budget 0 on the ``base`` pool (the metrics' baseline) unless it is among them;
    ``progress`` counts the policies' rows of each fold as its fit and replay arrive."""
    wanted = [(built, [float(b) for b in budgets], spec)]
    if not has_raw:
        wanted.append(([make_pool_policy("raw", base)], [0.0], base))
    then = fitted = None
    if isinstance(calibration, str) and calibration.startswith("crossfit"):
        replays = [fold_replay(questions, group_keys, pols, bs, ps) for pols, bs, ps in wanted]

        def then(rows: npt.NDArray[np.intp], cal: Calibration) -> list[Any]:
            return [f(rows, cal) for f in replays]

        if progress is not None:
            report = progress

            def fitted(got: list[Any]) -> None:
                report(sum(len(res[0]) for res in got[0]))

    plan = _plan(questions, group_keys, built, calibration, cheap_kappa, seed, then, fitted)
    done = [[res for fold in plan.replayed for res in fold[i]] for i in range(len(wanted))]
    plan.replayed = []
    return plan, done[0], done[1] if len(done) > 1 else []


def _plan(
    questions: list[Question],
    group_keys: list[str],
    built: Sequence[Policy],
    calibration: str | Calibration,
    cheap_kappa: float | None,
    seed: int,
    then: Callable[[npt.NDArray[np.intp], Calibration], Any] | None = None,
    fitted: Callable[[Any], None] | None = None,
) -> CalibrationPlan:
    """The calibration of every question: the file's (which must hold the fitted extras of the policies that
    have them), or fitted (``fit``/``crossfit``) with those extras; a cross-fit with extras runs ``then`` on
    each fold's held-out rows as soon as that fold is fitted (its fit takes seconds; the others' fits go on)."""
    fittable = [p for p in built if isinstance(p, FittablePolicy)]
    extra_fits = [p.fit_extra for p in fittable]

    def extra_fit(qs: Sequence[Question], train: np.ndarray, cal: Calibration) -> Calibration:
        for fit in extra_fits:
            cal = fit(qs, train, cal, group_keys)
        return cal

    def prepare(qs: Sequence[Question]) -> None:
        shared: dict[str, Any] = {}  # what the policies' fits share with one another (one family's tables)
        for p in fittable:
            prepare_fit(p, qs, shared)  # optional: what every fold's fit shares, built once

    if not isinstance(calibration, Calibration):
        return plan_calibration(
            questions,
            group_keys,
            calibration,
            cheap_kappa=cheap_kappa,
            seed=seed,
            extra_fit=extra_fit if extra_fits else None,
            prepare=prepare if extra_fits else None,
            then=then if extra_fits else None,  # else the folds are fitted here, and replay forks
            fitted=fitted,
        )
    plan = plan_calibration(questions, group_keys, "file", cheap_kappa=cheap_kappa, file_calibration=calibration)
    missing = [p.name for p in fittable if not p.fit_extra_present(calibration)]
    if missing:
        raise ConfigError(
            f"the calibration file {calibration.source} has no fitted parameters for {', '.join(missing)}; "
            "fit them with --calibration fit|crossfit and --save-calibration"
        )
    return plan


def unobserved_purchases(run: ReplayRun, questions: Sequence[Question]) -> int:
    """Questions on which ``run`` bought an action an online run never ran (its outcome is a placeholder)."""
    n = 0
    for r, q in enumerate(questions):
        if q.unobserved is not None and q.unobserved[run.actions_of(r)].any():
            n += 1
    return n


def fit_deployable_calibration(
    questions: Sequence[Question],
    group_keys: Sequence[str],
    *,
    policies: Sequence[str] = (),
    cheap_kappa: float | None = None,
    created: str | None = None,
    fitted_on: Sequence[str] = (),
    command: str | None = None,
) -> Calibration:
    """The calibration a deployed agent scores with: kappa_g and p_g fitted on every question (spec section 4),
    the fitted extras of those ``policies`` that have them (the `bayes` observation model), and ``info`` saying
    what it covers (``created``: an ISO time the caller read off its clock)."""
    from collections import Counter

    from boe.core.calibration import CalibrationInfo

    if not questions:
        raise ConfigError("no questions to fit a calibration on")
    keys = list(group_keys)
    cal = plan_calibration(questions, keys, "fit", cheap_kappa=cheap_kappa).calibrations[0]
    everyone = np.ones(len(questions), dtype=bool)
    extras = []
    shared: dict[str, Any] = {}  # policies whose fits are the same (`bayes`, `bayes-lookahead`) fit once
    for name in dict.fromkeys(policies):
        pol = make_policy(name)
        if isinstance(pol, FittablePolicy):
            prepare_fit(pol, questions, shared)
            cal = pol.fit_extra(questions, everyone, cal, keys)
            extras.append(name)
    from boe.core.pool import POOL_KEY, fit_predictive, with_sized_model

    # the next sample's predictive (an adaptive pool, spec section 12): from the pools, no labels needed
    cal = cal.model_copy(update={"extra": {**cal.extra, POOL_KEY: fit_predictive(questions).model_dump(mode="json")}})
    if any(q.sample_cost is not None for q in questions):  # sampled pools (format 1.3): the posterior of a pool of k
        cal = with_sized_model(cal, questions, everyone, keys)
    how = "plug-in kappa and p on every question (spec section 4)"
    if extras:
        how += f", and the {', '.join(extras)} observation model"
    how += "; the next sample's predictive of an adaptive pool"
    if "sizes" in cal.extra.get(POOL_KEY, {}):
        how += " and the bayes model of its pool sizes"
    cal.info = CalibrationInfo(
        method="fit",
        how=how,
        datasets=dict(sorted(Counter(q.dataset for q in questions).items())),
        questions=len(questions),
        groups=len(cal.groups),
        created=created,
        fitted_on=list(fitted_on),
        command=command,
    )
    return cal
