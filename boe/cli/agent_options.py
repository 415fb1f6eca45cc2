"""The agent's command-line options, generated from `AgentConfig`: one per `opt` field, its help, type, choices,
range and default from the field (a command may change a default: batch runs ``--ledger full``), and ``--config``.
`AgentOptions.build()` puts the options given over `boe.agent.settings.environment` and the command's defaults."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, TypeVar

import typer
from pydantic import BeforeValidator

from boe.agent.configuration import AgentConfig, several_urls
from boe.agent.settings import Layer, build, environment, missing
from boe.cli.common import registered
from boe.core.policies import POLICIES
from boe.kinds import KINDS
from boe.tools.segment import SEGMENTERS

__all__ = ["OPTIONS", "AgentOptions", "agent_options", "flag"]

F = TypeVar("F", bound=Callable[..., Any])
#: The fields given on the command line, and their help texts.
OPTIONS = {name: info.description for name, info in AgentConfig.model_fields.items() if info.description}
#: Options whose flag is not ``--field-name``.
FLAGS = {"grounded_view": "--view", "dicom_frame": "--frame"}
CONFIG = "TOML or JSON file of agent settings (AgentConfig fields, e.g. k = 8); options given win. Every option also "
CONFIG += "reads $BOE_<FIELD>, e.g. BOE_K=8 (the field is the option's name, but "
CONFIG += ", ".join(f"BOE_{name.upper()} for {option}" for name, option in FLAGS.items()) + ")."


def flag(name: str) -> str:
    """The command-line flag of an `AgentConfig` field."""
    return FLAGS.get(name) or "--" + name.replace("_", "-")


@dataclass
class AgentOptions:
    """What a command got for the agent options: the values given, the ``--config`` file, its defaults."""

    given: dict[str, Any]
    config_file: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    context: Any = None  # the command's typer context (for usage errors)

    def layers(self, **fixed: Any) -> list[Layer]:
        """Where the command's `AgentConfig` comes from, first winning (see `boe.agent.settings`)."""
        given = (lambda f: f"{flag(f.split('.')[0])} ({f})", self.given)
        return [(str, fixed), given, *environment(self.config_file), (str, self.defaults)]

    def build(self, **fixed: Any) -> AgentConfig:
        """The validated `AgentConfig`; a bad value is a `ConfigError` naming its flag, variable or file."""
        if absent := missing(layers := self.layers(**fixed)):
            name = absent[0]
            text = f"Missing option '{flag(name)}' (or {name} in a --config FILE, or $BOE_{name.upper()})."
            raise typer.BadParameter.__mro__[1](text, ctx=self.context)  # click's UsageError (bundled by typer)
        return build(*layers)


def _option(name: str, default: Any, shown: str | None) -> tuple[Any, Any]:
    """The typer option of one field and the type typer reads: a list, mapping, costs or a number that may be the
    word none is text the settings read; a field given more than once (``--base-url A --base-url B``) a list."""
    info = AgentConfig.model_fields[name]
    ann = info.annotation
    ann = next(a for a in typing.get_args(ann) if a is not type(None)) if type(None) in typing.get_args(ann) else ann
    choices = tuple(map(str, typing.get_args(ann))) if typing.get_origin(ann) is Literal else ()
    before = [m.func for m in info.metadata if isinstance(m, BeforeValidator)]
    kind: Any = list[str] if several_urls in before else str if before or ann not in (int, float, bool) else ann
    text, _, own = (info.description or "").removesuffix("]").partition(" [")  # "help [the default --help shows]"
    specs = sorted((KINDS.get_obj(k) for k in KINDS.names(discover=False)), key=lambda spec: spec.order)
    text = text.replace("{kinds}", ", ".join(f"{spec.name}={spec.cost:g}" for spec in specs))
    live = registered(POLICIES, lambda cls: not getattr(cls, "reads_labels", False))
    text = text.replace("{policies}", live).replace("{segmenters}", registered(SEGMENTERS))
    text += f" One of: {', '.join(choices)}." if len(choices) > 5 else ""  # fewer are the metavar (online|full)
    lim = {k: getattr(m, k) for m in info.metadata for k in ("ge", "gt", "le") if hasattr(m, k)}
    low = f"above {lim['gt']:,}, at most" if "gt" in lim else f"{lim.get('ge', 0):,} to"
    text += f" Range: {low} {lim['le']:,}." if "le" in lim and "Range:" not in text else ""
    metavar = "|".join(choices) if 0 < len(choices) <= 5 else None
    show = shown or own or True  # a text: what the default means (--help shows it in parentheses)
    return typer.Option(default, flag(name), help=text, show_default=show, metavar=metavar), kind


def agent_options(
    *, exclude: tuple[str, ...] = (), defaults: Mapping[str, Any] | None = None, help_defaults: Mapping[str, str] = {}
) -> Callable[[F], F]:
    """Add the agent options (all but ``exclude``) and ``--config`` to a command taking ``agent: AgentOptions``;
    ``defaults`` are the command's own defaults for some fields, ``help_defaults`` the defaults --help shows."""
    own = dict(defaults or {})
    if unknown := [k for k in (*exclude, *own) if k not in AgentConfig.model_fields]:
        raise ValueError(f"not AgentConfig fields: {unknown}")
    names = [n for n in OPTIONS if n not in exclude]

    def decorate(fn: F) -> F:
        sig, hints, kw = inspect.signature(fn), typing.get_type_hints(fn), inspect.Parameter.KEYWORD_ONLY
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
        params = [p for p in params if p.name != "agent"]
        for name in names:
            info = AgentConfig.model_fields[name]
            fallback = None if info.is_required() else info.get_default(call_default_factory=True)
            option, kind = _option(name, own.get(name, fallback), help_defaults.get(name))
            params.append(inspect.Parameter(f"agent_{name}", kw, default=option, annotation=Optional[kind]))
        params.append(inspect.Parameter("agent_context", kw, annotation=typer.Context))
        config = typer.Option(None, "--config", metavar="FILE", help=CONFIG)
        params.append(inspect.Parameter("agent_config_file", kw, default=config, annotation=Optional[str]))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx, given = kwargs.pop("agent_context"), {}
            for name in names:
                value, source = kwargs.pop(f"agent_{name}", None), ctx.get_parameter_source(f"agent_{name}")
                given[name] = None if source is None or source.name in ("DEFAULT", "DEFAULT_MAP") else value
            return fn(*args, agent=AgentOptions(given, kwargs.pop("agent_config_file", None), own, ctx), **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return typing.cast(F, wrapper)

    return decorate
