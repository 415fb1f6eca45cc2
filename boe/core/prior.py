"""The prior calibration: channel defaults of the order the paper reports, for datasets nothing was fitted on,
and the `bayes` prior observation model built from them.

Above `boe.core.calibration` and `boe.core.bayes`, the two halves it joins.
"""

from __future__ import annotations

from collections.abc import Collection

from boe.core.bayes import BAYES_KEY, prior_model, with_prior_model
from boe.core.calibration import Calibration, CalibrationInfo, GroupCalibration, Priors

__all__ = ["prior_calibration", "with_prior"]


def _prior_groups(channels: Priors) -> dict[str, GroupCalibration]:
    return {
        ch: GroupCalibration(kappa=k, p={"confirm": p[0], "reject": p[1], "unresolved": p[2]})
        for ch, (k, p) in channels.items()
    }


def prior_calibration(channels: Priors) -> Calibration:
    """The labelled prior: channel defaults only, for datasets nothing was fitted on, and the `bayes` prior
    observation model built from them."""
    return Calibration(
        defaults=_prior_groups(channels),
        extra={BAYES_KEY: prior_model(channels).model_dump(mode="json")},
        info=CalibrationInfo(method="prior", command="boe calibrate --prior"),
        source="the prior calibration (channel kappa of the order the paper reports; not fitted on your data)",
    )


def with_prior(cal: Calibration, dataset: str, channels: Priors, new: Collection[str] = ()) -> tuple[Calibration, bool]:
    """``cal`` with prior channel defaults where it has none; True when the prior stands in for the whole dataset.

    A dataset the calibration does not cover gets every channel's prior; a covered one the ``record`` channel's (a
    record check reads the record, not the images, so its reliability carries across datasets) and those of the
    ``new`` channels (of kinds a calibration need not know) it has no group of.
    """
    prior = _prior_groups(channels)
    whole = not cal.covers(dataset)
    fitted = {k.split("/")[1] for k in cal.groups if "/" in k} | {k.partition("/")[0] for k in cal.defaults}
    add = {
        k: v
        for k, v in prior.items()
        if whole or k.partition("/")[0] == "record" or (k in new and k.partition("/")[0] not in fitted)
    }
    defaults = {**add, **cal.defaults}
    extra = with_prior_model(cal.extra, {k: channels[k] for k in add})
    if defaults == cal.defaults and extra == cal.extra:
        return cal, False
    out = cal.model_copy(update={"defaults": defaults, "extra": extra})
    if whole:
        out.source = f"{cal.source or 'the calibration'} + the prior calibration for dataset {dataset!r}"
    return out, whole
