"""``keelwave tui``: the run explorer. The app is handed its data source."""

from __future__ import annotations

import asyncio

from textual import work
from textual.app import App
from textual.binding import Binding

from keelwave.remote.api import ApiError
from keelwave.tui.help_screen import HelpScreen
from keelwave.tui.runs_screen import RunsScreen
from keelwave.tui.source import Source


class KeelwaveApp(App):
    TITLE = "keelwave"
    # Every key is in the footer and in `?`; the palette's ^p would only cut the footer.
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, source: Source, refresh_seconds: float = 2.0) -> None:
        super().__init__()
        self.source = source
        self.refresh_seconds = refresh_seconds

    def on_mount(self) -> None:
        self.push_screen(RunsScreen(self.source, self.refresh_seconds))
        self.show_project()

    @work(exclusive=True)
    async def show_project(self) -> None:
        try:
            me = await asyncio.to_thread(self.source.api.me)
        except ApiError:
            return  # the runs screen says what is wrong
        self.sub_title = f"project {me['project']}"

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())
