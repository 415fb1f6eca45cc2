"""A small DOM of an HTML dump (Chromium's --dump-dom) and a CSS-like selector, for tests."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass(eq=False)
class Node:
    tag: str
    attrs: dict[str, str]
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def text(self) -> str:
        return "".join(self.texts) + "".join(c.text for c in self.children)

    def walk(self):
        for c in self.children:
            yield c
            yield from c.walk()

    def select(self, selector: str) -> list[Node]:
        """Descendants matching ``selector``: space-separated steps of tag, #id, .class, [attr] or [attr=value]."""
        steps = [_step(s) for s in selector.split()]
        found = [self]
        for st in steps:
            found = list(dict.fromkeys(n for f in found for n in f.walk() if st(n)))
        return found

    def one(self, selector: str) -> Node:
        hits = self.select(selector)
        assert len(hits) == 1, f"{selector!r}: {len(hits)} matches"
        return hits[0]


def _step(text: str):
    m = re.fullmatch(r"([a-zA-Z][\w-]*)?((?:[#.][\w/.-]+|\[[^\]]+\])*)", text)
    assert m, text
    tag = m.group(1)
    parts = re.findall(r"#[\w/.-]+|\.[\w-]+|\[[^\]]+\]", m.group(2) or "")

    def ok(n: Node) -> bool:
        if tag and n.tag != tag.lower():
            return False
        for p in parts:
            if p[0] == "#" and n.attrs.get("id") != p[1:]:
                return False
            if p[0] == "." and p[1:] not in n.classes:
                return False
            if p[0] == "[":
                name, _, value = p[1:-1].partition("=")
                if name not in n.attrs or (value and n.attrs[name] != value.strip("\"'")):
                    return False
        return True

    return ok


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in _VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.texts.append(data)


def parse(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root
