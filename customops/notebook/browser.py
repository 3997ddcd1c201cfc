"""Netron drawn by Debian's headless Chromium, as a PNG: the static picture of
a graph that GitHub, nbviewer and any reader without a live Netron server see.

    from customops.notebook.browser import netron_png
    png_bytes = netron_png("model.onnx", "http://localhost:8080")

Chromium is driven through Playwright.  Every request that leaves the machine
is refused (Netron's page asks ipinfo.io and Google Analytics), so a drawing
sends nothing out.  The tests (tests/browser.py) drive the same browser.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

# `make lab` and `make test` install Debian's chromium; we never download a browser.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic",
]
LOOPBACK = ("127.0.0.1", "localhost", "::1")
VIEWPORT = {"width": 960, "height": 540}  # about the notebooks' IFrame


def missing_chromium_message() -> str | None:
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return None
    return (f"{CHROMIUM} not found: static Netron pictures and the browser tests need Debian's "
            "Chromium. `make lab` and `make test` install it (`sudo apt-get install chromium`).")


def launch_chromium(playwright, user_data_dir: Path, blocked: list[str]):
    """A persistent context in a fresh profile directory; requests to anything
    but loopback are aborted and their URLs appended to ``blocked``."""
    context = playwright.chromium.launch_persistent_context(
        str(user_data_dir), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
        viewport=VIEWPORT, device_scale_factor=1)
    only_loopback(context, blocked)
    return context


def only_loopback(context, blocked: list[str]) -> None:
    """Aborts every request of ``context`` that leaves the machine."""
    def route(request_route):
        url = request_route.request.url
        if url.startswith(("data:", "blob:")) or (urlsplit(url).hostname or "") in LOOPBACK:
            request_route.continue_()
        else:
            blocked.append(url)
            request_route.abort()

    context.route("**/*", route)


class NetronError(RuntimeError):
    """Netron showed a message instead of the graph."""


def open_in_netron(page, url: str) -> None:
    """Loads Netron and waits until the graph is laid out.  Offline, Netron
    first asks for cookie consent (its ipinfo.io lookup fails, so it assumes
    the EU) and we accept, as a user would.  180 days after its build date
    Netron instead shows "Please update to the newest version." forever and
    never draws the graph: users would see that too, so we raise."""
    import netron

    page.set_viewport_size(VIEWPORT)
    page.goto(url)
    drawn = "#nodes g.graph-node[transform]"
    page.wait_for_selector(f"{drawn}, body.notification #message-button, body.alert")
    if page.locator("body.notification #message-button").is_visible():
        message = page.locator("#message-text").text_content() or ""
        if "cookies" not in message:
            raise NetronError(f"Netron shows {message!r} instead of the graph (netron "
                              f"{netron.__version__}; it does so 180 days after its build date: "
                              "bump the netron pin)")
        page.locator("#message-button").click()
        page.wait_for_selector(f"{drawn}, body.alert")
    if page.locator("body.alert").count():
        raise NetronError(f"Netron could not open the model: "
                          f"{page.locator('#message-text').text_content()}")
    page.wait_for_selector("body.default")  # spinner gone: the whole graph is drawn


class _Browser:
    """One Chromium for the whole process, started on first use.  Playwright's
    sync API refuses to run inside a running asyncio loop (a Jupyter kernel
    has one), so the browser lives on a thread of its own and every call goes
    through that thread."""

    def __init__(self):
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chromium")
        self._context = None

    def _start(self):
        from playwright.sync_api import sync_playwright

        # A throw-away profile that Playwright removes; Chromium ends with its
        # Playwright driver when the process exits.
        browser = sync_playwright().start().chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        self._context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        only_loopback(self._context, [])

    def _draw(self, url: str) -> bytes:
        if self._context is None:
            self._start()
        page = self._context.new_page()
        try:
            open_in_netron(page, url)
            # The graph's own element, whole, even where it is larger than the window.
            box = page.locator("#canvas").bounding_box()
            if box:
                page.set_viewport_size({"width": max(VIEWPORT["width"], int(box["width"]) + 40),
                                        "height": max(200, int(box["height"]) + 40)})
            return page.locator("#canvas").screenshot()
        finally:
            page.close()

    def draw(self, url: str) -> bytes:
        # One worker thread: calls from several threads queue up in turn.
        return self._thread.submit(self._draw, url).result()


_BROWSER = _Browser()


def netron_png(url: str) -> bytes:
    """A PNG of the graph Netron serves at ``url`` (drawn whole, at Netron's
    own scale)."""
    problem = missing_chromium_message()
    if problem:
        raise FileNotFoundError(problem)
    return _BROWSER.draw(url)
