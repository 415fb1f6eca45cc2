"""The built-in simulator: synthetic ledgers, synthetic scans and a simulated VLM endpoint.

`import boe.sim` is light; OpenCV and the server load on first use of a name below.

    from boe.sim import serve_in_thread, generate_dataset, load_sim_dataset
    with serve_in_thread() as sim:          # free loopback port
        client = OpenAI(base_url=sim.base_url, api_key="sim")
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "FaultPlan",
    "NoiseConfig",
    "SimHandle",
    "SimModel",
    "demo_dir",
    "generate_dataset",
    "load_facts",
    "load_sim_dataset",
    "make_server",
    "serve_in_thread",
]

_WHERE = {
    "FaultPlan": "boe.sim.faults",
    "NoiseConfig": "boe.sim.percept",
    "SimHandle": "boe.sim.server",
    "SimModel": "boe.sim.model",
    "demo_dir": "boe.sim.dataset",
    "generate_dataset": "boe.sim.dataset",
    "load_facts": "boe.sim.dataset",
    "load_sim_dataset": "boe.sim.dataset",
    "make_server": "boe.sim.server",
    "serve_in_thread": "boe.sim.server",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'boe.sim' has no attribute {name!r}")
