"""`boe plugins`: every registered kind, tool, policy, segmenter, dataset format and store backend, with its source."""

from __future__ import annotations

import typer


def plugins_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List what is registered (built-ins and plugins of the boe.plugins entry-point group) and from which package."""
    from rich.markup import escape
    from rich.table import Table

    from boe.cli.common import out_console, print_json
    from boe.registry import listing, plugins

    found = listing()
    eps = plugins()
    if as_json:
        data = {
            "registries": found,
            "plugins": [{"name": p.name, "value": p.value, "dist": p.dist, "error": p.error} for p in eps],
        }
        print_json("plugins", data)
        return
    console = out_console()
    t = Table(title="registered (boe plugins --json for more)", title_justify="left", pad_edge=False)
    for col in ("registry", "name", "source", "where"):
        t.add_column(col, no_wrap=col != "where")
    for noun, rows in found.items():
        for row in rows:
            t.add_row(noun, escape(row["name"]), escape(row["source"]), escape(row["target"]))
    console.print(t)
    if not eps:
        console.print("[dim]no plugins installed (entry-point group boe.plugins)[/]", highlight=False)
    for p in eps:
        state = f"[red]not loaded: {escape(p.error)}[/]" if p.error else "loaded"
        console.print(f"plugin {escape(p.name)} = {escape(p.value)} from {escape(p.dist)}: {state}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins_command)
