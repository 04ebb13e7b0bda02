"""A small headless Chromium driver for page tests: the DevTools protocol over a pipe.

Standard library only. Chromium started with ``--remote-debugging-pipe`` reads
commands on its file descriptor 3 and writes answers and events on its descriptor 4,
each message one JSON object followed by a NUL byte. :class:`Browser` starts it with
both ends of two ``os.pipe()`` placed there, and :class:`Page` is one tab attached with
``flatten=True`` (its commands carry the tab's ``sessionId``). Every wait has a timeout,
and the browser's whole process group is killed on close, so a test cannot hang on it.

The ``browser`` fixture (module scope: one browser per test module) installs
Debian's ``chromium`` package when it is missing and the tests run as root, as in CI;
without a browser the tests fail with a message saying how to get one. A test module
uses the fixtures by importing them: ``from .browser import browser_fixture,
page_fixture`` (they are named ``browser`` and ``page`` in tests).

Outside pytest::

    with Browser(ensure_chromium(), folder) as chromium:
        page = chromium.new_page()
        page.navigate(Path("index.html").absolute().as_uri())
        title = page.evaluate("document.title")
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

#: Seconds any one protocol command, or a wait for an event, may take.
COMMAND_TIMEOUT = 30.0
#: Each tab's viewport, in CSS pixels: screenshots have this size.
WINDOW = (1360, 900)
_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
    "--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage",
    "--disable-extensions", "--disable-background-networking", "--disable-sync",
    "--disable-component-update", "--disable-default-apps", "--mute-audio",
    "--hide-scrollbars", "--force-device-scale-factor=1", "--lang=en-US",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
)


class DevToolsError(RuntimeError):
    """A protocol command failed, timed out, or the browser went away."""


def ensure_chromium() -> str:
    """The path of ``chromium``; installs Debian's package first when it is missing and
    this process is root (``apt-get install``, then ``apt-get update`` and again if that
    fails). Fails the test, never skips it, when there is still no browser."""
    path = shutil.which("chromium")
    if path is None and hasattr(os, "geteuid") and os.geteuid() == 0 \
            and shutil.which("apt-get"):
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends",
                   "-o", "DPkg::Lock::Timeout=600", "chromium"]
        done = subprocess.run(install, env=environment, capture_output=True, timeout=1800)
        if done.returncode != 0:  # no or stale package lists
            subprocess.run(["apt-get", "update", "-o", "DPkg::Lock::Timeout=600"],
                           env=environment, capture_output=True, timeout=900)
            done = subprocess.run(install, env=environment, capture_output=True,
                                  timeout=1800)
        path = shutil.which("chromium")
        if path is None:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            pytest.fail("chromium is missing and `apt-get install chromium` did not provide "
                        f"it: {' / '.join(tail)}")
    if path is None:
        pytest.fail("these tests drive a headless Chromium: install it (Debian/Ubuntu: "
                    "apt-get install chromium) so that `chromium` is on PATH, or run them "
                    "as root to have it installed")
    return path


def _high_descriptor(descriptor: int) -> int:
    """``descriptor`` moved to 10 or above (close-on-exec), so that placing the pipes at
    3 and 4 in the child can never dup a descriptor onto itself."""
    moved = fcntl.fcntl(descriptor, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(descriptor)
    return moved


class Browser:
    """A headless Chromium and its DevTools pipe.

    Args:
        executable: The ``chromium`` program.
        folder: A folder for the browser's profile and its log (``chromium.log``).
    """

    def __init__(self, executable: str, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.log_path = self.folder / "chromium.log"
        self.events: list[dict] = []
        self._next_id = 0
        self._buffer = b""
        child_commands, self._commands = map(_high_descriptor, os.pipe())
        self._answers, child_answers = map(_high_descriptor, os.pipe())

        def place_pipes() -> None:  # in the child, between fork and exec
            os.dup2(child_commands, 3)  # dup2 clears close-on-exec on the copies
            os.dup2(child_answers, 4)

        # close_fds=False: subprocess closes descriptors after preexec_fn, and pass_fds
        # cannot name 3 and 4 (they are not ours in this process); every descriptor
        # Python opens is close-on-exec anyway, so only 3 and 4 reach the browser.
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [executable, *_FLAGS, f"--user-data-dir={self.folder / 'profile'}",
                 "about:blank"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=False,
                preexec_fn=place_pipes, start_new_session=True)
        os.close(child_commands)
        os.close(child_answers)
        try:
            self.call("Browser.getVersion")
        except BaseException:
            self.close()
            raise

    # -- the protocol

    def _send(self, message: dict) -> None:
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._commands, data):]
        except OSError as error:
            raise DevToolsError(f"the browser stopped reading ({error}){self._log_tail()}") \
                from None

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                raise DevToolsError(f"no answer from the browser in time{self._log_tail()}")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise DevToolsError(f"the browser closed its pipe (exit code "
                                    f"{self.process.poll()}){self._log_tail()}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def _note_event(self, message: dict) -> None:
        self.events.append(message)
        if message.get("method") == "Page.javascriptDialogOpening":
            # An alert blocks its page: dismiss it at once; the event stays on record.
            self._next_id += 1
            self._send({"id": self._next_id, "method": "Page.handleJavaScriptDialog",
                        "params": {"accept": False}, "sessionId": message.get("sessionId")})

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = COMMAND_TIMEOUT) -> dict:
        """Send one command and return its ``result``; events that arrive meanwhile are
        kept in :attr:`events`.

        Raises:
            DevToolsError: The command failed, or no answer came within ``timeout``.
        """
        self._next_id += 1
        number = self._next_id
        message = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._send(message)
        deadline = time.monotonic() + timeout
        while True:
            answer = self._receive(deadline)
            if "id" not in answer:
                self._note_event(answer)
            elif answer["id"] == number:
                if "error" in answer:
                    raise DevToolsError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})

    def wait_event(self, method: str, session: str | None = None, since: int = 0,
                   timeout: float = COMMAND_TIMEOUT) -> dict:
        """The first event ``method`` (of ``session``) at or after ``events[since]``."""
        deadline = time.monotonic() + timeout
        index = since
        while True:
            for event in self.events[index:]:
                if event.get("method") == method and (session is None
                                                      or event.get("sessionId") == session):
                    return event
            index = len(self.events)
            answer = self._receive(deadline)
            if "id" not in answer:
                self._note_event(answer)

    def new_page(self) -> Page:
        """A new tab, attached, with its Page, Runtime and Network events on."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        for domain in ("Page", "Runtime", "Network"):
            page.call(f"{domain}.enable")
        page.resize(*WINDOW)
        return page

    # -- the process

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            return ""
        return ("; chromium said: " + " / ".join(lines)) if lines else ""

    def close(self) -> None:
        """End the browser and every process it started; close the pipes. Idempotent."""
        if self.process.poll() is None:
            try:
                self.call("Browser.close", timeout=5)
                self.process.wait(timeout=5)
            except (DevToolsError, subprocess.TimeoutExpired, OSError):
                pass
        try:  # its own session: the group is the browser and its helpers, nothing else
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        for descriptor in (self._commands, self._answers):
            try:
                os.close(descriptor)
            except OSError:
                pass
        self._commands = self._answers = -1

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One tab of a :class:`Browser`."""

    def __init__(self, browser: Browser, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session

    def call(self, method: str, params: dict | None = None,
             timeout: float = COMMAND_TIMEOUT) -> dict:
        return self.browser.call(method, params, self.session, timeout)

    def events(self, method: str) -> list[dict]:
        """This tab's events named ``method`` so far."""
        return [event for event in self.browser.events
                if event.get("method") == method and event.get("sessionId") == self.session]

    def resize(self, width: int, height: int = WINDOW[1]) -> None:
        """Give the page ``width`` x ``height`` CSS pixels (the window's own size includes
        headless Chromium's invisible frame); screenshots then have this size."""
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def navigate(self, url: str, timeout: float = COMMAND_TIMEOUT) -> None:
        """Load ``url`` and wait for its load event (none comes when only the URL's
        fragment changes: the document stays, and gets a ``hashchange`` event)."""
        since = len(self.browser.events)
        result = self.call("Page.navigate", {"url": url}, timeout)
        if result.get("errorText"):
            raise DevToolsError(f"cannot load {url}: {result['errorText']}")
        if result.get("loaderId"):  # omitted for a same-document navigation
            self.browser.wait_event("Page.loadEventFired", self.session, since, timeout)

    def evaluate(self, expression: str, timeout: float = COMMAND_TIMEOUT):
        """The value of a JavaScript expression (promises awaited), as JSON gives it.

        Raises:
            DevToolsError: The expression threw; the message is the exception's.
        """
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True},
                           timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise DevToolsError(f"{expression[:80]!r} threw: {text}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10.0, interval: float = 0.05):
        """Poll ``expression`` until it is truthy; its value. Fails the test on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"still false after {timeout} s: {expression}")
            time.sleep(interval)

    def screenshot(self, path: str | os.PathLike, full_page: bool = False) -> Path:
        """Save a PNG of the tab (the window, or ``full_page`` the whole document)."""
        params = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], 8000), "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.browser.call("Target.closeTarget", {"targetId": self.target}, timeout=10)
        except DevToolsError:
            pass


@pytest.fixture(scope="module", name="browser")
def browser_fixture():
    """One headless Chromium for the test module, ended (with its helpers) after it."""
    executable = ensure_chromium()
    folder = tempfile.mkdtemp(prefix="guidedbp-chromium-")
    try:
        with Browser(executable, folder) as chromium:
            yield chromium
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(name="page")
def page_fixture(browser):
    """A fresh tab for one test, closed after it."""
    tab = browser.new_page()
    try:
        yield tab
    finally:
        tab.close()
