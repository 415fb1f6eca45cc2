"""The agent's one validated configuration: endpoints, sampling, budget, policy, costs, calibration.

Everything a run needs is checked when the object is built (unknown policy, non-positive cost, bad temperature,
missing calibration file), never half way through a question; its sources are adapters in `boe.agent.settings`. A
field with a description is a command-line option (`boe.cli.agent_options`; ``[...]`` ends the text with the default
``--help`` shows). `AgentConfig.public()` is what a run stores: base URLs redacted, no API key.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    field_validator,
    model_validator,
)

from boe.core.calibration import Calibration, load_calibration
from boe.util import redact_urls, split_urls

__all__ = ["DEFAULT_CALIBRATION", "NEUTRAL", "AgentConfig", "Costs", "default_calibration", "several_urls"]

#: The shipped calibration, fitted on a full simulator ledger (see boe/agent/data/README.md).
DEFAULT_CALIBRATION = "sim-calibration.json"
#: The calibration value that means "no fitted groups" (for generating calibration ledgers).
NEUTRAL = "neutral"
#: The key of `Costs` that prices one sample (an adaptive pool draws and pays for samples, spec section 12).
SAMPLE = "sample"


def several_urls(v: Any) -> Any:
    """One base URL or several (a list, or one text separated by spaces or commas) as one text, each URL once."""
    v = " ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
    return " ".join(split_urls(v)) if isinstance(v, str) else v


def _json(want: type, example: str) -> BeforeValidator:
    """A list or mapping given as text (an option, a variable): its JSON."""

    def parse(v: Any) -> Any:
        try:
            out = json.loads(v) if isinstance(v, str) else v
        except json.JSONDecodeError as exc:
            raise ValueError(f"must be a JSON {example}: {exc.msg} at {exc.pos}") from None
        if isinstance(v, str) and not isinstance(out, want):
            raise ValueError(f"must be a JSON {example}; got {type(out).__name__}")
        return out

    return BeforeValidator(parse)


Cost = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Costs(RootModel[dict[str, Cost]]):
    """Design cost of each action kind, every built-in kind's default filled in (the paper's 1 / 4 / 4 / 8; an
    answer-level check 8); other kinds keep their default unless given. ``sample`` prices one sample of an adaptive
    pool (default `boe.core.pool.DEFAULT_SAMPLE_COST`; kept only when given)."""

    model_config = ConfigDict(frozen=True)
    root: Annotated[dict[str, Cost], _json(dict, "object")] = Field(default_factory=dict, validate_default=True)

    @field_validator("root")
    @classmethod
    def _known(cls, v: dict[str, float]) -> dict[str, float]:
        from boe.kinds import builtin_kinds, kind_names, kind_spec

        _known_kinds(tuple(k for k in v if k != SAMPLE))
        out = {k: v.get(k, kind_spec(k).cost) for k in kind_names() if k in builtin_kinds() or k in v}
        return out | ({SAMPLE: v[SAMPLE]} if SAMPLE in v else {})

    def of(self, kind: str) -> float:
        """The cost of ``kind`` (a registered kind not given keeps its spec's default) or of one ``sample``."""
        from boe.core.pool import DEFAULT_SAMPLE_COST
        from boe.kinds import kind_spec

        if kind in self.root:
            return self.root[kind]
        return DEFAULT_SAMPLE_COST if kind == SAMPLE else kind_spec(kind).cost


def _known_kinds(v: tuple[str, ...]) -> tuple[str, ...]:
    from boe.kinds import kind_names

    if bad := [k for k in v if k not in kind_names()]:
        raise ValueError(f"unknown action kinds {bad}; known: {', '.join(kind_names())}")
    return tuple(k for k in kind_names() if k in v)


def _default_kinds() -> tuple[str, ...]:
    from boe.kinds import default_kinds

    return default_kinds()


def _policy(v: str) -> str:
    from boe.core.policies import POLICIES

    if v not in POLICIES:  # a miss discovers plugins first
        raise ValueError(f"unknown policy {v!r}; known: {', '.join(sorted(POLICIES))}")
    if getattr(POLICIES[v], "reads_labels", False):
        raise ValueError(f"policy {v!r} reads evaluation labels and cannot run live")
    return v


def _segmenter(v: str) -> str:
    from boe.tools.segment import SEGMENTERS

    if v != "auto" and v not in SEGMENTERS:  # a miss discovers plugins first
        raise ValueError(f"unknown segmenter {v!r}; known: auto, {', '.join(sorted(SEGMENTERS))}")
    return v


def none_word(v: Any) -> Any:
    """The word none (or null) as None: a field that is then not sent at all."""
    return None if isinstance(v, str) and v.strip().lower() in ("none", "null") else v


def _exists(what: str, directory: bool = False) -> AfterValidator:
    def check(v: str | None) -> str | None:
        if v not in (None, NEUTRAL) and not (Path(v).is_dir() if directory else Path(v).expanduser().is_file()):
            raise ValueError(f"{what} {v!r} {'is not a directory' if directory else 'does not exist'}")
        return v

    return AfterValidator(check)


# numeric bounds are generous for any real server and refuse a typo such as 99999999999999999999 (--help states them)


class AgentConfig(BaseModel):
    """One run of the agent: who generates, who judges, how much evidence, which policy."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    base_url: Annotated[str, BeforeValidator(several_urls)] = Field(
        min_length=1,
        description="Required: the generator's OpenAI-compatible endpoint, e.g. "
        "http://127.0.0.1:8000/v1; given more than once, requests go to the least loaded server (one "
        "server's limits are learnt on their own, one that goes away is routed around).",
    )
    model: str = Field(min_length=1, description="Required: the generator model name.")
    judge_base_url: Annotated[str | None, BeforeValidator(several_urls)] = Field(
        None, description="Judge endpoint (more than once: several servers). [--base-url]"
    )
    judge_model: str | None = Field(None, description="Judge model. [the generator]")
    k: int = Field(16, ge=1, le=256, description="Candidates sampled per question (at most, with an adaptive pool).")
    # the candidate pool: fixed (k samples up front) or adaptive (start with pool_start, draw pool_round at a time
    # up to k while a sample is worth more than a check; samples paid from the budget, spec section 12)
    pool: Literal["fixed", "adaptive"] = Field(
        "fixed",
        description="fixed: sample k up front; adaptive: sample in "
        "rounds and buy checks under one budget, each step whichever is worth "
        "more per unit cost (a sample costs --costs sample=X).",
    )
    pool_start: int = Field(4, ge=1, le=256, description="Adaptive pool: candidates sampled first.")
    pool_round: int = Field(2, ge=1, le=256, description="Adaptive pool: candidates sampled per later round.")
    temperature: float = Field(1.1, ge=0, le=2, description="Generator temperature.")
    judge_temperature: float = Field(0.0, ge=0, le=2, description="Judge temperature.")
    max_tokens: int = Field(512, ge=16, le=2**20, description="Reply tokens asked for at most.")
    seed: int | None = Field(
        0,
        ge=-(2**63),
        le=2**63 - 1,
        description="Sampling seed sent to the endpoint. Range: a 64-bit integer (as vLLM takes it).",
    )
    budget: float = Field(16.0, ge=0, le=1_000_000, description="Evidence budget in design-cost units.")
    policy: Annotated[str, AfterValidator(_policy)] = Field(
        "bayes",
        description="Selection policy: {policies}, or a "
        "plugin's (bayes: the strongest deployable; boe: the "
        "paper's literal controller).",
    )
    eta: float = Field(0.0, description="boe stops when the best value per cost is <= eta.")
    policy_seed: int = Field(0, ge=0, le=2**63 - 1, description="Seed of random-factor's draws. Range: 0 to 2^63-1.")
    costs: Costs = Field(
        default_factory=Costs,
        description="Costs by kind ({kinds}): kind=cost pairs (the kinds not "
        "named keep theirs); the paper's kinds' costs by position (1,4,4,8,8); measured "
        "(measured:seconds for time); or a FILE (boe costs --out FILE); with any of them sample=X "
        "prices one sample of an adaptive pool. [paper]",
    )
    kinds: Annotated[tuple[str, ...], _json(list, """list, e.g. '["vlm_factor"]'"""), AfterValidator(_known_kinds)] = (
        Field(default_factory=_default_kinds)
    )
    calibration: Annotated[str | None, _exists("calibration file")] = Field(
        None, description="Calibration FILE.json, or neutral (every check kappa 0.5). [the shipped one]"
    )
    dataset: str = Field(
        "boe-sim", min_length=1, description="Dataset name: the calibration groups used are DATASET/..."
    )
    root: Annotated[str | None, _exists("dataset root", True)] = Field(
        None, description="Dataset root: images outside it are refused. [none]"
    )
    ledger: Literal["online", "full"] = Field(
        "online", description="online: run the bought checks; full: every check (calibration)."
    )
    extract_claims: bool = True
    concurrency: int = Field(8, ge=1, le=256, description="Model requests in flight at most.")
    timeout: float = Field(
        60.0, gt=0, le=86_400, description="Seconds one model request may take in all, its retries included."
    )
    max_retries: int = Field(4, ge=0, le=20, description="Retries of a failed request (429, 5xx, timeouts).")
    backoff: float = Field(0.5, ge=0, le=600)
    use_n: bool = True
    json_schema: bool = True
    crop_pad: float = Field(default=0.08, ge=0.0, lt=0.5)
    crop_min: float = Field(default=0.3, gt=0.0, le=1.0)
    # costs: design (the numbers in `costs`) or measured (see boe.agent.costs); a file fixes the measurements
    cost_mode: Literal["design", "measured"] = "design"
    cost_basis: Literal["tokens", "seconds"] = "tokens"
    cost_file: Annotated[str | None, _exists("cost file")] = None
    # grounding: the segmenter behind grounded views (sam with a checkpoint, else opencv) and the view shown
    segmenter: Annotated[str, AfterValidator(_segmenter)] = Field(
        "auto",
        min_length=1,
        description="Grounded views' segmenter: {segmenters}; auto: sam with a checkpoint, else opencv.",
    )
    sam_checkpoint: str | None = Field(None, description="segment-anything checkpoint (the sam extra). [none]")
    sam_model: Literal["auto", "vit_b", "vit_l", "vit_h"] = Field(
        "auto", description="SAM model (checked against the checkpoint)."
    )
    sam_device: str = Field("cpu", pattern=r"^(cpu|auto|cuda(:\d+)?)$", description="cpu, cuda, cuda:N or auto.")
    grounded_view: Literal["crop", "mask", "overlay"] = Field(
        "crop", description="Grounded view: crop (the mask's box), mask, overlay."
    )
    dicom_frame: int | None = Field(
        None, ge=0, le=1_000_000, description="Frame of a multi-frame DICOM file. [the middle one]"
    )
    # what a real server is sent (see boe.tools.client): its kind (auto: GET /models), explicit sampling fields
    # that sample the whole distribution (a server's generation_config.json cannot narrow them), extra body fields
    server: Literal["auto", "vllm", "sglang", "openai", "generic"] = Field(
        "auto", description="How requests are worded; auto: from GET /models."
    )
    top_p: Annotated[float | None, BeforeValidator(none_word)] = Field(
        1.0,
        gt=0,
        le=1,
        description="Sampling top_p "
        "sent explicitly; none: not sent (a server that refuses it, e.g. OpenAI's reasoning models).",
    )
    top_k: int = Field(
        -1, ge=-1, le=2**20, description="Sampling top_k sent explicitly; -1: no limit (never sent to OpenAI's API)."
    )
    min_p: float = Field(0.0, ge=0, le=1, description="Sampling min_p sent explicitly.")
    extra_body: Annotated[dict[str, Any], _json(dict, """object, e.g. '{"top_k": 20}'""")] = Field(
        default_factory=dict, description="""JSON merged into generator requests, e.g. '{"top_k": 20}'. [none]"""
    )
    judge_extra_body: Annotated[dict[str, Any], _json(dict, """object, e.g. '{"top_k": 20}'""")] = Field(
        default_factory=dict, description="JSON merged into judge requests. [none]"
    )
    # images: pixels sent at most (larger figures are downscaled; crops come from the full resolution), and the
    # decoded size refused before decoding
    max_pixels: int = Field(
        1024 * 1024, ge=0, le=2**30, description="Pixels of a figure as sent; larger ones are downscaled (0: no limit)."
    )
    pixel_limit: int = Field(
        100_000_000, ge=4096, le=10**12, description="Refuse images declaring more pixels than this."
    )
    # pause before each purchase for a person or a program to approve or veto it (a LangGraph interrupt)
    approve: bool = Field(False, description="Ask before each purchase: Enter buys it, n (or n: reason) vetoes it.")

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        if self.cost_file is not None and self.cost_mode != "measured":
            raise ValueError("a cost measurement file needs cost_mode 'measured'")
        if self.segmenter == "sam" and not self.sam_checkpoint:
            raise ValueError("the sam segmenter needs a checkpoint (--sam-checkpoint PATH)")
        if self.segmenter not in ("auto", "sam") and self.sam_checkpoint:
            raise ValueError(f"a SAM checkpoint was given with the {self.segmenter} segmenter")
        if self.sam_checkpoint is not None:
            from boe.tools.segment_sam import require_sam

            require_sam()  # MissingExtraError (not a ValueError): names the extra to install
            _exists("SAM checkpoint").func(self.sam_checkpoint)  # type: ignore[call-arg]
        return self

    @property
    def judge_url(self) -> str:
        return self.judge_base_url or self.base_url

    @property
    def judge(self) -> str:
        return self.judge_model or self.model

    def load_calibration(self) -> Calibration:
        """The calibration this run scores with (the file given, or the shipped default)."""
        if self.calibration == NEUTRAL:
            return Calibration(source="neutral (every group kappa 0.5: checks carry no weight)", extra={"bayes": {}})
        return default_calibration() if self.calibration is None else load_calibration(self.calibration)

    def public(self) -> dict[str, Any]:
        """The configuration as stored with a run: URLs redacted, nothing secret."""
        data = self.model_dump(mode="json")
        data["base_url"] = redact_urls(self.base_url)
        if self.judge_base_url is not None:
            data["judge_base_url"] = redact_urls(self.judge_base_url)
        return data


@cache
def _default_path() -> str:
    return str(resources.files("boe.agent") / "data" / DEFAULT_CALIBRATION)


def default_calibration() -> Calibration:
    """The shipped calibration (fitted on a full simulator ledger)."""
    cal = load_calibration(_default_path())
    cal.source = f"boe/agent/data/{DEFAULT_CALIBRATION} (shipped, fitted on the simulator)"
    return cal
