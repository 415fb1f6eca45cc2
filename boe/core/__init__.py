"""The method, pure and fast: ledger models, graph, scoring, calibration, policies, replay, metrics.

No I/O beyond reading ledgers and calibration files, no LangGraph, no SQLAlchemy.
"""

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
