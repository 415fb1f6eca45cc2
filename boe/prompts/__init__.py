"""Prompt templates (files, loaded by name, versioned) and their reply schemas.

See ``docs/prompt-protocol.md`` for the markers the templates use.
"""

from boe.prompts._loader import (
    PROMPT_NAMES,
    SYSTEM_TEXT,
    PromptTemplate,
    Rendered,
    Safe,
    escape,
    figures_block,
    load_prompt,
    load_schema,
    options_block,
    parse_template,
    with_figure_key,
)

__all__ = [
    "PROMPT_NAMES",
    "SYSTEM_TEXT",
    "PromptTemplate",
    "Rendered",
    "Safe",
    "escape",
    "figures_block",
    "load_prompt",
    "load_schema",
    "options_block",
    "parse_template",
    "with_figure_key",
]
