"""The Python SDK. It must never import keelwave.server, keelwave.tui or aiohttp:
agents install keelwave for this module alone."""

from keelwave.sdk.client import Keelwave, get_current_run

__all__ = ["Keelwave", "get_current_run"]
