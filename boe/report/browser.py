"""Opening report pages in a headless Chromium: the DOM after load, screenshots, and how long opening took.

Uses the system's ``chromium`` (Debian's package) through its command line,
with the flags that keep it off the network. The page records when it was
opened itself (``data-open-ms`` on ``<html>``: milliseconds from navigation
start to the end of the load event, layout included), so the time does not
include the browser's own start-up.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BrowserError", "Opened", "dump_dom", "find_chromium", "open_page", "screenshot"]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(RuntimeError):
    """Chromium is missing or failed."""


def find_chromium() -> str | None:
    """The path of a Chromium binary (``BOE_CHROMIUM`` first), or None."""
    env = os.environ.get("BOE_CHROMIUM")
    if env:
        return env if Path(env).exists() else shutil.which(env)
    for name in _NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    exe = find_chromium()
    if exe is None:
        raise BrowserError("no chromium found (apt-get install chromium, or set BOE_CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="boe-chromium-") as profile:
        cmd = [exe, *FLAGS, f"--user-data-dir={profile}", *args]
        try:
            res = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BrowserError(f"chromium did not finish within {timeout:.0f} s") from exc
    if res.returncode != 0:
        tail = res.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise BrowserError(f"chromium exited with {res.returncode}: {' | '.join(tail)}")
    return res


def _url(page: str | Path, fragment: str | None) -> str:
    url = Path(page).resolve().as_uri()
    if fragment:
        from urllib.parse import quote

        url += "#" + quote(fragment, safe="/:=-_.~")
    return url


def dump_dom(
    page: str | Path, fragment: str | None = None, *, timeout: float = 120.0, budget_ms: int | None = None
) -> str:
    """The page's DOM as HTML after its load event (``budget_ms``: let scripts run that much virtual time first)."""
    args = ["--dump-dom"]
    if budget_ms is not None:
        args.insert(0, f"--virtual-time-budget={budget_ms}")
    return _run([*args, _url(page, fragment)], timeout).stdout.decode("utf-8", errors="replace")


def screenshot(
    page: str | Path,
    out: str | Path,
    fragment: str | None = None,
    *,
    size: tuple[int, int] = (1280, 2000),
    timeout: float = 120.0,
) -> Path:
    """A PNG screenshot of the page (the first ``size`` pixels)."""
    out = Path(out).resolve()
    _run(
        [
            f"--screenshot={out}",
            f"--window-size={size[0]},{size[1]}",
            "--virtual-time-budget=3000",
            _url(page, fragment),
        ],
        timeout,
    )
    if not out.is_file():
        raise BrowserError(f"chromium wrote no screenshot to {out}")
    return out


@dataclass(frozen=True)
class Opened:
    """A page as Chromium opened it."""

    dom: str
    open_ms: float  # navigation start to the end of the load event, layout included
    ready_ms: float  # navigation start to the end of the page script's start-up


def open_page(page: str | Path, fragment: str | None = None, *, timeout: float = 120.0) -> Opened:
    """Open a report page and read back its DOM and the times it recorded."""
    dom = dump_dom(page, fragment, timeout=timeout)
    head = dom[: dom.find(">", dom.find("<html")) + 1]
    open_ms = re.search(r'data-open-ms="(\d+)"', head)
    ready_ms = re.search(r'data-ready-ms="(\d+)"', head)
    if open_ms is None or ready_ms is None:
        raise BrowserError("the page did not record when it opened (its script did not run)")
    return Opened(dom, float(open_ms.group(1)), float(ready_ms.group(1)))
