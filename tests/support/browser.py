"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for page tests.

A fresh, empty profile per browser; the flags keep it from reaching anything but loopback
(no QUIC, no background networking, no component updates, no sync). Commands go over the
DevTools WebSocket with ``websocket-client`` (already installed with the ``kubernetes`` client).

Example::

    with Chromium.start(tmp_path / "profile") as browser:
        browser.set_cookie("_token", token, url)
        browser.navigate(url + "/k8s-retry/")
        text = browser.evaluate("document.body.innerText")
        browser.screenshot(tmp_path / "page.png")
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless browser process and a DevTools session on its first page."""

    def __init__(self, proc: subprocess.Popen[bytes], ws: Any) -> None:
        self.proc = proc
        self.ws = ws
        self._ids = itertools.count(1)

    @classmethod
    def start(cls, profile: Path, *, width: int = 1280, height: int = 900, timeout: float = 30) -> Chromium:
        import websocket

        binary = chromium_path()
        if binary is None:
            raise RuntimeError(
                "chromium is not installed (Debian package 'chromium'; make tools installs it)"
            )
        profile.mkdir(parents=True, exist_ok=True)
        log = (profile.parent / f"{profile.name}-chromium.log").open("wb")
        proc = subprocess.Popen(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"chromium did not open its DevTools port (exit {proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            targets = json.loads(response.read())
        page = next(t for t in targets if t.get("type") == "page")
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        browser = cls(proc, ws)
        browser.call("Page.enable")
        browser.call("Network.enable")
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return browser

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one DevTools command and return its result (events in between are skipped)."""
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})

    def set_cookie(self, name: str, value: str, url: str) -> None:
        result = self.call("Network.setCookie", {"name": name, "value": value, "url": url, "httpOnly": True})
        if not result.get("success", True):
            raise RuntimeError(f"cookie {name} was refused for {url}")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        """Evaluate ``expression`` until it is truthy (the page renders on its own time)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(RuntimeError):
                value = self.evaluate(expression)
                if value:
                    return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} still false after {timeout} s")
            time.sleep(0.1)

    def navigate(self, url: str, timeout: float = 30) -> None:
        self.call("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", timeout)

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        data = self.call("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
