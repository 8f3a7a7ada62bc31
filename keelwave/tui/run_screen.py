"""One run: header (when it started and ended, whether it looped, and who says so), the
timeline (steps with loop bands and warning marks, model calls and child runs, in the
order they started), the inspector, findings, loops, model calls and child runs."""

from __future__ import annotations

from contextlib import suppress
from datetime import datetime

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane, Tree
from textual.widgets.tree import TreeNode

from keelwave.remote import format as fmt
from keelwave.remote import verdict, waterfall
from keelwave.remote.api import ApiError
from keelwave.remote.timeline import band_text, name_of
from keelwave.remote.timeline import legend as legend_of
from keelwave.tui import inspector
from keelwave.tui.source import Source

# The tabs, in order: keys 1 to 5 switch to them.
TABS = ("timeline-pane", "findings-pane", "loops-pane", "calls-pane", "children-pane")


class RunScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("p", "parent", "Parent"),
        Binding("c", "children", "Children"),
        Binding("1", "tab(0)", "Tabs", key_display="1-5"),
        *(Binding(str(n + 1), f"tab({n})", show=False) for n in range(1, len(TABS))),
        Binding("j", "move(1)", show=False),
        Binding("k", "move(-1)", show=False),
        Binding("right", "open_band", show=False),
        Binding("left", "close_band", show=False),
    ]
    DEFAULT_CSS = """
    RunScreen #header { height: auto; max-height: 8; padding: 0 1; background: $boost; }
    RunScreen TabbedContent { height: 1fr; }
    RunScreen TabPane { height: 1fr; padding: 0; }
    RunScreen #timeline-pane Horizontal { height: 1fr; }
    RunScreen Tree { width: 50%; min-width: 30; overflow-x: hidden; }
    RunScreen #inspector { width: 1fr; border-left: solid $primary-background; padding: 0 1; }
    RunScreen #status { height: auto; color: $warning; padding: 0 1; }
    """

    def __init__(self, source: Source, run_id: str) -> None:
        super().__init__()
        self.source = source
        self.run_id = run_id
        self.run: dict | None = None
        self.findings: list[dict] = []

    def compose(self) -> ComposeResult:
        yield Static("loading…", id="header")
        with TabbedContent(initial="timeline-pane"):
            with TabPane("1 Timeline", id="timeline-pane"), Horizontal():
                yield Tree("steps", id="timeline")
                with VerticalScroll(id="inspector"):
                    yield Static("Select a step to see its input and output.", id="step")
            with TabPane("2 Findings", id="findings-pane"):
                yield DataTable(id="findings", cursor_type="row")
            with TabPane("3 Loops", id="loops-pane"):
                yield DataTable(id="loops", cursor_type="row")
            with TabPane("4 Model calls", id="calls-pane"):
                yield DataTable(id="calls", cursor_type="row")
            with TabPane("5 Child runs", id="children-pane"):
                yield DataTable(id="children", cursor_type="row")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Tree).show_root = False
        self.query_one(Tree).focus()
        self.load()

    @work(exclusive=True)
    async def load(self) -> None:
        try:
            run = await self.source.run(self.run_id)
            items = await self.source.timeline(self.run_id)
            findings = await self.source.findings(self.run_id)
        except ApiError as error:
            with suppress(NoMatches):  # see below
                self.query_one("#status", Static).update(f"⚠ {error} (escape to go back)")
            return
        # The user may have gone back while the run was on its way: the screen's widgets
        # are gone, and the run has nowhere to go.
        with suppress(NoMatches):
            self._show(run, items, findings)

    def _show(self, run: dict, items: list[dict], findings: list[dict]) -> None:
        self.run = run
        self.findings = findings
        rows = waterfall.rows_of(items, findings)
        self._header(run, legend_of([row.band for row in rows if row.band is not None]))
        self._timeline(run, rows)
        self._findings(findings)
        self._loops(run["loop_groups"])
        self._calls([item for item in items if item["kind"] == "model_call"])
        self._children([item for item in items if item["kind"] == "child_run"])

    def _header(self, run: dict, legend: str | None = None) -> None:
        text = Text()
        text.append(run["agent_name"], style="bold")
        text.append(f"  {run['id']}\n", style="dim")
        text.append("status ", style="dim")
        shown = fmt.status(run)
        text.append_text(shown)
        if run["termination_reason"] and run["termination_reason"] != shown.plain:
            text.append(f" ({run['termination_reason']})", style="dim")
        if verdict.loops(run):
            text.append("   LOOP", style=verdict.LOOP_STYLE)
            text.append(f" {verdict.loop_phrase(run)}", style="red")
        text.append("\n")
        text.append("findings ", style="dim")
        text.append_text(verdict.findings_text(run))
        text.append("\n")
        text.append("started ", style="dim")
        text.append(fmt.moment(run["started_at"], self.source.now()))
        text.append("  ended ", style="dim")
        ended = run.get("ended_at")
        if not ended:
            text.append("not yet")
        elif _day(ended) == _day(run["started_at"]):  # the same day: its time is enough
            text.append(fmt.moment(ended, self.source.now())[11:])
        else:
            text.append(fmt.moment(ended, self.source.now()))
        text.append("\n")
        text.append(
            f"{fmt.duration(run['duration_ms'])} · {fmt.plural(run['step_count'], 'step')} · "
            f"{fmt.tokens(run['input_tokens'])} in / {fmt.tokens(run['output_tokens'])} out · "
            f"{fmt.plural(run['llm_calls'], 'model call')} · {fmt.money(run['cost_usd'])}"
        )
        if run["parent_run_id"]:
            text.append(f" · parent {fmt.short_id(run['parent_run_id'])} (p)", style="dim")
        if run.get("error"):
            text.append(f"\n{run['error']}", style="red")
        if legend:
            text.append(f"\n{legend}", style="dim")
        self.query_one("#header", Static).update(text)

    def _timeline(self, run: dict, rows: list[waterfall.Row]) -> None:
        """One node per row; a loop band opens on its steps and the calls made during it.
        A failed run opens on the step that failed, else on its error (the last node)."""
        tree: Tree = self.query_one(Tree)
        tree.clear()
        failing: TreeNode | None = None
        for row in rows:
            if row.band is None:
                assert row.item is not None
                tree.root.add_leaf(_item_label(row.item), data=row.item)
                continue
            band = row.band
            low, high = band.indices
            label = Text(f"{low:>3}{'–' + str(high) if high != low else ''}  ", style="dim")
            label.append_text(band_text(band, spell_out=True))
            if row.inside:
                label.append("  ").append_text(waterfall.inside_text(row, compact=True))
            if band.errors:
                label.append(f"  {fmt.plural(band.errors, 'error')}", style="red")
            if not band.is_loop:
                node = tree.root.add_leaf(label, data=band.first)
            else:
                node = tree.root.add(label, data=band.first, expand=False)
                inside = [*band.steps, *row.inside]
                inside.sort(key=lambda item: (waterfall.when(item.get("started_at")) or
                            waterfall.when(run["started_at"]),
                            0 if item["kind"] == "step" else 1))  # fmt: skip
                for item in inside:
                    node.add_leaf(_item_label(item), data=item)
            if failing is None and band.errors:
                failing = node
        if run.get("error"):
            error = tree.root.add_leaf(Text(f"  ✗  {run['error']}", style="red"),
                                       data={"kind": inspector.RUN_ERROR})  # fmt: skip
            failing = failing or error
        if failing is not None:
            tree.move_cursor(failing)
        elif tree.root.children:
            tree.move_cursor(tree.root.children[0])

    def _findings(self, findings: list[dict]) -> None:
        table = self.query_one("#findings", DataTable)
        table.clear(columns=True)
        table.add_columns("began at", "kind", "tools", "hits", "steps", "why")
        for finding in findings:
            style = "red" if finding["kind"] in verdict.LOOP_KINDS else verdict.WARNING_STYLE
            table.add_row(str(finding["began_at_step"]),
                          Text(verdict.LABELS.get(finding["kind"], finding["kind"]), style=style),
                          ", ".join(finding["tool_names"]), str(finding["hits"]),
                          ", ".join(map(str, finding["step_indices"])),
                          finding["detail"])  # fmt: skip

    def _loops(self, groups: list[dict]) -> None:
        table = self.query_one("#loops", DataTable)
        table.clear(columns=True)
        table.add_columns("tool", "hits", "steps", "fingerprint")
        for group in groups:
            table.add_row(group["tool_name"], str(group["hits"]),
                          ", ".join(map(str, group["step_indices"])),
                          group["fingerprint"][:16] + "…")  # fmt: skip

    def _calls(self, calls: list[dict]) -> None:
        table = self.query_one("#calls", DataTable)
        table.clear(columns=True)
        table.add_columns("step", "model", "in", "out", "cached", "latency", "cost", "status")
        for call in calls:
            failed = call["status"] == "error"
            table.add_row(
                str(call["step_index"] or "—"),
                call["model"],
                fmt.tokens(call["input_tokens"]),
                fmt.tokens(call["output_tokens"]),
                fmt.tokens(call["cache_read_tokens"]),
                fmt.duration(call["latency_ms"]),
                fmt.money(call["cost_usd"]),
                Text(call["status"], style="red" if failed else ""),
            )

    def _children(self, children: list[dict]) -> None:
        table = self.query_one("#children", DataTable)
        table.clear(columns=True)
        table.add_columns("run", "agent", "status", "loop", "steps", "duration", "cost")
        for child in children:
            table.add_row(fmt.short_id(child["run_id"]), child["agent_name"], fmt.status(child),
                          verdict.badge(child, pad=" "), str(child["step_count"]),
                          fmt.duration(child["duration_ms"]), fmt.money(child["cost_usd"]),
                          key=child["run_id"])  # fmt: skip

    @on(Tree.NodeHighlighted)
    def inspect(self, event: Tree.NodeHighlighted) -> None:
        item = event.node.data
        if not item:
            return
        kind = item.get("kind", "step")
        if kind == inspector.RUN_ERROR:
            shown = inspector.run_error(self.run or {})
        elif kind == "model_call":
            shown = inspector.model_call(item, self.run)
        elif kind == "child_run":
            shown = inspector.child_run(item, self.run)
        else:
            shown = inspector.step(item, self.run, self.findings)
        self.query_one("#step", Static).update(shown)

    @on(Tree.NodeSelected)
    def open_child_from_timeline(self, event: Tree.NodeSelected) -> None:
        item = event.node.data or {}
        if item.get("kind") == "child_run":
            self.app.push_screen(RunScreen(self.source, item["run_id"]))

    @on(DataTable.RowSelected, "#children")
    def open_child(self, event: DataTable.RowSelected) -> None:
        self.app.push_screen(RunScreen(self.source, str(event.row_key.value)))

    def action_parent(self) -> None:
        if self.run and self.run["parent_run_id"]:
            self.app.push_screen(RunScreen(self.source, self.run["parent_run_id"]))

    def action_children(self) -> None:
        self.action_tab(TABS.index("children-pane"))

    def action_tab(self, number: int) -> None:
        """Show tab ``number`` (0: the timeline) and put the keys on what it holds."""
        pane = TABS[number]
        self.query_one(TabbedContent).active = pane
        inside = self.query_one(f"#{pane}")
        focusable = inside.query(Tree) if pane == "timeline-pane" else inside.query(DataTable)
        if focusable:
            focusable.first().focus()

    def action_move(self, by: int) -> None:
        """j and k: down and up in whatever list has the keys (the timeline or a table)."""
        focused = self.focused
        if isinstance(focused, Tree | DataTable):
            focused.action_cursor_down() if by > 0 else focused.action_cursor_up()

    def action_open_band(self) -> None:
        """→ opens the band under the cursor (its steps and calls), or goes into an open one."""
        tree = self.query_one(Tree)
        node = tree.cursor_node
        if self.focused is not tree or node is None or not node.children:
            return
        if node.is_expanded:
            tree.action_cursor_down()
        else:
            node.expand()

    def action_close_band(self) -> None:
        """← closes the band under the cursor, or the one the cursor is inside."""
        tree = self.query_one(Tree)
        node = tree.cursor_node
        if self.focused is not tree or node is None:
            return
        if node.children and node.is_expanded:
            node.collapse()
        elif node.parent is not None and node.parent is not tree.root:
            tree.move_cursor(node.parent)
            node.parent.collapse()


def _day(iso: str) -> object:
    return datetime.fromisoformat(iso).astimezone().date()


def _item_label(item: dict) -> Text:
    """A timeline row that is not a band: a step, a model call or a child run."""
    if item["kind"] == "model_call":
        step = item.get("step_index")
        label = Text(f"{'↳' + str(step) if step is not None else '':>4} ", style="dim")
        return label.append_text(waterfall.call_text(item, compact=True))
    if item["kind"] == "child_run":
        return Text("   ▸ ", style="dim").append_text(waterfall.child_text(item))
    label = Text(f"{item['step_index']:>3}  ")
    if item.get("error"):
        label.append("✗ ", style="red")
    return label.append(name_of(item))
