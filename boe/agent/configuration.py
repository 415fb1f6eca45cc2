"""The agent's one validated configuration: endpoints, sampling, budget, policy, costs, calibration.

Everything a run needs is checked when the object is built (unknown policy,
non-positive cost, bad temperature, missing calibration file), never half
way through a question. `AgentConfig.public()` is what a run stores: base
URLs redacted, no API key (the key is never part of the configuration).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, field_validator, model_validator

from boe.core.calibration import Calibration, load_calibration
from boe.errors import ConfigError
from boe.util import redact_url

__all__ = ["DEFAULT_CALIBRATION", "NEUTRAL", "AgentConfig", "Costs", "default_calibration", "make_config"]

#: The shipped calibration, fitted on a full simulator ledger (see boe/agent/data/README.md).
DEFAULT_CALIBRATION = "sim-calibration.json"
#: The calibration value that means "no fitted groups" (for generating calibration ledgers).
NEUTRAL = "neutral"


#: The key of `Costs` that prices one sample (an adaptive pool draws and pays for samples, spec section 12).
SAMPLE = "sample"


class Costs(RootModel[dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]]]):
    """Design cost of each action kind: a mapping kind -> cost, every registered kind's default filled in
    (the paper's 1 / 4 / 4 / 8; an answer-level check costs what a whole-response check does: one judge call
    on one response). Kinds a plugin registers keep their default unless given. ``sample`` prices one sample
    of an adaptive pool (default `boe.core.pool.DEFAULT_SAMPLE_COST`; kept only when given)."""

    model_config = ConfigDict(frozen=True)

    root: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, validate_default=True
    )

    @field_validator("root")
    @classmethod
    def _known(cls, v: dict[str, float]) -> dict[str, float]:
        from boe.kinds import builtin_kinds, kind_names, kind_spec

        names = kind_names()
        bad = [k for k in v if k not in names and k != SAMPLE]
        if bad:
            raise ValueError(f"unknown action kinds {bad}; known: {', '.join(names)} (and {SAMPLE})")
        shown = [k for k in names if k in builtin_kinds() or k in v]
        out = {k: float(v[k]) if k in v else kind_spec(k).cost for k in shown}
        if SAMPLE in v:
            out[SAMPLE] = float(v[SAMPLE])
        return out

    def of(self, kind: str) -> float:
        """The cost of ``kind`` (a registered kind not given keeps its spec's default) or of one ``sample``."""
        if kind in self.root:
            return self.root[kind]
        if kind == SAMPLE:
            from boe.core.pool import DEFAULT_SAMPLE_COST

            return DEFAULT_SAMPLE_COST
        from boe.kinds import kind_spec

        return kind_spec(kind).cost

    def as_dict(self) -> dict[str, float]:
        """Kind -> cost, in menu order."""
        return dict(self.root)


def _default_kinds() -> tuple[str, ...]:
    """Every registered kind: the built-ins and those of installed plugins (a plugin's menu rule decides which
    questions its checks apply to)."""
    from boe.kinds import kind_names

    return kind_names()


class AgentConfig(BaseModel):
    """One run of the agent: who generates, who judges, how much evidence, which policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    judge_base_url: str | None = None
    judge_model: str | None = None
    k: int = Field(default=16, ge=1, le=256)
    temperature: float = Field(default=1.1, ge=0.0, le=2.0)
    judge_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, ge=16)
    seed: int | None = 0
    budget: float = Field(default=16.0, ge=0.0)
    policy: str = "boe"
    eta: float = 0.0
    policy_seed: int = 0
    costs: Costs = Field(default_factory=Costs)
    kinds: tuple[str, ...] = Field(default_factory=lambda: _default_kinds())
    calibration: str | None = None  # file path, "neutral" (no groups), or None: the shipped simulator calibration
    dataset: str = Field(default="boe-sim", min_length=1)
    root: str | None = None
    ledger: Literal["online", "full"] = "online"
    extract_claims: bool = True
    concurrency: int = Field(default=8, ge=1, le=256)
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0, le=20)
    backoff: float = Field(default=0.5, ge=0)
    use_n: bool = True
    json_schema: bool = True
    crop_pad: float = Field(default=0.08, ge=0.0, lt=0.5)
    crop_min: float = Field(default=0.3, gt=0.0, le=1.0)
    # costs: design (the numbers in `costs`) or measured (see boe.agent.costs); a file fixes the measurements
    cost_mode: Literal["design", "measured"] = "design"
    cost_basis: Literal["tokens", "seconds"] = "tokens"
    cost_file: str | None = None
    # grounding: the segmenter behind grounded views (sam with a checkpoint, else opencv) and the view shown
    segmenter: str = Field(default="auto", min_length=1)  # auto, opencv, sam, or a registered plugin's name
    sam_checkpoint: str | None = None
    sam_model: Literal["auto", "vit_b", "vit_l", "vit_h"] = "auto"
    sam_device: str = Field(default="cpu", pattern=r"^(cpu|auto|cuda(:\d+)?)$")
    grounded_view: Literal["crop", "mask", "overlay"] = "crop"
    dicom_frame: int | None = Field(default=None, ge=0)  # of a multi-frame DICOM file [the middle one]
    # what a real server is sent (see boe.tools.client): its kind (auto: GET /models), explicit sampling fields
    # that sample the whole distribution (a server's generation_config.json cannot narrow them), extra body fields
    server: Literal["auto", "vllm", "sglang", "openai", "generic"] = "auto"
    top_p: float | None = Field(default=1.0, gt=0.0, le=1.0)  # None ("none"): not sent at all
    top_k: int = Field(default=-1, ge=-1)  # -1: no limit
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into generator requests
    judge_extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into judge requests
    # images: pixels sent at most (larger figures are downscaled; crops come from the full resolution), and the
    # decoded size refused before decoding
    max_pixels: int = Field(default=1024 * 1024, ge=0)  # 0: no limit
    pixel_limit: int = Field(default=100_000_000, ge=4096)
    # pause before each purchase for a person or a program to approve or veto it (a LangGraph interrupt)
    approve: bool = False
    # the candidate pool: fixed (k samples up front) or adaptive (start with pool_start, draw pool_round at a
    # time up to k while a sample is worth more than a check; samples paid from the budget, spec section 12)
    pool: Literal["fixed", "adaptive"] = "fixed"
    pool_start: int = Field(default=4, ge=1, le=256)
    pool_round: int = Field(default=2, ge=1, le=256)

    @field_validator("top_p", mode="before")
    @classmethod
    def _top_p(cls, v: Any) -> Any:
        return None if isinstance(v, str) and v.strip().lower() in ("none", "null") else v

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from boe.kinds import kind_names

        names = kind_names()
        bad = [k for k in v if k not in names]
        if bad:
            raise ValueError(f"unknown action kinds {bad}; known: {', '.join(names)}")
        return tuple(k for k in names if k in v)

    @field_validator("segmenter")
    @classmethod
    def _segmenter(cls, v: str) -> str:
        from boe.tools.segment import SEGMENTERS

        if v != "auto" and v not in SEGMENTERS:  # a miss discovers plugins first
            raise ValueError(f"unknown segmenter {v!r}; known: auto, {', '.join(sorted(SEGMENTERS))}")
        return v

    @field_validator("eta")
    @classmethod
    def _eta(cls, v: float) -> float:
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("eta must be finite")
        return v

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        from boe.core.policies import POLICIES, _load_plugins

        _load_plugins()
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {', '.join(sorted(POLICIES))}")
        if getattr(POLICIES[self.policy], "reads_labels", False):
            raise ValueError(f"policy {self.policy!r} reads evaluation labels and cannot run live")
        if self.calibration not in (None, NEUTRAL) and not Path(self.calibration).is_file():
            raise ValueError(f"calibration file {self.calibration!r} does not exist")
        if self.root is not None and not Path(self.root).is_dir():
            raise ValueError(f"dataset root {self.root!r} is not a directory")
        if self.cost_file is not None:
            if self.cost_mode != "measured":
                raise ValueError("a cost measurement file needs cost_mode 'measured'")
            if not Path(self.cost_file).is_file():
                raise ValueError(f"cost file {self.cost_file!r} does not exist")
        if self.segmenter == "sam" and not self.sam_checkpoint:
            raise ValueError("the sam segmenter needs a checkpoint (--sam-checkpoint PATH)")
        if self.segmenter not in ("auto", "sam") and self.sam_checkpoint:
            raise ValueError(f"a SAM checkpoint was given with the {self.segmenter} segmenter")
        if self.sam_checkpoint is not None:
            from boe.tools.segment_sam import require_sam

            require_sam()  # MissingExtraError (not a ValueError): names the extra to install
            if not Path(self.sam_checkpoint).expanduser().is_file():
                raise ValueError(f"SAM checkpoint {self.sam_checkpoint!r} does not exist")
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
            return Calibration(source="neutral (every group kappa 0.5: checks carry no weight)")
        if self.calibration is not None:
            return load_calibration(self.calibration)
        return default_calibration()

    def public(self) -> dict[str, Any]:
        """The configuration as stored with a run: URLs redacted, nothing secret."""
        data = self.model_dump(mode="json")
        data["base_url"] = redact_url(self.base_url)
        if self.judge_base_url is not None:
            data["judge_base_url"] = redact_url(self.judge_base_url)
        return data


@cache
def _default_path() -> str:
    return str(resources.files("boe.agent") / "data" / DEFAULT_CALIBRATION)


def default_calibration() -> Calibration:
    """The shipped calibration (fitted on a full simulator ledger)."""
    cal = load_calibration(_default_path())
    cal.source = f"boe/agent/data/{DEFAULT_CALIBRATION} (shipped, fitted on the simulator)"
    return cal


def make_config(**values: Any) -> AgentConfig:
    """Build an `AgentConfig`, turning validation failures into one `ConfigError` naming the field."""
    try:
        return AgentConfig(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "configuration"
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{where}: {msg}") from None
