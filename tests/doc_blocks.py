"""The shell blocks of the documentation, and what each one's tag says about who runs it.

Every fenced shell block (```bash, ```sh, ```shell, ```console) of README.md, docs/**/*.md and
examples/*/README.md carries one tag, an HTML comment on the line right before its fence:

    <!-- doc-test: ID -->                           a test runs its commands as written: doc_block("ID")
    <!-- doc-test: ID; except "TEXT": WHY -->       the same, but for the lines holding TEXT, which no test runs
    <!-- not run by tests: WHY -->                  no test runs the block, for the reason given

A test runs a block through `doc_block`; the only substitutions it may make are ports and paths.
`tests/test_doc_commands.py` fails on a block without a tag, an ID no test asks for, or an exception that
names no line. ``python -m tests.doc_blocks`` lists every documented command and who runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELLS = ("bash", "sh", "shell", "console")
_FENCE = re.compile(r"^```(\w*)\s*$")
_TAG = re.compile(r"^<!--\s*(.*?)\s*-->$")
_EXCEPT = re.compile(r'^except\s+"([^"]+)"\s*:\s*(.+)$')


def doc_files() -> list[Path]:
    """The documentation a user reads: the README, docs/ and the examples' READMEs."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(ROOT.glob("examples/*/README.md"))]


@dataclass(frozen=True)
class DocBlock:
    """One fenced shell block and its tag."""

    path: Path
    line: int  # of the opening fence, 1-based
    text: str
    tag: str | None  # the comment's text, None when the line before the fence is no comment
    id: str | None = None  # doc-test blocks
    excepts: tuple[tuple[str, str], ...] = ()  # (TEXT, WHY)
    reason: str | None = None  # not-run blocks

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def lines(self) -> list[str]:
        """The commands, one per entry (continued lines joined with their backslash-newline), comments and
        blank lines dropped."""
        out: list[str] = []
        pending = ""
        for raw in self.text.splitlines():
            if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
                continue
            pending += raw
            if raw.rstrip().endswith("\\"):
                pending += "\n"
                continue
            out.append(pending)
            pending = ""
        if pending:
            out.append(pending)
        return out

    def skipped(self) -> list[str]:
        """The commands an ``except`` names (no test runs them)."""
        return [c for c in self.lines() if any(text in c for text, _ in self.excepts)]

    def commands(self) -> list[str]:
        """The commands a test runs: every line but the skipped ones."""
        skip = self.skipped()
        return [c for c in self.lines() if c not in skip]


def _parse_tag(block: DocBlock) -> DocBlock:
    tag = block.tag or ""
    if tag.startswith("doc-test:"):
        head, *rest = [part.strip() for part in tag.removeprefix("doc-test:").split(";")]
        excepts = []
        for part in rest:
            m = _EXCEPT.match(part)
            if m is None:
                raise ValueError(f'{block.where}: cannot read {part!r} (expected: except "TEXT": WHY)')
            excepts.append((m.group(1), m.group(2).strip()))
        return DocBlock(block.path, block.line, block.text, tag, head, tuple(excepts))
    if tag.startswith("not run by tests:"):
        return DocBlock(block.path, block.line, block.text, tag, reason=tag.removeprefix("not run by tests:").strip())
    return block


def blocks(paths: list[Path] | None = None) -> list[DocBlock]:
    """Every fenced shell block of the documentation, with its tag read."""
    out = []
    for path in paths or doc_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        n = 0
        while n < len(lines):
            m = _FENCE.match(lines[n])
            if m is None:
                n += 1
                continue
            end = next((i for i in range(n + 1, len(lines)) if lines[i].startswith("```")), len(lines))
            if m.group(1) in SHELLS:
                before = next((lines[i].strip() for i in range(n - 1, -1, -1) if lines[i].strip()), "")
                t = _TAG.match(before)
                block = DocBlock(path, n + 1, "\n".join(lines[n + 1 : end]) + "\n", t.group(1) if t else None)
                out.append(_parse_tag(block))
            n = end + 1
    return out


def doc_block(block_id: str) -> DocBlock:
    """The one block tagged ``doc-test: block_id``."""
    found = [b for b in blocks() if b.id == block_id]
    assert len(found) == 1, f"{len(found)} documentation blocks are tagged doc-test: {block_id}"
    return found[0]


def run_commands(commands: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 900) -> list[str]:
    """Run documented commands in order in one bash (stop at the first failure, which fails the test); the output
    (stdout and stderr) of each. Background jobs a command starts (``... &``) are ended when the script ends."""
    import subprocess

    script = ["set -eo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for n, command in enumerate(commands):
        script += [f"echo '@@@ {n}'", "{ " + command, "} 2>&1"]  # the newline ends a trailing comment
    res = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    parts = re.split(r"^@@@ (\d+)\n", res.stdout, flags=re.M)[1:]
    out = {int(parts[i]): parts[i + 1] for i in range(0, len(parts), 2)}
    last = max(out, default=-1)
    assert res.returncode == 0, (
        f"documented command failed (exit {res.returncode}):\n{commands[last] if last >= 0 else ''}\n"
        f"{out.get(last, '')[-4000:]}{res.stderr[-2000:]}"
    )
    return [out[n] for n in range(len(commands))]


def main() -> None:
    """Print every documented command and who runs it."""
    for b in blocks():
        who = f"doc-test {b.id}" if b.id else f"not run: {b.reason}" if b.reason else "UNTAGGED"
        print(f"{b.where}  [{who}]")
        for line in b.lines():
            why = next((w for text, w in b.excepts if text in line), None)
            mark = "  run " if b.id and why is None else "  --- "
            print(mark + line.replace("\n", "\n      ") + (f"\n        (not run: {why})" if why else ""))


if __name__ == "__main__":
    main()
