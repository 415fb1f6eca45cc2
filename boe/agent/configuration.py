"""The agent's one validated configuration: endpoints, sampling, budget, policy, costs, calibration, each checked when
it is built, never half way through a question. Its sources are layers in `boe.agent.settings`; a field made with `opt`
is a command-line option (`boe.cli.agent_options`). `AgentConfig.public()` is what a run stores (URLs redacted)."""

from __future__ import annotations

import json
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
from boe.core.policies import POLICIES
from boe.core.pool import DEFAULT_SAMPLE_COST
from boe.kinds import builtin_kinds, default_kinds, kind_names, kind_spec
from boe.tools.segment import SEGMENTERS
from boe.util import redact_urls, split_urls

__all__ = ["DEFAULT_CALIBRATION", "NEUTRAL", "AgentConfig", "Costs", "default_calibration", "opt", "several_urls"]

#: The shipped calibration, fitted on a full simulator ledger (see boe/agent/data/README.md).
DEFAULT_CALIBRATION = "sim-calibration.json"
#: The calibration value that means "no fitted groups" (for generating calibration ledgers).
NEUTRAL = "neutral"
#: The key of `Costs` that prices one sample (an adaptive pool draws and pays for samples, spec section 12).
SAMPLE = "sample"
_EXAMPLE: dict[type, str] = {dict: """object, e.g. '{"top_k": 20}'""", list: """list, e.g. '["vlm_factor"]'"""}


def opt(default: Any, help: str, **limits: Any) -> Any:
    """A command-line option's field: ``help`` is its --help text (``[...]`` ends it with the default shown); bounds
    are generous for any real server and refuse a typo such as 99999999999999999999."""
    return Field(default, description=help, **limits)


def several_urls(v: Any) -> Any:
    """One base URL or several (a list, or one text separated by spaces or commas) as one text, each URL once."""
    v = " ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
    return " ".join(split_urls(v)) if isinstance(v, str) else v


def none_word(v: Any) -> Any:
    """The word none (or null) as None: a field that is then not sent at all."""
    return None if isinstance(v, str) and v.strip().lower() in ("none", "null") else v


def _json(want: type) -> BeforeValidator:
    """A list or mapping given as text (an option, a variable): its JSON."""

    def parse(v: Any) -> Any:
        try:
            out = json.loads(v) if isinstance(v, str) else v
        except json.JSONDecodeError as exc:
            raise ValueError(f"must be a JSON {_EXAMPLE[want]}: {exc.msg} at {exc.pos}") from None
        if isinstance(v, str) and not isinstance(out, want):
            raise ValueError(f"must be a JSON {_EXAMPLE[want]}; got {type(out).__name__}")
        return out

    return BeforeValidator(parse)


def _known_kinds(v: tuple[str, ...]) -> tuple[str, ...]:
    if bad := [k for k in v if k not in kind_names()]:
        raise ValueError(f"unknown action kinds {bad}; known: {', '.join(kind_names())}")
    return tuple(k for k in kind_names() if k in v)


def _policy(v: str) -> str:
    if v not in POLICIES:  # a miss discovers plugins first
        live = sorted(p for p in POLICIES if not getattr(POLICIES[p], "reads_labels", False))
        raise ValueError(f"unknown policy {v!r}; known: {', '.join(live)}")  # label-guided cannot run live
    if getattr(POLICIES[v], "reads_labels", False):
        raise ValueError(f"policy {v!r} reads evaluation labels and cannot run live")
    return v


def _segmenter(v: str) -> str:
    if v != "auto" and v not in SEGMENTERS:  # a miss discovers plugins first
        raise ValueError(f"unknown segmenter {v!r}; known: auto, {', '.join(sorted(SEGMENTERS))}")
    return v


def _exists(what: str, directory: bool = False) -> AfterValidator:
    def check(v: str | None) -> str | None:
        if v not in (None, NEUTRAL) and not (Path(v).is_dir() if directory else Path(v).expanduser().is_file()):
            raise ValueError(f"{what} {v!r} {'is not a directory' if directory else 'does not exist'}")
        return v

    return AfterValidator(check)


