"""The agent's command-line options, declared once and generated from `AgentConfig`.

`boe ask`, `boe batch` and `boe demo` take the same options: each entry of
`AGENT_OPTIONS` names an `AgentConfig` field and its flag; the value type,
the accepted choices and the default shown in ``--help`` come from the field
itself (a command may change a default, e.g. batch runs ``--ledger full``).
`@agent_options(...)` adds them, and ``--config FILE`` (TOML or JSON of
`AgentConfig` fields), to a command, which receives one `AgentOptions` and
calls `AgentOptions.build()`. Precedence: option given (or its environment
variable) > the file > the command's default > `AgentConfig`'s default.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar, get_args, get_origin

import typer

if TYPE_CHECKING:
    from boe.agent.configuration import AgentConfig

__all__ = ["AGENT_OPTIONS", "NOT_ON_COMMAND_LINE", "AgentOption", "AgentOptions", "agent_options"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class AgentOption:
    """One agent option: the `AgentConfig` field it sets, its flag, and what it means."""

    field: str
    flag: str
    help: str
    envvar: tuple[str, ...] = ()
    default_text: str | None = None  # shown instead of the field's default (e.g. "the generator")
    metavar: str | None = None
    #: turns the option's text into `AgentConfig` fields (``--costs`` sets several); None: the field as given
    parse: Callable[[str], dict[str, Any]] | None = None
    value_type: type | None = None  # the option's type when it is not the field's (``--costs`` is text)


def _parse_costs(text: str) -> dict[str, Any]:
    from boe.cli.agent_cmd import _parse_costs as parse

    return parse(text)


def _json_field(name: str, flag: str) -> Callable[[str], dict[str, Any]]:
    """A parser of a JSON-object option (``--extra-body``) into its field."""

    def parse(text: str) -> dict[str, Any]:
        import json

        from boe.errors import ConfigError

        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{flag} must be a JSON object, e.g. '{{\"top_k\": 20}}': {exc.msg} at {exc.pos}"
            ) from None
        if not isinstance(value, dict):
            raise ConfigError(f"{flag} must be a JSON object, got {type(value).__name__}")
        return {name: value}

    return parse


#: Every agent option of `ask`, `batch` and `demo`, in the order ``--help`` lists them.
AGENT_OPTIONS: tuple[AgentOption, ...] = (
    AgentOption(
        "base_url",
        "--base-url",
        "Required: the OpenAI-compatible endpoint of the generator, e.g. http://127.0.0.1:8000/v1.",
        envvar=("BOE_BASE_URL", "OPENAI_BASE_URL"),
    ),
    AgentOption("model", "--model", "Required: the generator model name.", envvar=("BOE_MODEL",)),
    AgentOption("judge_model", "--judge-model", "Judge model.", default_text="the generator"),
    AgentOption("judge_base_url", "--judge-base-url", "Judge endpoint.", default_text="--base-url"),
    AgentOption("k", "--k", "Candidates sampled per question (with --pool adaptive: at most)."),
    AgentOption(
        "pool",
        "--pool",
        "fixed: sample k up front; adaptive: sample in rounds and buy checks under one budget, each step whichever "
        "is worth more per unit cost (samples cost --costs sample=X).",
    ),
    AgentOption("pool_start", "--pool-start", "Adaptive pool: candidates sampled first."),
    AgentOption("pool_round", "--pool-round", "Adaptive pool: candidates sampled per later round."),
    AgentOption("temperature", "--temperature", "Generator temperature."),
    AgentOption("judge_temperature", "--judge-temperature", "Judge temperature."),
    AgentOption("budget", "--budget", "Evidence budget in design-cost units."),
    AgentOption("policy", "--policy", "Selection policy: raw, boe, boe-factor, random-factor, whole, bayes, plugins."),
    AgentOption("eta", "--eta", "boe stops when the best value per cost is <= eta."),
    AgentOption("policy_seed", "--policy-seed", "Seed of random-factor's draws."),
    AgentOption(
        "approve", "--approve", "Ask on the terminal before each purchase: Enter buys it, n (or n: reason) vetoes it."
    ),
    AgentOption(
        "calibration",
        "--calibration",
        "Calibration FILE.json, or neutral (every check kappa 0.5).",
        default_text="the shipped simulator calibration",
        metavar="FILE",
    ),
    AgentOption("dataset", "--dataset", "Dataset name: the calibration groups used are DATASET/..."),
    AgentOption("root", "--root", "Dataset root: images outside it are refused.", default_text="none", metavar="DIR"),
    AgentOption(
        "costs",
        "--costs",
        "paper (1,4,4,8,8); four or five numbers (the built-in action kinds' costs in menu order, as boe plugins "
        "lists them; the fifth is optional); measured (from this run's earlier questions; measured:seconds for "
        "time); or a FILE (boe costs --out FILE); any of them followed by ,sample=X: the cost of one sample of an "
        "adaptive pool (default 0.25).",
        default_text="paper",
        parse=_parse_costs,
        value_type=str,
    ),
    AgentOption("ledger", "--ledger", "online: run the bought checks; full: run every check (calibration, replays)."),
    AgentOption(
        "segmenter",
        "--segmenter",
        "Segmenter of grounded views (opencv, sam, or a plugin's); auto: sam with a checkpoint, else opencv.",
        metavar="NAME",
    ),
    AgentOption(
        "sam_checkpoint",
        "--sam-checkpoint",
        "segment-anything checkpoint for grounded views (needs the sam extra).",
        default_text="none",
        metavar="FILE",
    ),
    AgentOption("sam_model", "--sam-model", "SAM model (checked against the checkpoint)."),
    AgentOption("sam_device", "--sam-device", "cpu, cuda, cuda:N or auto."),
    AgentOption("grounded_view", "--view", "Grounded view: crop (the mask's box), mask or overlay."),
    AgentOption("dicom_frame", "--frame", "Frame of a multi-frame DICOM file.", default_text="the middle one"),
    AgentOption("seed", "--seed", "Sampling seed sent to the endpoint."),
    AgentOption("timeout", "--timeout", "Seconds per request."),
    AgentOption("max_retries", "--max-retries", "Retries of a failed request (429, 5xx, timeouts)."),
    AgentOption("concurrency", "--concurrency", "Model requests in flight at most."),
    AgentOption("server", "--server", "How requests are worded; auto: from GET /models."),
    AgentOption(
        "top_p",
        "--top-p",
        "Sampling top_p sent explicitly; none: not sent (a server that refuses it, e.g. OpenAI's reasoning models).",
        value_type=str,
    ),
    AgentOption("top_k", "--top-k", "Sampling top_k sent explicitly; -1: no limit (never sent to OpenAI's API)."),
    AgentOption("min_p", "--min-p", "Sampling min_p sent explicitly."),
    AgentOption(
        "extra_body",
        "--extra-body",
        "JSON merged into generator requests, e.g. '{\"chat_template_kwargs\": {...}}'.",
        default_text="none",
        metavar="JSON",
        parse=_json_field("extra_body", "--extra-body"),
        value_type=str,
    ),
    AgentOption(
        "judge_extra_body",
        "--judge-extra-body",
        "JSON merged into judge requests.",
        default_text="none",
        metavar="JSON",
        parse=_json_field("judge_extra_body", "--judge-extra-body"),
        value_type=str,
    ),
    AgentOption("max_pixels", "--max-pixels", "Pixels of a figure as sent; larger ones are downscaled (0: no limit)."),
    AgentOption("pixel_limit", "--pixel-limit", "Refuse images declaring more pixels than this."),
    AgentOption("max_tokens", "--max-tokens", "Reply tokens asked for at most."),
)

#: `AgentConfig` fields with no flag (set them in a --config FILE); ``costs`` covers the cost_* fields.
NOT_ON_COMMAND_LINE = (
    "kinds",
    "extract_claims",
    "backoff",
    "use_n",
    "json_schema",
    "crop_pad",
    "crop_min",
    "cost_mode",
    "cost_basis",
    "cost_file",
)

_BY_FIELD = {o.field: o for o in AGENT_OPTIONS}
_KW = inspect.Parameter.KEYWORD_ONLY


def _field_type(name: str) -> tuple[type, tuple[str, ...]]:
    """The option's Python type and, for a Literal field, its choices."""
    from boe.agent.configuration import AgentConfig

    ann = AgentConfig.model_fields[name].annotation
    if get_origin(ann) in (typing.Union, types.UnionType):
        ann = next(a for a in get_args(ann) if a is not type(None))
    if get_origin(ann) is Literal:
        return str, tuple(str(a) for a in get_args(ann))
    if ann in (int, float, str, bool):
        return typing.cast(type, ann), ()
    return str, ()


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if value else "0"
    return str(value)


