"""Every shell block of the documentation is run by a test as written, or says why not (see tests/doc_blocks.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.doc_blocks import ROOT, blocks, doc_files

HERE = Path(__file__).resolve()


def _callers() -> dict[str, list[str]]:
    """Block id -> the test files that ask for it with doc_block("ID")."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.resolve() in (HERE, (ROOT / "tests" / "doc_blocks.py").resolve()):
            continue
        for block_id in re.findall(r"""doc_block\(\s*["']([^"']+)["']\s*\)""", path.read_text(encoding="utf-8")):
            found.setdefault(block_id, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_shell_block_is_run_by_a_test_or_says_why_not() -> None:
    found = blocks()
    assert found, "no shell blocks found: the documentation moved?"
    problems = []
    callers = _callers()
    ids: dict[str, str] = {}
    for b in found:
        if b.id is None and b.reason is None:
            problems.append(f"{b.where}: no tag (<!-- doc-test: ID --> or <!-- not run by tests: WHY -->) before it")
            continue
        if b.reason is not None:
            if len(b.reason) < 10:
                problems.append(f"{b.where}: 'not run by tests' needs a reason, got {b.reason!r}")
            continue
        assert b.id is not None
        if b.id in ids:
            problems.append(f"{b.where}: doc-test id {b.id!r} is also used at {ids[b.id]}")
        ids[b.id] = b.where
        if b.id not in callers:
            problems.append(f'{b.where}: no test calls doc_block("{b.id}")')
        for text, why in b.excepts:
            if not any(text in line for line in b.lines()):
                problems.append(f"{b.where}: except {text!r} names no line of the block")
            if len(why) < 10:
                problems.append(f"{b.where}: except {text!r} needs a reason")
        if not b.commands():
            problems.append(f"{b.where}: doc-test {b.id!r} leaves no command to run")
    assert not problems, "\n".join(problems)


def test_the_harness_reads_tags_and_finds_an_untagged_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        'text\n\n<!-- doc-test: x; except "vllm": needs a GPU server -->\n```bash\n# a comment\nvllm serve m\n'
        "boe ask a.png q \\\n    --k 2\n```\n\n```bash\nboe plugins\n```\n\n<!-- not run by tests: a template -->\n"
        "```sh\nboe ask ...\n```\n\n```python\nprint(1)\n```\n",
        encoding="utf-8",
    )
    tagged, untagged, reasoned = blocks([page])
    assert tagged.id == "x" and tagged.excepts == (("vllm", "needs a GPU server"),)
    assert tagged.skipped() == ["vllm serve m"] and tagged.commands() == ["boe ask a.png q \\\n    --k 2"]
    assert untagged.tag is None and untagged.id is None and untagged.reason is None
    assert reasoned.reason == "a template" and reasoned.lines() == ["boe ask ..."]


def test_the_documentation_it_reads() -> None:
    names = {str(p.relative_to(ROOT)) for p in doc_files()}
    assert {"README.md", "docs/extending/plugins.md", "examples/boe-chartqa/README.md"} <= names
