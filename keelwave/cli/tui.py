"""``keelwave tui``: open the run explorer in the terminal."""

from __future__ import annotations

from keelwave.cli.common import fail
from keelwave.cli.query import ApiKey, Endpoint
from keelwave.remote.api import Api, ApiError
from keelwave.remote.config import resolve


def tui(endpoint: Endpoint = None, api_key: ApiKey = None) -> None:
    """Browse runs, loops and steps in a terminal UI (q to quit, ? for keys)."""
    try:
        api = Api(resolve(endpoint, api_key))
        api.me()  # a bad key or an unreachable server: one line now, not a broken screen
    except ApiError as error:
        fail(str(error))
    from keelwave.tui import KeelwaveApp, Source

    KeelwaveApp(Source(api)).run()
