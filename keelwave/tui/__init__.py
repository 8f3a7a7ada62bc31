"""The Textual run explorer (`keelwave tui`): runs, loop bands, steps, model calls."""

from keelwave.tui.app import KeelwaveApp
from keelwave.tui.source import Source

__all__ = ["KeelwaveApp", "Source"]