def _help(opt: AgentOption, default: Any, choices: tuple[str, ...]) -> tuple[str, str | bool]:
    """The help text (with the choices) and the default text typer shows after it."""
    text = opt.help
    if len(choices) > 5:  # fewer are the metavar (online|full)
        text += f" One of: {', '.join(choices)}."
    if opt.default_text is not None:
        return text, opt.default_text
    if default is None:
        return text, False
    return text, _show(default)


@dataclass
class AgentOptions:
    """What a command got for the agent options: the values given, the ``--config`` file, its defaults."""

    given: dict[str, Any]
    config_file: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    context: Any = None  # the command's typer context (for usage errors)

    def values(self, **fixed: Any) -> dict[str, Any]:
        """`AgentConfig` keyword arguments: defaults < file < options given < ``fixed`` (None values dropped)."""
        from boe.agent.config_file import read_config_file

        out: dict[str, Any] = dict(self.defaults)
        if self.config_file is not None:
            out.update(read_config_file(self.config_file))
        for name, value in self.given.items():
            if value is None:
                continue
            opt = _BY_FIELD[name]
            out.update(opt.parse(value) if opt.parse is not None else {name: value})
        out.update({k: v for k, v in fixed.items() if v is not None})
        return out

    def build(self, **fixed: Any) -> AgentConfig:
        """The validated `AgentConfig`; a bad value is a `ConfigError` naming its flag (or the file)."""
        from boe.agent.configuration import make_config
        from boe.errors import ConfigError

        values = self.values(**fixed)
        for name in ("base_url", "model"):
            if values.get(name) is None:
                opt = _BY_FIELD[name]
                env = f", or ${opt.envvar[0]}" if opt.envvar else ""
                message = f"Missing option '{opt.flag}' (or {name} in a --config FILE{env})."
                if self.context is not None:  # a usage error: typer prints the usage line with it
                    usage_error = typer.BadParameter.__mro__[1]  # click's UsageError (typer bundles click privately)
                    raise usage_error(message, ctx=self.context)
                raise ConfigError(message)
        try:
            return make_config(**values)
        except ConfigError as exc:
            where, sep, msg = str(exc).partition(": ")
            name = where.split(".")[0]
            if not sep or name not in values:
                raise
            if self.given.get(name) is not None and name in _BY_FIELD:
                raise ConfigError(f"{_BY_FIELD[name].flag} ({where}): {msg}") from None
            if self.config_file is not None and name not in fixed:
                raise ConfigError(f"--config {self.config_file}: {where}: {msg}") from None
            raise


