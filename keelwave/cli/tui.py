"""``keelwave tui``: open the run explorer in the terminal.

textual (the ``tui`` extra) is imported when the command runs, not when typer
reads the signature (see :mod:`keelwave.cli.commands`).
"""

from __future__ import annotations

from keelwave.cli.common import fail
from keelwave.cli.query import ApiKey, Endpoint


def tui(endpoint: Endpoint = None, api_key: ApiKey = None) -> None:
    """Browse runs, loops and steps in a terminal UI.

    q quits, ? lists the keys.
    """
    # textual first: without the tui extra, say so before talking to any server.
    from keelwave.remote.api import Api, ApiError
    from keelwave.remote.config import resolve
    from keelwave.tui import KeelwaveApp, Source

    try:
        api = Api(resolve(endpoint, api_key))
        api.me()  # a bad key or an unreachable server: one line now, not a broken screen
    except ApiError as error:
        fail(str(error))
    KeelwaveApp(Source(api)).run()
