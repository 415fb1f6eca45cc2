"""Per-slot vocabularies: canonical values, synonyms, exclusivity, question types.

The five slots of the paper's claim battery are ``modality``, ``region``,
``plane`` (view), ``finding`` (primary finding) and ``attribute`` (one
answer-relevant attribute). The term lists ship as package data
(``boe/vocab/data/*.txt``), derived from the VQA-Med 2019 answer sets and
VQA-RAD's question types by `scripts/derive_vocab.py` (terms only, never QA pairs).

    >>> from boe.vocab import vocabulary
    >>> vocabulary().canonical("modality", "MRI scan").value
    'mr'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = [
    "CLOSED_SLOTS",
    "SLOTS",
    "Canon",
    "QuestionType",
    "Vocabulary",
    "normalise",
    "vocabulary",
]

SLOTS: tuple[str, ...] = ("modality", "region", "plane", "finding", "attribute")
#: Slots whose values must come from the vocabulary (the record check rejects others).
CLOSED_SLOTS: frozenset[str] = frozenset({"modality", "region", "plane"})
#: Slots that hold one value per image: any two different values are rivals.
SINGLE_VALUED: frozenset[str] = frozenset({"modality", "region", "plane", "finding"})

_EMPTY = frozenset({"", "null", "n/a", "na", "unknown", "-", "empty", "not applicable"})
_NEGATIONS = frozenset({"no", "not", "without", "absent", "negative", "none"})
_ARTICLES = re.compile(r"^(?:an?|the)\s+")
_TOKEN = re.compile(r"[a-z0-9]+")


def normalise(text: str) -> str:
    """Lower case, single spaces, no surrounding punctuation or leading article."""
    t = re.sub(r"\s+", " ", text.replace("\t", " ")).strip().lower()
    t = t.strip(" .,;:!?\"'`()[]{}")
    return _ARTICLES.sub("", t).strip()


def _key(text: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(text.lower()))


@dataclass(frozen=True)
class Canon:
    """A canonicalised slot value."""

    slot: str
    value: str  # canonical value, or the normalised text when unknown
    known: bool  # found in the slot's vocabulary
    family: str | None  # exclusivity family; None: rivals nothing

    def rivals(self, other: Canon) -> bool:
        """Two different values that cannot both hold (the signed edge -1)."""
        return (
            self.slot == other.slot
            and self.family is not None
            and self.family == other.family
            and self.value != other.value
        )


@dataclass(frozen=True)
class QuestionType:
    """A VQA-RAD question type and the slot its answer fills."""

    name: str
    slot: str
    closed: bool  # a yes/no question


@dataclass(frozen=True)
class _Entry:
    canonical: str
    family: str
    exact: bool


class Vocabulary:
    """Canonical values and synonyms of every slot, loaded from the shipped term lists."""

    def __init__(
        self,
        tables: dict[str, dict[str, list[tuple[str, bool]]]],
        families: dict[str, dict[str, str]],
        question_types: list[tuple[str, str, list[str]]],
    ) -> None:
        self._values: dict[str, list[str]] = {}
        self._exact: dict[str, dict[tuple[str, ...], _Entry]] = {}
        self._phrase: dict[str, dict[tuple[str, ...], _Entry]] = {}
        self._longest: dict[str, int] = {}
        for slot, table in tables.items():
            self._values[slot] = list(table)
            exact: dict[tuple[str, ...], _Entry] = {}
            phrase: dict[tuple[str, ...], _Entry] = {}
            for canon, syns in table.items():
                fam = families.get(slot, {}).get(canon, slot)
                for term, exact_only in [(canon, False), *syns]:
                    key = _key(term)
                    if not key:
                        continue
                    entry = _Entry(canon, fam, exact_only)
                    exact.setdefault(key, entry)
                    if not exact_only:
                        phrase.setdefault(key, entry)
            self._exact[slot] = exact
            self._phrase[slot] = phrase
            self._longest[slot] = max((len(k) for k in phrase), default=1)
        self._qtypes = [(name, slot, [_key(k) for k in kws]) for name, slot, kws in question_types]

    def values(self, slot: str) -> list[str]:
        """Canonical values of a slot, in file order."""
        return list(self._values.get(slot, []))

    def is_known(self, slot: str, value: str) -> bool:
        return value in self._values.get(slot, ())

    def canonical(self, slot: str, text: str | None) -> Canon | None:
        """The canonical form of one slot value; None for an empty value."""
        if text is None:
            return None
        if slot not in SLOTS:
            raise ValueError(f"unknown slot {slot!r}; slots are {', '.join(SLOTS)}")
        norm = normalise(str(text))
        if norm in _EMPTY or (norm == "none" and slot != "finding"):
            return None
        key = _key(norm)
        hit = self._exact.get(slot, {}).get(key)
        if hit is None:
            hit, negated = self._scan(slot, key)
            if hit is not None and negated and slot == "finding":
                hit = _Entry("normal", "finding", False)
        if hit is not None:
            return Canon(slot, hit.canonical, True, hit.family)
        family = slot if slot in SINGLE_VALUED else None
        return Canon(slot, norm, False, family)

    def lookup(self, slot: str, text: str) -> Canon | None:
        """The canonical value when the whole text is a term of the slot (no phrase search)."""
        hit = self._exact.get(slot, {}).get(_key(normalise(text)))
        return None if hit is None else Canon(slot, hit.canonical, True, hit.family)

    def _scan(self, slot: str, key: tuple[str, ...]) -> tuple[_Entry | None, bool]:
        """The longest (then earliest) vocabulary phrase inside ``key``; and whether a negation precedes it."""
        table = self._phrase.get(slot, {})
        for n in range(min(self._longest.get(slot, 1), len(key)), 0, -1):
            for start in range(len(key) - n + 1):
                entry = table.get(key[start : start + n])
                if entry is not None:
                    negated = start > 0 and key[start - 1] in _NEGATIONS
                    return entry, negated
        return None, False

    def mentions(self, slot: str, text: str) -> list[str]:
        """Canonical values of ``slot`` named anywhere in ``text`` (phrase matches, in order, no repeats)."""
        key = _key(text)
        table = self._phrase.get(slot, {})
        out: list[str] = []
        covered = [False] * len(key)
        for n in range(min(self._longest.get(slot, 1), len(key)), 0, -1):
            for start in range(len(key) - n + 1):
                if any(covered[start : start + n]):
                    continue
                entry = table.get(key[start : start + n])
                if entry is not None:
                    covered[start : start + n] = [True] * n
                    if entry.canonical not in out:
                        out.append(entry.canonical)
        return out

    def question_type(self, question: str) -> QuestionType:
        """The VQA-RAD type of a question: the type whose keyword comes first (type order breaks ties), else OTHER."""
        key = _key(question)
        # "is it on the left or the right?" starts like a yes/no question but offers alternatives
        closed = bool(key) and key[0] in _YESNO_STARTS and "or" not in key
        best: tuple[bool, int, int] | None = None
        for rank, (name, _, keywords) in enumerate(self._qtypes):
            for kw in keywords:
                pos = _find(key, kw)
                # a specific type (modality, plane, organ, position, ...) outranks generic presence/abnormality
                cand = (name in _GENERIC_TYPES, pos, rank)
                if pos >= 0 and (best is None or cand < best):
                    best = cand
        if best is None:
            return QuestionType("OTHER", "attribute", closed)
        name, slot, _ = self._qtypes[best[2]]
        return QuestionType(name, slot, closed)


_GENERIC_TYPES = frozenset({"PRES", "ABN"})
_YESNO_STARTS = frozenset(
    {"is", "are", "was", "were", "does", "do", "did", "can", "could", "has", "have", "will", "should"}
)


def _find(key: tuple[str, ...], sub: tuple[str, ...]) -> int:
    """Token position of ``sub`` in ``key``, -1 when absent."""
    n = len(sub)
    if n == 0:
        return -1
    for i in range(len(key) - n + 1):
        if key[i : i + n] == sub:
            return i
    return -1


def _parse_table(text: str) -> tuple[dict[str, list[tuple[str, bool]]], dict[str, str]]:
    table: dict[str, list[tuple[str, bool]]] = {}
    families: dict[str, str] = {}
    family: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            family = line[1:-1]
            continue
        canon, _, rest = line.partition(":")
        canon = canon.strip()
        syns = []
        for s in rest.split(" | "):
            s = s.strip()
            if s:
                syns.append((s[1:], True) if s.startswith("=") else (s, False))
        table[canon] = syns
        if family is not None:
            families[canon] = family
    return table, families


@cache
def vocabulary() -> Vocabulary:
    """The shipped vocabulary (loaded once)."""
    root = resources.files("boe.vocab") / "data"
    tables: dict[str, dict[str, list[tuple[str, bool]]]] = {}
    families: dict[str, dict[str, str]] = {}
    for slot in SLOTS:
        table, fam = _parse_table((root / f"{slot}.txt").read_text(encoding="utf-8"))
        tables[slot] = table
        families[slot] = fam
    qtypes: list[tuple[str, str, list[str]]] = []
    for raw in (root / "question_types.txt").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head, _, kws = line.partition(":")
        name, _, slot = head.partition("->")
        qtypes.append((name.strip(), slot.strip(), [k.strip() for k in kws.split(" | ") if k.strip()]))
    return Vocabulary(tables, families, qtypes)