def agent_options(
    *,
    exclude: tuple[str, ...] = (),
    defaults: Mapping[str, Any] | None = None,
    help_defaults: Mapping[str, str] | None = None,
) -> Callable[[F], F]:
    """Add the agent options (all but ``exclude``) and ``--config`` to a command taking ``agent: AgentOptions``.

    ``defaults`` are the command's own defaults for some fields (shown in the help); ``help_defaults`` replace the
    default text shown for a field.
    """
    from boe.agent.configuration import AgentConfig

    own = dict(defaults or {})
    chosen = [o for o in AGENT_OPTIONS if o.field not in exclude]
    unknown = [k for k in (*exclude, *own) if k not in AgentConfig.model_fields]
    if unknown:
        raise ValueError(f"not AgentConfig fields: {unknown}")

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        if "agent" not in sig.parameters:
            raise TypeError(f"{fn.__name__} needs an 'agent: AgentOptions' parameter")
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
        params = [p for p in params if p.name != "agent"]
        added: list[inspect.Parameter] = []
        for opt in chosen:
            ftype, choices = _field_type(opt.field)
            kind = opt.value_type or ftype
            info_field = AgentConfig.model_fields[opt.field]
            if opt.field in own:
                default = own[opt.field]
            elif info_field.is_required():
                default = None
            else:
                default = info_field.get_default(call_default_factory=True)
            text, shown = _help(opt, default, choices)
            if help_defaults and opt.field in help_defaults:
                shown = help_defaults[opt.field]
            # a plain default is typer's own (shown as is); the wrapper tells it from a value given by its source
            plain = isinstance(shown, str) and shown == _show(default) and opt.value_type is None
            info = typer.Option(
                default if plain else None,
                opt.flag,
                help=text,
                show_default=True if plain else shown,
                envvar=list(opt.envvar) or None,
                metavar=opt.metavar or ("|".join(choices) if choices and len(choices) <= 5 else None),
            )
            annotation = Optional[kind]  # type: ignore[valid-type]  # noqa: UP045 - typer reads it at run time
            added.append(inspect.Parameter(f"agent_{opt.field}", _KW, default=info, annotation=annotation))
        added.append(inspect.Parameter("agent_context", _KW, annotation=typer.Context))
        added.append(
            inspect.Parameter(
                "agent_config_file",
                _KW,
                default=typer.Option(
                    None,
                    "--config",
                    help="TOML or JSON file of agent settings (AgentConfig fields, e.g. k = 8); "
                    "options given on the command line win.",
                    metavar="FILE",
                ),
                annotation=Optional[str],  # noqa: UP045
            )
        )
        new_sig = sig.replace(parameters=[*params, *added])  # typer passes every value by keyword

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = kwargs.pop("agent_context")
            given = {}
            for o in chosen:
                value = kwargs.pop(f"agent_{o.field}", None)
                source = ctx.get_parameter_source(f"agent_{o.field}")
                given[o.field] = None if source is None or source.name in ("DEFAULT", "DEFAULT_MAP") else value
            config_file = kwargs.pop("agent_config_file", None)
            return fn(*args, agent=AgentOptions(given, config_file, dict(own), ctx), **kwargs)

        wrapper.__signature__ = new_sig  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in new_sig.parameters.values()} | {
            "return": hints.get("return", None)
        }
        return typing.cast(F, wrapper)

    return decorate
