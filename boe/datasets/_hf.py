"""hf: datasets where the Hugging Face ecosystem keeps them: parquet, arrow, `save_to_disk` folders, imagefolders.

Layouts read (a folder, or one file of it):

- parquet files as the Hub publishes them (``data/train-00000-of-00001.parquet``,
  ``default/test/0000.parquet``, ``test.parquet``);
- a ``datasets.save_to_disk`` folder: ``dataset_dict.json`` naming the splits,
  each split folder holding ``state.json``, ``dataset_info.json`` and arrow
  stream files (or one such folder: a saved single split); any arrow file;
- an imagefolder: ``metadata.jsonl`` / ``metadata.csv`` / ``metadata.parquet``
  whose ``file_name`` column names each image relative to that file.

A record is a row; its columns are mapped to fields with ``columns``
(``{"question": "query", "image": "img"}``, or ``"question=query,image=img"``;
on the command line ``--columns``). Unmapped fields take the first standard
name present: question (``question``, ``query``), answer (``answer``,
``answers``), image (``image``, ``images``, ``image_path``, ``file_name``), id
(``id``, ``qid``, ``question_id``; else the row number in its split) and
answer_type (``answer_type``; else yes/no answers are closed, others open).
An answer list gives the reference and its alternatives; an image list gives
several figures. Other scalar columns become metadata.

Images are the ``Image`` feature's ``{bytes, path}`` struct, raw bytes, or a
path. A dataset whose files carry image bytes is served from a
content-addressed cache (``$BOE_CACHE_DIR/images``, else
``~/.cache/boe/images``): each image is written there once, and that folder is
the dataset root. Paths are looked up under the dataset folder, never outside
it. Splits come from ``dataset_dict.json`` or from a split word in a file or
folder name (train / training, validation / valid / val / dev, test / testing
/ eval). Reading parquet and arrow needs pyarrow (the ``hf`` extra).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boe.datasets._context import (
    LoadContext,
    RecordProblem,
    clean_text,
    find_files,
    head,
    read_csv,
    read_jsonl,
    require_fields,
    text_field,
)
from boe.datasets._item import AnswerType, DatasetItem, ImageFile
from boe.datasets._registry import register_format
from boe.datasets.evaluate import normalise
from boe.errors import ConfigError, InputError, MissingExtraError

__all__ = ["FIELDS", "image_cache", "parse_columns"]

#: The fields a column can be mapped to, and the standard column names each takes when it is not mapped.
FIELDS: dict[str, tuple[str, ...]] = {
    "question": ("question", "Question", "query"),
    "answer": ("answer", "Answer", "answers"),
    "image": ("image", "images", "Image", "image_path", "file_name"),
    "id": ("id", "qid", "question_id"),
    "answer_type": ("answer_type",),
}
_REQUIRED = ("question", "answer", "image")
_SPLIT_WORDS = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
    "testing": "test",
    "eval": "test",
    "evaluation": "test",
}
_METADATA = ("metadata.jsonl", "metadata.csv", "metadata.parquet")
_DATA = ("*.parquet", "*/*.parquet", "*/*/*.parquet", "*.arrow", "*/*.arrow", "*/*/*.arrow")
_IGNORED_NAMES = {"data", "default", "snapshots"}


def parse_columns(columns: str | Mapping[str, str] | None) -> dict[str, str]:
    """``"question=q,answer=a"`` or a mapping, checked: field -> column name."""
    if columns is None:
        return {}
    if isinstance(columns, str):
        out: dict[str, str] = {}
        for part in (p.strip() for p in columns.split(",")):
            if not part:
                continue
            field, eq, column = (s.strip() for s in part.partition("="))
            if not eq or not field or not column:
                raise ConfigError(f"columns: {part!r} is not FIELD=COLUMN (e.g. question=query,image=img)")
            if field in out:
                raise ConfigError(f"columns: field {field!r} is mapped twice")
            out[field] = column
    elif isinstance(columns, Mapping):
        out = {str(k): v for k, v in columns.items()}
        bad = [k for k, v in out.items() if not isinstance(v, str) or not v.strip()]
        if bad:
            raise ConfigError(f"columns: field(s) {bad} must map to a column name")
    else:
        raise ConfigError(f"columns must be FIELD=COLUMN,... or a mapping, got {type(columns).__name__}")
    unknown = sorted(set(out) - set(FIELDS))
    if unknown:
        raise ConfigError(f"columns: unknown field(s) {unknown}; fields: {', '.join(FIELDS)}")
    return out


def image_cache() -> Path:
    """Where images carried inside dataset files are written: ``$BOE_CACHE_DIR/images``, else the user cache."""
    base = os.environ.get("BOE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "boe"
    )
    return Path(base).expanduser() / "images"


# ---- what to read -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """One file of records and the split it belongs to."""

    file: Path
    split: str | None


def _split_of(path: Path, top: Path) -> str | None:
    """The split a split word in the file name, else in a folder name below ``top``, names (closest first)."""
    parts = [path.stem, *(p.name for p in path.parents if p.is_relative_to(top) and p != top)]
    for part in parts:
        for word in re.split(r"[^a-z0-9]+", part.lower()):
            if word in _SPLIT_WORDS:
                return _SPLIT_WORDS[word]
    return None


def _saved(folder: Path, split: str | None) -> list[_Source]:
    """The arrow files of one `save_to_disk` split folder, in ``state.json`` order."""
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        names = [str(f["filename"]) for f in state.get("_data_files") or []]
    except (OSError, ValueError, TypeError, KeyError):
        names = []
    files = [folder / n for n in names if (folder / n).is_file()] or sorted(folder.glob("data-*.arrow"))
    return [_Source(f, split) for f in files]


def _sources(p: Path) -> list[_Source]:
    """Every record file of a layout, with its split."""
    if p.is_file():
        top = p.parent.parent if p.parent.name.lower() in _SPLIT_WORDS else p.parent
        return [_Source(p, _split_of(p, top))]
    if (p / "dataset_dict.json").is_file():
        try:
            splits = json.loads((p / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
        except (OSError, ValueError, TypeError, KeyError):
            splits = sorted(d.name for d in p.iterdir() if (d / "state.json").is_file())
        return [s for name in splits for s in _saved(p / str(name), str(name))]
    if (p / "state.json").is_file():
        return _saved(p, None)
    meta = [f for f in find_files(p, [*_METADATA, *(f"*/{m}" for m in _METADATA)]) if f.name in _METADATA]
    data = [f for f in find_files(p, _DATA) if f not in meta and not f.name.startswith("cache-")]
    return [_Source(f, _split_of(f, p)) for f in [*meta, *data]]


def _is_metadata(f: Path) -> bool:
    if f.name == "metadata.jsonl":
        return '"file_name"' in head(f, 4096)
    if f.name == "metadata.csv":
        return "file_name" in head(f, 4096).split("\n", 1)[0]
    return f.name == "metadata.parquet"


def _sniff(p: Path) -> bool:
    if p.is_file():
        return p.suffix in (".parquet", ".arrow") or (p.name in _METADATA and _is_metadata(p))
    if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
        return True
    return any(f.suffix in (".parquet", ".arrow") or _is_metadata(f) for f in (s.file for s in _sources(p)))


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as exc:
        raise MissingExtraError("hf", "pyarrow", "reading parquet and arrow datasets") from exc
    return pyarrow


def _schema(f: Path) -> Any:
    """The arrow schema of a parquet or arrow file (nothing else is read)."""
    pa = _pyarrow()
    try:
        if f.suffix == ".parquet":
            return pa.parquet.read_schema(f)
        return (pa.ipc.open_file(f) if _is_ipc_file(f) else pa.ipc.open_stream(f)).schema
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{f}: unreadable {f.suffix[1:]} file ({exc})") from exc


def _is_ipc_file(f: Path) -> bool:
    """An arrow IPC file (random access, Feather v2) rather than the stream `save_to_disk` writes."""
    with f.open("rb") as fh:
        return fh.read(6) == b"ARROW1"


def _carries_bytes(t: Any) -> bool:
    """Whether an arrow type holds binary data (bytes, the Image feature's struct, or a list of them)."""
    pa = _pyarrow()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return True
    if pa.types.is_struct(t):
        return any(_carries_bytes(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _carries_bytes(t.value_type)
    return False


def _embedded(sources: list[_Source]) -> bool:
    """Whether any parquet or arrow file has a column of bytes (the Image feature's struct, or raw bytes)."""
    data = (s.file for s in sources if s.file.suffix in (".parquet", ".arrow"))
    return any(_carries_bytes(f.type) for file in data for f in _schema(file))


def _root(p: Path) -> Path:
    """The image cache when any file carries image bytes (every image is served from it then), else the folder."""
    if not _embedded(_sources(p)):
        return p if p.is_dir() else p.parent
    cache = image_cache()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"cannot create {cache} for the images carried in {p} ({exc.strerror or exc}); "
            "set BOE_CACHE_DIR to a writable folder"
        ) from exc
    return cache


def _name(p: Path) -> str:
    """The dataset's name: its folder's (``datasets--owner--name`` of a Hub cache gives ``name``)."""
    for d in [p if p.is_dir() else p.parent, *(p.parents if p.is_dir() else p.parent.parents)]:
        name = d.name.rsplit("--", 1)[-1]
        low = name.lower()
        if name and low not in _SPLIT_WORDS and low not in _IGNORED_NAMES and not re.fullmatch(r"[0-9a-f]{32,}", low):
            return name
    return "hf"


# ---- reading records ----------------------------------------------------------------------------------------


def _table(ctx: LoadContext, f: Path, mapping: Mapping[str, str]) -> tuple[dict[str, str], Iterator[tuple[int, Any]]]:
    """Field -> column of a record file, and (row or line, record) for each of its records."""
    if f.suffix in (".parquet", ".arrow"):
        return _arrow_table(ctx, f, mapping)
    rows = read_jsonl(ctx, f) if f.suffix == ".jsonl" else read_csv(ctx, f, ())
    first = next(rows, None)
    if first is None:
        return {}, iter(())
    names = list(first[1]) if isinstance(first[1], Mapping) else []

    def chained() -> Iterator[tuple[int, Any]]:
        yield first
        yield from rows

    return _resolve(ctx, f, names, mapping), chained()


def _arrow_table(
    ctx: LoadContext, f: Path, mapping: Mapping[str, str]
) -> tuple[dict[str, str], Iterator[tuple[int, Any]]]:
    pa = _pyarrow()
    schema = _schema(f)
    columns = _resolve(ctx, f, list(schema.names), mapping)
    scalar = [fld.name for fld in schema if pa.types.is_primitive(fld.type) or pa.types.is_string(fld.type)]
    keep = list(dict.fromkeys([*columns.values(), *scalar]))  # never an unmapped column of bytes

    def rows() -> Iterator[tuple[int, Any]]:
        n = 0
        try:
            if f.suffix == ".parquet":
                batches = pa.parquet.ParquetFile(f).iter_batches(batch_size=64, columns=keep)
            elif _is_ipc_file(f):
                reader = pa.ipc.open_file(f)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            else:
                batches = iter(pa.ipc.open_stream(f))
            for batch in batches:
                for row in batch.select(keep).to_pylist():
                    n += 1
                    yield n, row
        except (OSError, pa.ArrowException) as exc:
            raise ctx.file_error(f, f"unreadable {f.suffix[1:]} file after row {n} ({exc})") from exc

    return columns, rows()


def _resolve(ctx: LoadContext, f: Path, names: list[str], mapping: Mapping[str, str]) -> dict[str, str]:
    """Field -> column of one file: the mapping, else the first standard name present; checked."""
    out: dict[str, str] = {}
    has = ", ".join(names) or "none"
    missing: list[str] = []
    for field, standard in FIELDS.items():
        if field in mapping:
            if mapping[field] not in names:
                raise ctx.file_error(f, f"has no column {mapping[field]!r} (mapped to {field}); its columns: {has}")
            out[field] = mapping[field]
            continue
        found = next((c for c in standard if c in names), None)
        if found is None and field == "image":
            found = next((c for c in names if c.endswith("_file_name")), None)  # imagefolder's other image columns
        if found is not None:
            out[field] = found
        elif field in _REQUIRED:
            missing.append(field)
    if missing:
        looked = "; ".join(f"{m}: {', '.join(FIELDS[m])}" for m in missing)
        flag = ",".join(f"{m}=COLUMN" for m in missing)
        raise ctx.file_error(
            f,
            f"has no column for {' or '.join(missing)} (looked for {looked}); its columns: {has}. "
            f"Name them: --columns {flag} (columns= in Python)",
        )
    return out


class _Images:
    """Turns an image value into files: bytes into the cache, paths under the dataset folder."""

    def __init__(self, ctx: LoadContext, folder: Path) -> None:
        self.ctx = ctx
        self.folder = folder.resolve()
        self.cache = image_cache()
        self.cached = ctx.root == self.cache.resolve()

    def files(self, value: Any, base: Path) -> list[ImageFile]:
        values = value if isinstance(value, list) else [value]
        if not values:
            raise RecordProblem("the image list is empty")
        out: list[ImageFile] = []
        seen: set[str] = set()
        for i, v in enumerate(values, 1):
            data, name = self._parts(v)
            stem = Path(name).stem if name else ("image" if len(values) == 1 else f"image-{i}")
            fig, n = stem, 2
            while fig in seen:
                fig, n = f"{stem}-{n}", n + 1
            seen.add(fig)
            if data:
                out.append(ImageFile(fig, self._write(data)))
            elif not name:
                raise RecordProblem("an image has neither bytes nor a path")
            elif self.cached:
                out.append(ImageFile(fig, self._copy(name, base)))
            else:
                rel = os.path.relpath(base, self.ctx.root) if base.resolve().is_relative_to(self.ctx.root) else ""
                out.append(self.ctx.image(name, dirs=(rel, ""), figure=fig))
        return out

    @staticmethod
    def _parts(v: Any) -> tuple[bytes | None, str | None]:
        if isinstance(v, Mapping):
            data, name = v.get("bytes"), v.get("path")
        elif isinstance(v, bytes | bytearray):
            data, name = v, None
        elif isinstance(v, str):
            data, name = None, v
        else:
            raise RecordProblem(f"an image is {type(v).__name__}: neither bytes, a path nor a {{bytes, path}} struct")
        if data is not None and not isinstance(data, bytes | bytearray):
            raise RecordProblem(f"an image's bytes are {type(data).__name__}")
        if name is not None and (not isinstance(name, str) or "\0" in name):
            raise RecordProblem(f"an image's path is not text: {name!r}")
        return (bytes(data) if data else None), (name.strip() or None if name else None)

    def _write(self, data: bytes) -> Path:
        """The cache file holding ``data`` (written once; concurrent writers replace it atomically)."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.cache / digest[:2] / f"{digest}{_suffix(data)}"
        if target.is_file():
            return target
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise InputError(
                f"cannot write images carried in the dataset to {self.cache} ({exc.strerror or exc}); "
                "set BOE_CACHE_DIR to a writable folder"
            ) from exc
        return target

    def _copy(self, name: str, base: Path) -> Path:
        """A path-only image of a dataset served from the cache: found under the dataset folder, then cached."""
        candidates = [Path(name)] if os.path.isabs(name) else [base / name, self.folder / name]
        for cand in candidates:
            resolved = cand.resolve()
            if not resolved.is_relative_to(self.folder):
                raise RecordProblem(f"image path {name!r} lies outside the dataset folder {str(self.folder)!r}", "path")
            if resolved.is_file():
                try:
                    return self._write(resolved.read_bytes())
                except OSError as exc:
                    raise RecordProblem(f"cannot read image {name!r}: {exc.strerror or exc}") from exc
        if self.ctx.require_images:
            raise RecordProblem(f"image file not found: {candidates[0]}", "missing_image")
        return candidates[0]


def _suffix(data: bytes) -> str:
    """A file suffix for image bytes, from their signature (the reader decodes by content anyway)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    if len(data) > 132 and data[128:132] == b"DICM":
        return ".dcm"
    for magic, suffix in ((b"GIF8", ".gif"), (b"BM", ".bmp"), (b"II*\0", ".tif"), (b"MM\0*", ".tif")):
        if data.startswith(magic):
            return suffix
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ".webp"
    return ".img"


def _answers(rec: Mapping[str, Any], column: str) -> tuple[str, list[str]]:
    """The reference answer and its alternatives (an answer list: the first, then the others)."""
    value = rec[column]
    if not isinstance(value, list):
        return text_field(rec, column), []
    texts = [clean_text(v) for v in value if isinstance(v, str | int | float) and not isinstance(v, bool)]
    texts = list(dict.fromkeys(t for t in texts if t))
    if not texts:
        raise RecordProblem(f"field {column!r} holds no answer")
    return texts[0], texts[1:]


def _answer_type(rec: Mapping[str, Any], column: str | None, reference: str) -> AnswerType:
    """The answer type a column gives (OPEN / CLOSED, VQA's yes/no), else closed for a yes/no answer."""
    given = clean_text(rec.get(column) or "").upper() if column else ""
    if given == "OPEN":
        return "open"
    if given in ("CLOSED", "YES/NO"):
        return "closed"
    return "closed" if normalise(reference) in ("yes", "no") else "open"


def _metadata_value(v: Any) -> bool:
    return v is not None and (isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 200))


@register_format(
    "hf",
    sniff=_sniff,
    root=_root,
    dataset_name=_name,
    description="Hugging Face layouts: parquet / arrow files, a save_to_disk folder, an imagefolder with metadata",
)
def load_hf(
    path: Path,
    ctx: LoadContext,
    *,
    split: str | None = None,
    columns: str | Mapping[str, str] | None = None,
) -> Iterator[DatasetItem]:
    """Load the records of a Hugging Face layout (every split, or ``split``), its columns mapped by ``columns``."""
    mapping = parse_columns(columns)
    sources = _sources(path)
    if not sources:
        raise ctx.file_error(path, "no parquet or arrow files, save_to_disk folder or imagefolder metadata")
    if split is not None:
        want = _SPLIT_WORDS.get(split.lower(), split)
        named = sorted({s.split for s in sources if s.split})
        sources = [s for s in sources if s.split == want]
        if not sources:
            has = ", ".join(named) if named else "no named splits"
            raise ConfigError(f"split {split!r} is not in {path}; it has: {has}")
    images = _Images(ctx, path if path.is_dir() else path.parent)
    if not images.cached and _embedded(sources):
        raise ConfigError(f"root: the images carried in {path} are served from {images.cache}; leave root out")
    rows_seen: dict[str | None, int] = {}
    for src in sources:
        cols, records = _table(ctx, src.file, mapping)
        for line, raw in records:
            index = rows_seen[src.split] = rows_seen.get(src.split, -1) + 1  # the row's index in its split
            with ctx.record(src.file, line):
                rec = require_fields(raw, [cols[f] for f in _REQUIRED])
                reference, alternatives = _answers(rec, cols["answer"])
                given = rec.get(cols["id"]) if "id" in cols else None
                given_id = "" if given is None else clean_text(given)
                mapped = set(cols.values())
                metadata = {k: v for k, v in rec.items() if k not in mapped and _metadata_value(v)}
                metadata.update(split=src.split, row=index)  # a column named split does not hide the file's
                yield ctx.item(
                    question_id=f"{src.split or 'all'}-{given_id or index}",
                    question=text_field(rec, cols["question"]),
                    reference=reference,
                    alternatives=alternatives,
                    answer_type=_answer_type(rec, cols.get("answer_type"), reference),
                    images=images.files(rec[cols["image"]], src.file.parent),
                    metadata=metadata,
                    answer_raw=json.dumps(rec[cols["answer"]], ensure_ascii=False)
                    if isinstance(rec[cols["answer"]], list)
                    else str(rec[cols["answer"]]),
                )
