"""The one error module of `boe`.

Every error a user can cause is a `BoeError`; the CLI prints these without a
traceback and exits with the class's ``exit_code`` (2: usage or
configuration, fixable before any work starts; 1: the work ran and failed).
Third-party errors are converted at the boundary with
``raise ... from exc``. A programming error is never wrapped.

    BoeError
    ├── ConfigError          invalid configuration or command-line option
    ├── LedgerError          a ledger record breaks ledger-v1
    │   └── RecordError      one record, with file, line, question and field
    ├── CalibrationError     unreadable or invalid calibration file
    ├── StoreError           database problems (schema version, connection)
    │   ├── SchemaVersionError
    │   └── StoreNotFoundError   no store or run at the address given (a usage error)
    ├── InputError           unreadable / missing / non-image input, path outside root
    ├── ModelError           the model endpoint failed after retries, or replied badly
    ├── ToolError            an evidence tool failed (becomes an `unresolved` outcome)
    └── MissingExtraError    an optional extra (sam, postgres, agent) is not installed

    KeyboardInterrupt
    └── Terminated           the process was asked to stop (SIGTERM); whatever handles Ctrl-C handles it
"""

from __future__ import annotations

__all__ = [
    "BoeError",
    "CalibrationError",
    "ConfigError",
    "InputError",
    "LedgerError",
    "MissingExtraError",
    "ModelError",
    "RecordError",
    "SchemaVersionError",
    "StoreError",
    "StoreNotFoundError",
    "Terminated",
    "ToolError",
]


class BoeError(Exception):
    """Base class of every error a user can cause."""

    #: The CLI's exit code: 2 for a usage or configuration error, 1 when the work ran and failed.
    exit_code = 1


class ConfigError(BoeError):
    """Invalid configuration or command-line option."""

    exit_code = 2


class LedgerError(BoeError):
    """A ledger (file or stream) cannot be read."""

    exit_code = 2


class RecordError(LedgerError):
    """One ledger record breaks the ledger-v1 rules."""

    exit_code = 1  # the input was read; some of its records are bad

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        question_id: str | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.question_id = question_id
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line naming file, line, question and field."""
        where = []
        if self.source is not None:
            where.append(f"{self.source}:{self.line}" if self.line is not None else self.source)
        elif self.line is not None:
            where.append(f"line {self.line}")
        if self.question_id is not None:
            where.append(f"question {self.question_id!r}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


class CalibrationError(BoeError):
    """A calibration file is unreadable or invalid."""

    exit_code = 2


class StoreError(BoeError):
    """The store cannot be opened or written."""


class SchemaVersionError(StoreError):
    """The database schema is older or newer than this version of boe understands."""

    exit_code = 2


class StoreNotFoundError(StoreError):
    """The store or run named does not exist, or the URL names no database boe opens: a usage error."""

    exit_code = 2


class InputError(BoeError):
    """An input (image, dataset file, path) is missing, unreadable or not allowed."""

    exit_code = 2


class ModelError(BoeError):
    """The model endpoint failed after retries or returned an unusable reply."""


class ToolError(BoeError):
    """An evidence tool failed; the agent records it as an unresolved outcome."""


class MissingExtraError(BoeError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    exit_code = 2

    def __init__(self, extra: str, package: str, purpose: str) -> None:
        self.extra = extra
        self.package = package
        super().__init__(f"{purpose} needs the '{package}' package: pip install 'best-of-evidence[{extra}]'")


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM: systemd, Kubernetes, Slurm) and stopped as on Ctrl-C."""
