"""The method, pure and fast: ledger models, graph, scoring, calibration, policies, replay, metrics.

No I/O beyond reading ledgers and calibration files, no LangGraph, no SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from boe.core.calibration import Calibration, GroupCalibration, load_calibration, save_calibration
    from boe.core.graph import GroupIndex, Question
    from boe.core.ledger import LedgerRecord, parse_record, read_ledger
    from boe.core.policies import POLICIES, Policy, make_policy, register_policy
    from boe.core.replay import CalibrationPlan, ReplayRun, plan_calibration, replay, transcripts
    from boe.core.session import PolicySession, Reveal, Session, Skip
    from boe.core.state import EvidenceState, bind_questions

__all__ = [
    "POLICIES",
    "Calibration",
    "CalibrationPlan",
    "EvidenceState",
    "GroupCalibration",
    "GroupIndex",
    "LedgerRecord",
    "Policy",
    "PolicySession",
    "Question",
    "ReplayRun",
    "Reveal",
    "Session",
    "Skip",
    "bind_questions",
    "load_calibration",
    "make_policy",
    "parse_record",
    "plan_calibration",
    "read_ledger",
    "register_policy",
    "replay",
    "save_calibration",
    "transcripts",
]

#: The re-exported names by module (imported on first access, so ``import boe.core.registry`` stays light).
_EXPORTS = {
    "calibration": ("Calibration", "GroupCalibration", "load_calibration", "save_calibration"),
    "graph": ("GroupIndex", "Question"),
    "ledger": ("LedgerRecord", "parse_record", "read_ledger"),
    "policies": ("POLICIES", "Policy", "make_policy", "register_policy"),
    "replay": ("CalibrationPlan", "ReplayRun", "plan_calibration", "replay", "transcripts"),
    "session": ("PolicySession", "Reveal", "Session", "Skip"),
    "state": ("EvidenceState", "bind_questions"),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'boe.core' has no attribute {name!r}")
    return getattr(importlib.import_module(f"boe.core.{mod}"), name)
