"""The agent's command-line options: the command-line adapter of `AgentConfig` (see `boe.agent.settings`).

`boe ask`, `boe batch` and `boe demo` take one option per `AgentConfig` field annotated with a help text (its type,
choices and default from the field; a command may change a default, e.g. batch runs ``--ledger full``) and
``--config FILE``. The command gets one `AgentOptions` and calls `AgentOptions.build()`: options given > the
environment (``BOE_<FIELD>``) > the file (``--config``, else ``BOE_CONFIG``) > the command's defaults > the field's.
"""

from __future__ import annotations

import functools
import inspect
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, TypeVar

import typer

from boe.agent.configuration import FLAGS, AgentConfig, Several

__all__ = ["OPTIONS", "AgentOptions", "agent_options", "flag"]

F = TypeVar("F", bound=Callable[..., Any])
#: The fields given on the command line, and their help texts.
OPTIONS = {n: t for n, f in AgentConfig.model_fields.items() for t in f.metadata if isinstance(t, str)}


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

    def sources(self, **fixed: Any) -> list[Any]:
        """The command line's sources, lowest first (see `boe.agent.settings.resolve`)."""
        from boe.agent.settings import environment

        given = (lambda f: f"{flag(f.split('.')[0])} ({f})", self.given)
        return [(str, self.defaults), *environment(os.environ, self.config_file), given, (str, fixed)]

    def values(self, **fixed: Any) -> dict[str, Any]:
        """The values the sources give, layered (None values dropped)."""
        return {k: v for _, vals in self.sources(**fixed) for k, v in vals.items() if v is not None}

    def build(self, **fixed: Any) -> AgentConfig:
        """The validated `AgentConfig`; a bad value is a `ConfigError` naming its flag, variable or file."""
        from boe.agent.settings import missing, resolve

        sources = self.sources(**fixed)
        if absent := missing(sources):
            message = (
                f"Missing option '{flag(absent[0])}' (or {absent[0]} in a --config FILE, or $BOE_{absent[0].upper()})."
            )
            raise typer.BadParameter.__mro__[1](message, ctx=self.context)  # click's UsageError (bundled by typer)
        return resolve(sources)


def _option(name: str, default: Any, shown: str | None) -> tuple[Any, type]:
    """The typer option of one field (its help with the registered names and the choices) and its type."""
    ann, kind, choices = _field_type(name)
    text, _, own = OPTIONS[name].removesuffix("]").partition(" [")  # "help [the default --help shows]"
    text = _help(text, name, choices)
    value = (
        None
        if default is None
        else str(int(default) if isinstance(default, float) and default.is_integer() else default)
    )
    shown = shown or own or value
    plain = (kind is not str or ann is str or choices) and shown == value  # typer's own default (else None: not given)
    metavar = "|".join(choices) if 0 < len(choices) <= 5 else None
    option = typer.Option(
        default if plain else None,
        flag(name),
        help=text,
        show_default=True if plain else (shown or False),
        metavar=metavar,
    )
    return option, kind


def _field_type(name: str) -> tuple[Any, Any, tuple[str, ...]]:
    """(the field's annotation without None, the type typer reads, the choices of a Literal field)."""
    field = AgentConfig.model_fields[name]
    ann = field.annotation
    ann = (
        next((a for a in typing.get_args(ann) if a is not type(None)), ann)
        if typing.get_origin(ann) is not Literal
        else ann
    )
    choices = tuple(map(str, typing.get_args(ann))) if typing.get_origin(ann) is Literal else ()
    nullable = type(None) in typing.get_args(field.annotation) and "none:" in OPTIONS[name]
    # a list, mapping, costs or a number that may be the word none: text the settings read; a field given more than
    # once (--base-url A --base-url B): a list of texts
    kind: Any = ann if ann in (int, float, str, bool) and not nullable else str
    if any(isinstance(m, Several) for m in field.metadata):
        kind = list[str]
    return ann, kind, choices


def _help(text: str, name: str, choices: tuple[str, ...]) -> str:
    """An option's help with the registered policies, segmenters and kinds' costs filled in, its choices and its
    range."""
    from boe.cli.common import registered
    from boe.core.policies import POLICIES
    from boe.kinds import KINDS
    from boe.tools.segment import SEGMENTERS

    live = registered(POLICIES, lambda cls: not getattr(cls, "reads_labels", False))
    specs = sorted((KINDS.get_obj(k) for k in KINDS.names(discover=False)), key=lambda spec: spec.order)
    kinds = ", ".join(f"{spec.name}={spec.cost:g}" for spec in specs)
    text = text.replace("{policies}", live).replace("{segmenters}", registered(SEGMENTERS)).replace("{kinds}", kinds)
    text += f" One of: {', '.join(choices)}." if len(choices) > 5 else ""  # fewer are the metavar (online|full)
    text += f" Range: {r}." if (r := AgentConfig.model_fields[name].description) else ""  # a numeric field's range
    return text


def agent_options(
    *,
    exclude: tuple[str, ...] = (),
    defaults: Mapping[str, Any] | None = None,
    help_defaults: Mapping[str, str] | None = None,
) -> Callable[[F], F]:
    """Add the agent options (all but ``exclude``) and ``--config`` to a command taking ``agent: AgentOptions``;
    ``defaults`` are the command's own defaults for some fields, ``help_defaults`` the defaults --help shows."""
    own = dict(defaults or {})
    if unknown := [k for k in (*exclude, *own) if k not in AgentConfig.model_fields]:
        raise ValueError(f"not AgentConfig fields: {unknown}")
    names = [n for n in OPTIONS if n not in exclude]

    def decorate(fn: F) -> F:
        sig, hints, kw = inspect.signature(fn), typing.get_type_hints(fn), inspect.Parameter.KEYWORD_ONLY
        params = [
            p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values() if p.name != "agent"
        ]
        for name in names:
            info = AgentConfig.model_fields[name]
            default = (
                own[name]
                if name in own
                else None
                if info.is_required()
                else info.get_default(call_default_factory=True)
            )
            option, kind = _option(name, default, (help_defaults or {}).get(name))
            params.append(inspect.Parameter(f"agent_{name}", kw, default=option, annotation=Optional[kind]))  # noqa: UP045
        text = "TOML or JSON file of agent settings (AgentConfig fields, e.g. k = 8); options given win. Every option"
        config = typer.Option(None, "--config", metavar="FILE", help=f"{text} also reads $BOE_<NAME>, e.g. BOE_K=8.")
        params.append(inspect.Parameter("agent_context", kw, annotation=typer.Context))
        params.append(inspect.Parameter("agent_config_file", kw, default=config, annotation=Optional[str]))  # noqa: UP045

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
