"""The inspector served over real HTTP on loopback, and a headless Chromium for it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from jarvismem.integrations.asgi import listen_socket, serve_asgi
from jarvismem.ui.app import create_app
from tests.conftest import require_backend

Serve = Callable[..., AbstractAsyncContextManager[str]]

CHROMIUM = os.environ.get("JARVISMEM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("JARVISMEM_CHROMEDRIVER", "/usr/bin/chromedriver")


@pytest.fixture
def serve() -> Serve:
    """``async with serve(runtime, token=..., loopback=...) as base_url``: a real server."""

    @contextlib.asynccontextmanager
    async def run(runtime: Any, **options: Any) -> AsyncIterator[str]:
        sock = listen_socket(options.pop("host", "127.0.0.1"), 0)
        port = sock.getsockname()[1]
        ready = asyncio.Event()
        stop = asyncio.Event()
        app = create_app(runtime, **options)
        task = asyncio.create_task(serve_asgi(app, sock, on_ready=ready.set, stop=stop))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
            sock.close()

    return run


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, through its chromedriver (nothing is downloaded)."""
    available = os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)
    require_backend(available, f"Chromium ({CHROMIUM}) and chromedriver ({CHROMEDRIVER})")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> None:
    """Save a PNG of the page to ``$JARVISMEM_UI_SCREENSHOTS/<name>.png`` when it is set."""
    folder = os.environ.get("JARVISMEM_UI_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        driver.save_screenshot(os.path.join(folder, f"{name}.png"))
