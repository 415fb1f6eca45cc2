"""Opening report pages in a headless Chromium: the DOM after load, screenshots, and how long opening took.

Uses the system's ``chromium`` (Debian's package) through its command line,
with the flags that keep it off the network. The page records when it was
opened itself (``data-open-ms`` on ``<html>``: milliseconds from navigation
start to the end of the load event, layout included), so the time does not
include the browser's own start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
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


def _exe() -> str:
    exe = find_chromium()
    if exe is None:
        raise BrowserError("no chromium found (apt-get install chromium, or set BOE_CHROMIUM)")
    return exe


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    exe = _exe()
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
    page: str | Path,
    fragment: str | None = None,
    *,
    timeout: float = 120.0,
    budget_ms: int | None = None,
    until: str | None = None,
) -> str:
    """The page's DOM as HTML after its load event.

    ``budget_ms``: let scripts run that much virtual time first. ``until``: a JavaScript
    condition to wait for instead, in real time (``BrowserError`` when ``timeout`` passes first).
    """
    if until is not None:
        return _dump_when(_url(page, fragment), until, timeout)
    args = ["--dump-dom"]
    if budget_ms is not None:
        args.insert(0, f"--virtual-time-budget={budget_ms}")
    return _run([*args, _url(page, fragment)], timeout).stdout.decode("utf-8", errors="replace")


class _Pipe:
    """The DevTools protocol over ``--remote-debugging-pipe``: JSON messages ending in a NUL byte."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._out, self._in, self._deadline = proc.stdin, proc.stdout.fileno(), deadline
        self._buf, self._id = b"", 0
        self._events: list[dict[str, object]] = []

    def _read(self) -> dict[str, object]:
        while b"\0" not in self._buf:
            left = self._deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed its DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        got: dict[str, object] = json.loads(msg)
        return got

    def call(self, method: str, session: str | None = None, **params: object) -> dict[str, object]:
        """Send a command and return its result (events that arrive meanwhile are kept)."""
        self._id += 1
        msg: dict[str, object] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self._out.write(json.dumps(msg).encode() + b"\0")
        self._out.flush()
        while True:
            got = self._read()
            if got.get("id") != self._id:
                self._events.append(got)
            elif "error" in got:
                raise BrowserError(f"chromium: {method} failed: {got['error']}")
            else:
                result = got.get("result")
                return result if isinstance(result, dict) else {}

    def wait_event(self, method: str) -> None:
        """Wait until the event ``method`` arrived."""
        while not any(e.get("method") == method for e in self._events):
            self._events.append(self._read())


# polls in real time (not virtual time, which a loaded machine can use up before the page's callbacks run)
_POLL = (
    "new Promise(function (done) { (function poll() {"
    " if (%s) done(document.documentElement.outerHTML); else setTimeout(poll, 20); })(); })"
)


def _dump_when(url: str, condition: str, timeout: float) -> str:
    """The DOM after the load event of ``url`` once the JavaScript ``condition`` holds."""
    exe = _exe()
    with tempfile.TemporaryDirectory(prefix="boe-chromium-") as tmp:
        # the pipe's two ends go to the child as stdin and stdout; the shell moves them to fds 3 and 4
        cmd = ["/bin/sh", "-c", 'exec "$@" 3<&0 4>&1 </dev/null >/dev/null', "sh"]
        cmd += [exe, *FLAGS, f"--user-data-dir={tmp}/profile", "--remote-debugging-pipe", "about:blank"]
        with open(f"{tmp}/stderr", "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        cdp = _Pipe(proc, time.monotonic() + timeout)
        try:
            target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
            session = str(cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"])
            cdp.call("Page.enable", session)
            cdp.call("Page.navigate", session, url=url)
            cdp.wait_event("Page.loadEventFired")
            res = cdp.call(
                "Runtime.evaluate", session, expression=_POLL % condition, awaitPromise=True, returnByValue=True
            )
            if "exceptionDetails" in res:
                raise BrowserError(f"the condition {condition!r} failed: {res['exceptionDetails']}")
            result = res["result"]
            assert isinstance(result, dict)
            return str(result["value"])
        except TimeoutError:
            raise BrowserError(f"the page did not reach {condition!r} within {timeout:.0f} s") from None
        finally:
            with contextlib.suppress(BrowserError, OSError, TimeoutError):
                cdp.call("Browser.close")
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
