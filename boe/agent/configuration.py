"""The agent's one validated configuration: endpoints, sampling, budget, policy, costs, calibration.

Everything a run needs is checked when the object is built (unknown policy, non-positive cost, bad temperature,
missing calibration file), never half way through a question. Its sources (options given, a LangGraph context, the
environment, a file) are adapters in `boe.agent.settings`. A field annotated with a help text is a command-line
option (``--field-name``, or its `FLAGS` entry; ``[...]`` ends the text with the default ``--help`` shows); the others
are set in a file or the environment. `AgentConfig.public()` is what a run stores: base URLs redacted, no API key.
"""

from __future__ import annotations

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

__all__ = ["DEFAULT_CALIBRATION", "FLAGS", "NEUTRAL", "AgentConfig", "Costs", "default_calibration"]

#: The shipped calibration, fitted on a full simulator ledger (see boe/agent/data/README.md).
DEFAULT_CALIBRATION = "sim-calibration.json"
#: The calibration value that means "no fitted groups" (for generating calibration ledgers).
NEUTRAL = "neutral"
#: Options whose flag is not ``--field-name``.
FLAGS = {"grounded_view": "--view", "dicom_frame": "--frame"}


class Several:
    """Marks a field the command line takes more than once (``--base-url A --base-url B``)."""


SEVERAL = Several()


def _urls(v: Any) -> Any:
    """One base URL or several (a list, or one text separated by spaces or commas) as one text, each URL once."""
    if isinstance(v, (list, tuple)):
        v = " ".join(str(u) for u in v)
    return " ".join(split_urls(v)) if isinstance(v, str) else v


Cost = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: The key of `Costs` that prices one sample (an adaptive pool draws and pays for samples, spec section 12).
SAMPLE = "sample"


def _bounded(default: Any, low: float, high: float, *, above: bool = False, text: str | None = None) -> Any:
    """A numeric field in [low, high] (``above``: low excluded), its range in its description (--help shows it):
    generous for any real server, and it refuses a typo such as 99999999999999999999."""
    text = text or (f"above {low:,}, at most {high:,}" if above else f"{low:,} to {high:,}")
    if above:
        return Field(default=default, gt=low, le=high, allow_inf_nan=False, description=text)
    return Field(default=default, ge=low, le=high, allow_inf_nan=False, description=text)


class Costs(RootModel[dict[str, Cost]]):
    """Design cost of each action kind: kind -> cost, every built-in kind's default filled in (the paper's 1 / 4 /
    4 / 8; an answer-level check 8: one judge call on one response); other kinds keep their default unless given.
    ``sample`` prices one sample of an adaptive pool (default `boe.core.pool.DEFAULT_SAMPLE_COST`; kept only when
    given)."""

    model_config = ConfigDict(frozen=True)
    root: dict[str, Cost] = Field(default_factory=dict, validate_default=True)

    @field_validator("root")
    @classmethod
    def _known(cls, v: dict[str, float]) -> dict[str, float]:
        from boe.kinds import builtin_kinds, kind_names, kind_spec

        _known_kinds(tuple(k for k in v if k != SAMPLE))
        out = {k: float(v[k]) if k in v else kind_spec(k).cost for k in kind_names() if k in builtin_kinds() or k in v}
        return out | ({SAMPLE: float(v[SAMPLE])} if SAMPLE in v else {})

    def of(self, kind: str) -> float:
        """The cost of ``kind`` (a registered kind not given keeps its spec's default) or of one ``sample``."""
        from boe.core.pool import DEFAULT_SAMPLE_COST
        from boe.kinds import kind_spec

        if kind in self.root:
            return self.root[kind]
        return DEFAULT_SAMPLE_COST if kind == SAMPLE else kind_spec(kind).cost

    def as_dict(self) -> dict[str, float]:
        """Kind -> cost, in menu order."""
        return dict(self.root)


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


def _none_word(v: Any) -> Any:
    """The word none (or null) as None: a field that is then not sent at all."""
    return None if isinstance(v, str) and v.strip().lower() in ("none", "null") else v


