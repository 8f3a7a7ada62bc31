"""The `?` screen: every key, in one place, in a box that fits 80 columns.

The keys are data (:data:`SECTIONS`), not a block of text: tests/test_tui.py presses
each one listed here and checks that it does what this screen says.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

# (section, ((keys, what it does), …)); two entries share a line when both are short,
# a long one takes a line of its own.
SECTIONS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Runs", (
        ("↑ ↓ j k", "move"),
        ("enter", "open the run"),
        ("/", "search: run id or agent"),
        ("escape", "clear the search"),
        ("l", "looping runs only, by the agent's or the server's account"),
        ("s", "status: each in turn"),
        ("a", "agent: each in turn"),
        ("r", "refresh now"),
    )),
    ("A run", (
        ("↑ ↓ j k", "move in the timeline"),
        ("enter", "open a band / child run"),
        ("→ ←", "open / close a band"),
        ("space", "open / close a band"),
        ("1-5", "tabs: timeline, findings, loops, model calls, child runs"),
        ("c", "the child runs"),
        ("p", "the parent run"),
        ("escape", "back to the runs"),
    )),
    ("Anywhere", (
        ("?", "this help"),
        ("q", "quit"),
    )),
)  # fmt: skip
NOTES = (
    "LOOP: reported by the agent · LOOP*: detected by the server only",
    "red: a loop · yellow: a warning (≈ near-duplicate, ∅ no progress)",
)
KEYS, WHAT = 10, 27  # column widths of an entry: two to a line when both fit
LINE = 2 * (KEYS + WHAT)


def help_text() -> Text:
    text = Text()
    for number, (title, entries) in enumerate(SECTIONS):
        text.append(f"{chr(10) if number else ''}{title}\n", style="bold")
        pending: tuple[str, str] | None = None
        for keys, what in entries:
            if len(what) >= WHAT:  # a line of its own
                if pending:
                    _entry(text, *pending, end=True)
                    pending = None
                _entry(text, keys, what, end=True)
            elif pending:
                _entry(text, *pending)
                _entry(text, keys, what, end=True)
                pending = None
            else:
                pending = (keys, what)
        if pending:
            _entry(text, *pending, end=True)
    for note in NOTES:
        text.append(f"\n{note}", style="dim")
    return text


def _entry(text: Text, keys: str, what: str, end: bool = False) -> None:
    text.append(f"  {keys:<{KEYS - 2}}", style="bold cyan")  # two spaces of indent
    text.append(what if end else f"{what:<{WHAT}}")
    if end:
        text.append("\n")


class HelpScreen(ModalScreen[None]):
    BINDINGS = [("escape,q,question_mark", "dismiss", "Close")]
    DEFAULT_CSS = f"""
    HelpScreen {{ align: center middle; }}
    HelpScreen > VerticalScroll {{ width: {LINE + 4}; max-width: 100%; height: auto;
        max-height: 100%; border: round $accent; background: $surface; padding: 0 1; }}
    """

    def compose(self) -> ComposeResult:
        box = VerticalScroll()
        box.border_title = "keelwave run explorer: keys"
        box.border_subtitle = "escape to close"
        with box:
            yield Static(help_text())
