"""The `?` screen: every key, in one place."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]keelwave run explorer[/b]

[b]Runs[/b]
  ↑ ↓ / j k      move                 enter        open the run
  /              search (run id or agent)          escape  clear the search
  l              looping runs only    s            cycle status: all, running, stalled, finished
                 (reported by the agent or detected by the server; LOOP* = the server only)
  a              cycle agent          r            refresh now (it also refreshes by itself)

[b]A run[/b]
  ↑ ↓            move in the timeline; a band (repeats or a cycle) opens with enter or →
                 red: a loop · yellow: ≈ near-duplicate, ∅ no progress (warnings, not loops)
  space          expand / collapse a band          c  jump to a child run
  p              go to the parent run              escape  back to the runs

[b]Anywhere[/b]
  ?              this help            q            quit
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [("escape,q,question_mark", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 86; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 1 2; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP)
