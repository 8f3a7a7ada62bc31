"""The first screen: the summary strip and the runs table, refreshing by itself."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from keelwave.remote import format as fmt
from keelwave.remote import verdict
from keelwave.remote.api import ApiError
from keelwave.tui.source import Source

STATUSES = (None, "running", "stalled", "finished")
COLUMNS = ("run", "agent", "started", "duration", "steps", "status", "loop", "tokens", "cost")
NARROW_COLUMNS = ("run", "agent", "started", "took", "status", "loop", "tokens", "cost")
WIDE = 96  # terminal columns from which every column fits


class SummaryStrip(Static):
    """Loop rates (as the agents reported them, as the server detected them), error rate,
    stalls and cost over 24 h, against the 24 h before."""

    def show(self, summary: dict) -> None:
        now, before = summary["current"], summary["previous"]
        parts = [
            ("runs", str(now["runs"]), fmt.change(now["runs"], before["runs"])),
            ("loop rate", fmt.rate(now["loop_rate"]),
             fmt.change(now["loop_rate"], before["loop_rate"], as_points=True)),
            ("detected", fmt.rate(now["detected_loop_rate"]),
             fmt.change(now["detected_loop_rate"], before["detected_loop_rate"], as_points=True)),
            ("errors", fmt.rate(now["error_rate"]),
             fmt.change(now["error_rate"], before["error_rate"], as_points=True)),
            ("stalled", str(now["stalled_runs"]), ""),
            ("cost", fmt.money(now["cost_usd"]), fmt.change(now["cost_usd"], before["cost_usd"])),
        ]  # fmt: skip
        text = Text("24h  ", style="dim")
        for label, value, delta in parts:
            text.append(f"{label} ", style="dim")
            alarming = label in ("loop rate", "detected") and value not in ("0.0%", "—")
            text.append(value, style="bold red" if alarming else "bold")
            if delta and delta != "—":
                text.append(f" ({delta})", style="dim")
            text.append("   ")
        self.update(text)


class RunsScreen(Screen):
    BINDINGS = [
        Binding("slash", "search", "Search"),
        Binding("l", "toggle_loops", "Loops"),
        Binding("s", "cycle_status", "Status"),
        Binding("a", "cycle_agent", "Agent"),
        Binding("r", "refresh", "Refresh"),
        Binding("escape", "clear_search", "Clear", show=False),
        Binding("j", "move(1)", show=False),
        Binding("k", "move(-1)", show=False),
    ]
    DEFAULT_CSS = """
    RunsScreen SummaryStrip { height: auto; padding: 0 1; background: $boost; }
    RunsScreen #filters { height: 1; padding: 0 1; color: $text-muted; }
    RunsScreen #search { display: none; height: 3; }
    RunsScreen #search.visible { display: block; }
    RunsScreen DataTable { height: 1fr; }
    RunsScreen #status { height: 1; padding: 0 1; color: $warning; }
    """

    def __init__(self, source: Source, refresh_seconds: float = 2.0) -> None:
        super().__init__()
        self.source = source
        self.refresh_seconds = refresh_seconds
        self.loops_only = False
        self.status_index = 0
        self.agent: str | None = None
        self.agents: list[str] = []
        self.query_text = ""
        self.row_ids: list[str] = []
        self.runs: list[dict] = []
        self._shown: list[tuple[str, list[str]]] | None = None  # the table's rows, as drawn

    def compose(self) -> ComposeResult:
        yield SummaryStrip(id="summary")
        yield Static(id="filters")
        yield Input(placeholder="run id or agent name: applies as you type, enter to go back "
                    "to the runs", id="search")  # fmt: skip
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self._set_columns(self.app.size.width)
        self.query_one(DataTable).focus()
        self.reload()
        self.set_interval(self.refresh_seconds, self.reload)

    # -- data --------------------------------------------------------------

    @work(exclusive=True, group="runs")
    async def reload(self) -> None:
        filters: dict[str, Any] = {
            "limit": 200,
            "loop": "true" if self.loops_only else None,
            "status": STATUSES[self.status_index],
            "agent_name": self.agent,
            "q": self.query_text or None,
        }
        try:
            runs = await self.source.runs(**filters)
            summary = await self.source.summary()
        except ApiError as error:
            with suppress(NoMatches):  # see below
                status = f"⚠ {error} — retrying every {self.refresh_seconds:g} s"
                self.query_one("#status", Static).update(status)
            return
        # The screen may have closed while the answer was on its way (the user quit): its
        # widgets are gone, and the answer has nowhere to go.
        with suppress(NoMatches):
            self._show(runs, summary)

    def _show(self, runs: list[dict], summary: dict) -> None:
        self.query_one("#status", Static).update("")
        self.query_one(SummaryStrip).show(summary)
        self.agents = sorted({run["agent_name"] for run in runs} | set(self.agents))
        self._fill(runs)
        self._show_filters(runs)

    def on_resize(self, event: events.Resize) -> None:
        if self._set_columns(event.size.width):
            self._fill(self.runs)

    def _set_columns(self, width: int) -> bool:
        """The table's columns for a terminal ``width`` columns wide; True if they changed.
        Under :data:`WIDE` columns the steps column goes and duration is "took", so that
        cost, the column people look for, stays on an 80-column screen."""
        columns = COLUMNS if width >= WIDE else NARROW_COLUMNS
        table = self.query_one(DataTable)
        if [str(column.label) for column in table.columns.values()] == list(columns):
            return False
        table.clear(columns=True)
        table.add_columns(*columns)
        self._shown = None
        return True

    def _fill(self, runs: list[dict]) -> None:
        self.runs = runs
        table = self.query_one(DataTable)
        now = self.source.now()
        wide = len(table.columns) == len(COLUMNS)
        rows = []
        for run in runs:
            cells = [
                fmt.short_id(run["id"]), run["agent_name"], fmt.ago(run["started_at"], now),
                fmt.duration(run["duration_ms"]), str(run["step_count"]), fmt.status(run),
                verdict.badge(run, pad=" "),
                fmt.tokens(run["input_tokens"] + run["output_tokens"]), fmt.money(run["cost_usd"]),
            ]  # fmt: skip
            if not wide:
                del cells[COLUMNS.index("steps")]
            rows.append((run["id"], cells))
        if rows == self._shown:
            # Nothing to redraw: refilling would reset the columns to their labels' widths
            # until the table is next idle (a flicker every refresh on a busy machine).
            return
        selected = self.row_ids[table.cursor_row] if self.row_ids and table.row_count else None
        table.clear()
        for run_id, cells in rows:
            table.add_row(*cells, key=run_id)
        self.row_ids = [run_id for run_id, _ in rows]
        self._shown = rows
        if selected in self.row_ids:  # keep the cursor on the same run as rows arrive
            table.move_cursor(row=self.row_ids.index(selected))

    def _show_filters(self, runs: list[dict]) -> None:
        shown = [fmt.plural(len(runs), "run"), f"loop rate {fmt.rate(verdict.loop_rate(runs))}"]
        if self.loops_only:
            shown.append("looping only (reported or detected)")
        if STATUSES[self.status_index]:
            shown.append(f"status {STATUSES[self.status_index]}")
        if self.agent:
            shown.append(f"agent {self.agent}")
        if self.query_text:
            shown.append(f"search “{self.query_text}”")
        if any(verdict.source(run) == "server" for run in runs):
            shown.append("LOOP* detected by the server only")
        if any(not verdict.loops(run) and verdict.warnings(run) for run in runs):
            shown.append("≈ near-duplicate ∅ no progress")
        self.query_one("#filters", Static).update(" · ".join(shown))

    # -- actions -----------------------------------------------------------

    def action_move(self, by: int) -> None:
        """j and k, as ↓ and ↑."""
        table = self.query_one(DataTable)
        table.action_cursor_down() if by > 0 else table.action_cursor_up()

    def action_refresh(self) -> None:
        self.reload()

    def action_toggle_loops(self) -> None:
        self.loops_only = not self.loops_only
        self.reload()

    def action_cycle_status(self) -> None:
        self.status_index = (self.status_index + 1) % len(STATUSES)
        self.reload()

    def action_cycle_agent(self) -> None:
        choices = [None, *self.agents]
        self.agent = choices[(choices.index(self.agent) + 1) % len(choices)]
        self.reload()

    def action_search(self) -> None:
        search = self.query_one("#search", Input)
        search.add_class("visible")
        search.focus()

    def action_clear_search(self) -> None:
        search = self.query_one("#search", Input)
        search.value = ""
        search.remove_class("visible")
        self.query_text = ""
        self.query_one(DataTable).focus()
        self.reload()

    @on(Input.Changed, "#search")
    def search_as_typed(self, event: Input.Changed) -> None:
        self.query_text = event.value.strip()
        self.reload()  # exclusive: a newer keystroke cancels the reload of an older one

    @on(Input.Submitted, "#search")
    def apply_search(self, event: Input.Submitted) -> None:
        self.query_text = event.value.strip()
        self.query_one(DataTable).focus()
        self.reload()

    @on(DataTable.RowSelected, "#runs")
    def open_run(self, event: DataTable.RowSelected) -> None:
        from keelwave.tui.run_screen import RunScreen

        self.app.push_screen(RunScreen(self.source, str(event.row_key.value)))