Cost = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Costs(RootModel[dict[str, Cost]]):
    """Design cost of each action kind: every built-in kind's default filled in (the paper's 1 / 4 / 4 / 8; an
    answer-level check 8), another kind's kept unless given; ``sample`` prices one sample of an adaptive pool."""

    model_config = ConfigDict(frozen=True)
    root: Annotated[dict[str, Cost], _json(dict)] = Field(default_factory=dict, validate_default=True)

    @field_validator("root")
    @classmethod
    def _known(cls, v: dict[str, float]) -> dict[str, float]:
        _known_kinds(tuple(k for k in v if k != SAMPLE))
        out = {k: v.get(k, kind_spec(k).cost) for k in kind_names() if k in builtin_kinds() or k in v}
        return out | ({SAMPLE: v[SAMPLE]} if SAMPLE in v else {})

    def of(self, kind: str) -> float:
        """The cost of ``kind`` (a registered kind not given keeps its spec's default) or of one ``sample``."""
        if kind in self.root:
            return self.root[kind]
        return DEFAULT_SAMPLE_COST if kind == SAMPLE else kind_spec(kind).cost


class AgentConfig(BaseModel):
    """One run of the agent: who generates, who judges, how much evidence, which policy."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    base_url: Annotated[str, BeforeValidator(several_urls)] = opt(
        ..., "Required: the generator's OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1; given more than "
        "once, requests go to the least loaded server (one server's limits are learnt on their own, one that goes "
        "away is routed around).", min_length=1
    )  # fmt: skip
    model: str = opt(..., "Required: the generator model name.", min_length=1)
    judge_base_url: Annotated[str | None, BeforeValidator(several_urls)] = opt(
        None, "Judge endpoint (more than once: several servers). [--base-url]"
    )
    judge_model: str | None = opt(None, "Judge model. [the generator]")
    k: int = opt(16, "Candidates sampled per question (at most, with an adaptive pool).", ge=1, le=256)
    # adaptive: start with pool_start, draw pool_round at a time up to k (samples paid from the budget, spec §12)
    pool: Literal["fixed", "adaptive"] = opt(
        "fixed", "fixed: sample k up front; adaptive: sample in rounds and buy checks under one budget, each step "
        "whichever is worth more per unit cost (a sample costs --costs sample=X)."
    )  # fmt: skip
    pool_start: int = opt(4, "Adaptive pool: candidates sampled first.", ge=1, le=256)
    pool_round: int = opt(2, "Adaptive pool: candidates sampled per later round.", ge=1, le=256)
    temperature: float = opt(1.1, "Generator temperature.", ge=0, le=2)
    judge_temperature: float = opt(0.0, "Judge temperature.", ge=0, le=2)
    max_tokens: int = opt(512, "Reply tokens asked for at most.", ge=16, le=2**20)
    seed: int | None = opt(0, "Sampling seed sent to the endpoint. Range: a 64-bit integer (as vLLM takes it).",
                           ge=-(2**63), le=2**63 - 1)  # fmt: skip
    budget: float = opt(16.0, "Evidence budget in design-cost units.", ge=0, le=1_000_000)
    policy: Annotated[str, AfterValidator(_policy)] = opt(
        "bayes", "Selection policy: {policies}, or a plugin's (bayes: the strongest deployable; boe: the paper's "
        "literal controller)."
    )  # fmt: skip
    eta: float = opt(0.0, "Price of evidence: the policy (bayes, boe and their variants) stops when the best value "
                     "per cost is <= eta; an adaptive pool prices its draws and checks instead (a check also pays "
                     "while the pick could be wrong with more than eta per unit of its cost).")  # fmt: skip
    policy_seed: int = opt(0, "Seed of random-factor's draws. Range: 0 to 2^63-1.", ge=0, le=2**63 - 1)
    costs: Costs = Field(default_factory=Costs, description="Costs by kind ({kinds}): kind=cost pairs (the kinds "
        "not named keep theirs); the paper's kinds' costs by position (1,4,4,8,8); measured (measured:seconds for "
        "time); or a FILE (boe costs --out FILE); with any of them sample=X prices one sample of an adaptive pool. "
        "[paper]")  # fmt: skip
    kinds: Annotated[tuple[str, ...], _json(list), AfterValidator(_known_kinds)] = Field(default_factory=default_kinds)
    calibration: Annotated[str | None, _exists("calibration file")] = opt(
        None, "Calibration FILE.json, or neutral (every check kappa 0.5). [the shipped one]"
    )
    dataset: str = opt("boe-sim", "Dataset name: the calibration groups used are DATASET/...", min_length=1)
    root: Annotated[str | None, _exists("dataset root", True)] = opt(
        None, "Dataset root: images outside it are refused. [none]"
    )
    ledger: Literal["online", "full"] = opt("online", "online: run the bought checks; full: every check (calibration).")
    extract_claims: bool = True
    concurrency: int = opt(8, "Model requests in flight at most.", ge=1, le=256)
    timeout: float = opt(60.0, "Seconds one model request may take in all, its retries included.", gt=0, le=86_400)
    max_retries: int = opt(4, "Retries of a failed request (429, 5xx, timeouts).", ge=0, le=20)
    backoff: float = Field(0.5, ge=0, le=600)
    use_n: bool = True
    json_schema: bool = True
    crop_pad: float = Field(0.08, ge=0.0, lt=0.5)
    crop_min: float = Field(0.3, gt=0.0, le=1.0)
    # costs: design (the numbers in `costs`) or measured (see boe.agent.costs); a file fixes the measurements
    cost_mode: Literal["design", "measured"] = "design"
    cost_basis: Literal["tokens", "seconds"] = "tokens"
    cost_file: Annotated[str | None, _exists("cost file")] = None
    segmenter: Annotated[str, AfterValidator(_segmenter)] = opt(
        "auto", "Grounded views' segmenter: {segmenters}; auto: sam with a checkpoint, else opencv.", min_length=1
    )
    sam_checkpoint: str | None = opt(None, "segment-anything checkpoint (the sam extra). [none]")
    sam_model: Literal["auto", "vit_b", "vit_l", "vit_h"] = opt("auto", "SAM model (checked against the checkpoint).")
    sam_device: str = opt("cpu", "cpu, cuda, cuda:N or auto.", pattern=r"^(cpu|auto|cuda(:\d+)?)$")
    grounded_view: Literal["crop", "mask", "overlay"] = opt(
        "crop", "Grounded view: crop (the mask's box), mask, overlay."
    )
    dicom_frame: int | None = opt(None, "Frame of a multi-frame DICOM file. [the middle one]", ge=0, le=1_000_000)
    # what a real server is sent (boe.tools.client): explicit sampling fields sample the whole distribution (a
    # server's generation_config.json cannot narrow them)
    server: Literal["auto", "vllm", "sglang", "openai", "generic"] = opt(
        "auto", "How requests are worded; auto: from GET /models."
    )
    top_p: Annotated[float | None, BeforeValidator(none_word)] = opt(
        1.0, "Sampling top_p sent explicitly; none: not sent (a server that refuses it, e.g. OpenAI's reasoning "
        "models).", gt=0, le=1
    )  # fmt: skip
    top_k: int = opt(-1, "Sampling top_k sent explicitly; -1: no limit (never sent to OpenAI's API).", ge=-1, le=2**20)
    min_p: float = opt(0.0, "Sampling min_p sent explicitly.", ge=0, le=1)
    extra_body: Annotated[dict[str, Any], _json(dict)] = opt(
        {}, """JSON merged into generator requests, e.g. '{"top_k": 20}'. [none]"""
    )
    judge_extra_body: Annotated[dict[str, Any], _json(dict)] = opt({}, "JSON merged into judge requests. [none]")
    # images: larger figures are downscaled (crops come from the full resolution); the decoded size is refused first
    max_pixels: int = opt(
        1024 * 1024, "Pixels of a figure as sent; larger ones are downscaled (0: no limit).", ge=0, le=2**30
    )
    pixel_limit: int = opt(100_000_000, "Refuse images declaring more pixels than this.", ge=4096, le=10**12)
    # pause before each purchase for a person or a program to approve or veto it (a LangGraph interrupt)
    approve: bool = opt(False, "Ask before each purchase: Enter buys it, n (or n: reason) vetoes it.")

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        if self.cost_file is not None and self.cost_mode != "measured":
            raise ValueError("a cost measurement file needs cost_mode 'measured'")
        if self.pool == "adaptive" and self.eta < 0:  # the pool's price of a draw (AdaptivePool), found before paying
            raise ValueError(f"eta (--eta) must be >= 0 with an adaptive pool (--pool adaptive), got {self.eta}")
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
        judge = self.judge_base_url and redact_urls(self.judge_base_url)
        return self.model_dump(mode="json") | {"base_url": redact_urls(self.base_url), "judge_base_url": judge}


def _default_path() -> str:
    return str(resources.files("boe.agent") / "data" / DEFAULT_CALIBRATION)


def default_calibration() -> Calibration:
    """The shipped calibration (fitted on a full simulator ledger)."""
    cal = load_calibration(_default_path())
    cal.source = f"boe/agent/data/{DEFAULT_CALIBRATION} (shipped, fitted on the simulator)"
    return cal