def _exists(what: str, directory: bool = False) -> AfterValidator:
    def check(v: str | None) -> str | None:
        if v not in (None, NEUTRAL) and not (Path(v).is_dir() if directory else Path(v).expanduser().is_file()):
            raise ValueError(f"{what} {v!r} {'is not a directory' if directory else 'does not exist'}")
        return v

    return AfterValidator(check)


class AgentConfig(BaseModel):
    """One run of the agent: who generates, who judges, how much evidence, which policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: Annotated[
        str,
        "Required: the generator's OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1; given more than once, "
        "requests go to the least loaded server (one server's limits are learnt on their own, one that goes away is "
        "routed around).",
        SEVERAL,
        BeforeValidator(_urls),
    ] = Field(min_length=1)
    model: Annotated[str, "Required: the generator model name."] = Field(min_length=1)
    judge_base_url: Annotated[
        str | None, "Judge endpoint (more than once: several servers). [--base-url]", SEVERAL, BeforeValidator(_urls)
    ] = None
    judge_model: Annotated[str | None, "Judge model. [the generator]"] = None
    k: Annotated[int, "Candidates sampled per question (at most, with an adaptive pool)."] = _bounded(16, 1, 256)
    # the candidate pool: fixed (k samples up front) or adaptive (start with pool_start, draw pool_round at a time
    # up to k while a sample is worth more than a check; samples paid from the budget, spec section 12)
    pool: Annotated[
        Literal["fixed", "adaptive"],
        "fixed: sample k up front; adaptive: sample in rounds and buy checks under one budget, each step whichever "
        "is worth more per unit cost (a sample costs --costs sample=X).",
    ] = "fixed"
    pool_start: Annotated[int, "Adaptive pool: candidates sampled first."] = _bounded(4, 1, 256)
    pool_round: Annotated[int, "Adaptive pool: candidates sampled per later round."] = _bounded(2, 1, 256)
    temperature: Annotated[float, "Generator temperature."] = _bounded(1.1, 0, 2)
    judge_temperature: Annotated[float, "Judge temperature."] = _bounded(0.0, 0, 2)
    max_tokens: Annotated[int, "Reply tokens asked for at most."] = _bounded(512, 16, 2**20)
    seed: Annotated[int | None, "Sampling seed sent to the endpoint."] = _bounded(
        0, -(2**63), 2**63 - 1, text="a 64-bit integer (as vLLM takes it)"
    )
    budget: Annotated[float, "Evidence budget in design-cost units."] = _bounded(16.0, 0, 1_000_000)
    policy: Annotated[
        str,
        "Selection policy: {policies}, or a plugin's (bayes: the strongest deployable; boe: the paper's literal "
        "controller).",
        AfterValidator(_policy),
    ] = "bayes"
    eta: Annotated[float, "boe stops when the best value per cost is <= eta."] = Field(0.0, allow_inf_nan=False)
    policy_seed: Annotated[int, "Seed of random-factor's draws."] = _bounded(0, 0, 2**63 - 1, text="0 to 2^63-1")
    costs: Annotated[Costs, "Costs by kind ({kinds}): kind=cost pairs (the kinds not named keep theirs); the paper's "
                     "kinds' costs by position (1,4,4,8,8); measured (measured:seconds for time); or a FILE (boe costs "
                     "--out FILE); with any of them sample=X prices one sample of an adaptive pool. [paper]"
                     ] = Field(default_factory=Costs)  # fmt: skip
    kinds: Annotated[tuple[str, ...], AfterValidator(_known_kinds)] = Field(default_factory=_default_kinds)
    calibration: Annotated[
        str | None,
        "Calibration FILE.json, or neutral (every check kappa 0.5). [the shipped one]",
        _exists("calibration file"),
    ] = None
    dataset: Annotated[str, "Dataset name: the calibration groups used are DATASET/..."] = Field(
        "boe-sim", min_length=1
    )
    root: Annotated[
        str | None, "Dataset root: images outside it are refused. [none]", _exists("dataset root", True)
    ] = None
    ledger: Annotated[Literal["online", "full"], "online: run the bought checks; full: every check (calibration)."] = (
        "online"
    )
    extract_claims: bool = True
    concurrency: Annotated[int, "Model requests in flight at most."] = _bounded(8, 1, 256)
    timeout: Annotated[float, "Seconds one model request may take in all, its retries included."] = _bounded(
        60.0, 0, 86_400, above=True
    )
    max_retries: Annotated[int, "Retries of a failed request (429, 5xx, timeouts)."] = _bounded(4, 0, 20)
    backoff: float = _bounded(0.5, 0, 600)
    use_n: bool = True
    json_schema: bool = True
    crop_pad: float = Field(default=0.08, ge=0.0, lt=0.5)
    crop_min: float = Field(default=0.3, gt=0.0, le=1.0)
    # costs: design (the numbers in `costs`) or measured (see boe.agent.costs); a file fixes the measurements
    cost_mode: Literal["design", "measured"] = "design"
    cost_basis: Literal["tokens", "seconds"] = "tokens"
    cost_file: Annotated[str | None, _exists("cost file")] = None
    # grounding: the segmenter behind grounded views (sam with a checkpoint, else opencv) and the view shown
    segmenter: Annotated[
        str,
        "Grounded views' segmenter: {segmenters}; auto: sam with a checkpoint, else opencv.",
        AfterValidator(_segmenter),
    ] = Field(default="auto", min_length=1)
    sam_checkpoint: Annotated[str | None, "segment-anything checkpoint (the sam extra). [none]"] = None
    sam_model: Annotated[Literal["auto", "vit_b", "vit_l", "vit_h"], "SAM model (checked against the checkpoint)."] = (
        "auto"
    )
    sam_device: Annotated[str, "cpu, cuda, cuda:N or auto."] = Field("cpu", pattern=r"^(cpu|auto|cuda(:\d+)?)$")
    grounded_view: Annotated[
        Literal["crop", "mask", "overlay"], "Grounded view: crop (the mask's box), mask, overlay."
    ] = "crop"
    dicom_frame: Annotated[int | None, "Frame of a multi-frame DICOM file. [the middle one]"] = _bounded(
        None, 0, 1_000_000
    )
    # what a real server is sent (see boe.tools.client): its kind (auto: GET /models), explicit sampling fields
    # that sample the whole distribution (a server's generation_config.json cannot narrow them), extra body fields
    server: Annotated[
        Literal["auto", "vllm", "sglang", "openai", "generic"], "How requests are worded; auto: from GET /models."
    ] = "auto"
    top_p: Annotated[
        float | None,
        "Sampling top_p sent explicitly; none: not sent (a server that refuses it, e.g. OpenAI's reasoning models).",
        BeforeValidator(_none_word),
    ] = _bounded(1.0, 0, 1, above=True)
    top_k: Annotated[int, "Sampling top_k sent explicitly; -1: no limit (never sent to OpenAI's API)."] = _bounded(
        -1, -1, 2**20
    )
    min_p: Annotated[float, "Sampling min_p sent explicitly."] = _bounded(0.0, 0, 1)
    extra_body: Annotated[dict[str, Any], """JSON merged into generator requests, e.g. '{"top_k": 20}'. [none]"""] = (
        Field(default_factory=dict)
    )
    judge_extra_body: Annotated[dict[str, Any], "JSON merged into judge requests. [none]"] = Field(default_factory=dict)
    # images: pixels sent at most (larger figures are downscaled; crops come from the full resolution), and the
    # decoded size refused before decoding
    max_pixels: Annotated[int, "Pixels of a figure as sent; larger ones are downscaled (0: no limit)."] = _bounded(
        1024 * 1024, 0, 2**30
    )
    pixel_limit: Annotated[int, "Refuse images declaring more pixels than this."] = _bounded(100_000_000, 4096, 10**12)
    # pause before each purchase for a person or a program to approve or veto it (a LangGraph interrupt)
    approve: Annotated[bool, "Ask before each purchase: Enter buys it, n (or n: reason) vetoes it."] = False

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
