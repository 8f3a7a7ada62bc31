"""One run: header (whether it looped, and who says so), the timeline with loop bands
(repeats and cycles) and warning marks, the step inspector, findings, loops, model calls
and child runs."""

from __future__ import annotations

import json

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane, Tree

from keelwave.remote import format as fmt
from keelwave.remote import verdict
from keelwave.remote.api import ApiError
from keelwave.remote.timeline import Band, band_text, findings_of, fold, name_of
from keelwave.remote.timeline import legend as legend_of
from keelwave.tui.source import Source


class RunScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("p", "parent", "Parent"),
        Binding("c", "children", "Children"),
    ]
    DEFAULT_CSS = """
    RunScreen #header { height: auto; padding: 0 1; background: $boost; }
    RunScreen TabbedContent { height: 1fr; }
    RunScreen TabPane { height: 1fr; padding: 0; }
    RunScreen #timeline-pane Horizontal { height: 1fr; }
    RunScreen Tree { width: 45%; min-width: 30; }
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
            with TabPane("Timeline", id="timeline-pane"), Horizontal():
                yield Tree("steps", id="timeline")
                with VerticalScroll(id="inspector"):
                    yield Static("Select a step to see its input and output.", id="step")
            with TabPane("Findings", id="findings-pane"):
                yield DataTable(id="findings", cursor_type="row")
            with TabPane("Loops", id="loops-pane"):
                yield DataTable(id="loops", cursor_type="row")
            with TabPane("Model calls", id="calls-pane"):
                yield DataTable(id="calls", cursor_type="row")
            with TabPane("Child runs", id="children-pane"):
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
            steps = await self.source.steps(self.run_id)
            calls = await self.source.llm_calls(self.run_id)
            findings = await self.source.findings(self.run_id)
        except ApiError as error:
            self.query_one("#status", Static).update(f"⚠ {error} (escape to go back)")
            return
        self.run = run
        self.findings = findings
        bands = fold(steps, findings)
        self._header(run, legend_of(bands))
        self._timeline(bands)
        self._findings(findings)
        self._loops(run["loop_groups"])
        self._calls(calls)
        self._children(run["child_runs"])

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
        text.append(
            f"{fmt.duration(run['duration_ms'])} · {run['step_count']} steps · "
            f"{fmt.tokens(run['input_tokens'])} in / {fmt.tokens(run['output_tokens'])} out · "
            f"{run['llm_calls']} model calls · {fmt.money(run['cost_usd'])}"
        )
        if run["parent_run_id"]:
            text.append(f" · parent {fmt.short_id(run['parent_run_id'])} (p)", style="dim")
        if run.get("error"):
            text.append(f"\n{run['error']}", style="red")
        if legend:
            text.append(f"\n{legend}", style="dim")
        self.query_one("#header", Static).update(text)

    def _timeline(self, bands: list[Band]) -> None:
        tree: Tree = self.query_one(Tree)
        tree.clear()
        for band in bands:
            low, high = band.indices
            label = Text(f"{low:>3}{'–' + str(high) if high != low else ''}  ", style="dim")
            label.append_text(band_text(band, spell_out=True))
            if band.errors:
                label.append(f"  {band.errors} error(s)", style="red")
            if band.is_loop:
                node = tree.root.add(label, data=band.first, expand=False)
                for step in band.steps:
                    node.add_leaf(Text(f"{step['step_index']:>3}  {name_of(step)}"), data=step)
            else:
                tree.root.add_leaf(label, data=band.first)
        if bands:
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

    def _children(self, children: list[str]) -> None:
        table = self.query_one("#children", DataTable)
        table.clear(columns=True)
        table.add_columns("child run")
        for child in children:
            table.add_row(child, key=child)

    @on(Tree.NodeHighlighted)
    def inspect_step(self, event: Tree.NodeHighlighted) -> None:
        step = event.node.data
        if not step:
            return
        parts: list = [Text(f"step {step['step_index']} · {step['step_type']} · "
                            f"{fmt.duration(step['duration_ms'])}", style="bold")]  # fmt: skip
        if step.get("in_loop"):
            parts.append(Text(f"repeated ×{step['loop_hits']} in this run", style="red"))
        for finding in findings_of(step, self.findings):
            if finding["kind"] == "exact_loop":
                continue  # said just above, from the step itself
            loop = finding["kind"] in verdict.LOOP_KINDS
            parts.append(Text(f"{verdict.LABELS.get(finding['kind'], finding['kind'])}: "
                              f"{finding['detail']}",
                              style="red" if loop else verdict.WARNING_STYLE))  # fmt: skip
        if step.get("error"):
            parts.append(Text(step["error"], style="red"))
        for label, key in (("input", "tool_input"), ("output", "tool_output")):
            if step.get(key) is not None:
                parts.append(Text(label, style="dim"))
                parts.append(Syntax(json.dumps(step[key], indent=2, ensure_ascii=False), "json",
                                    word_wrap=True, background_color="default"))  # fmt: skip
        if step.get("content"):
            parts.append(Text(step["content"]))
        if step.get("fingerprint"):
            parts.append(Text(f"fingerprint {step['fingerprint']}", style="dim"))
        self.query_one("#step", Static).update(Group(*parts))

    @on(DataTable.RowSelected, "#children")
    def open_child(self, event: DataTable.RowSelected) -> None:
        self.app.push_screen(RunScreen(self.source, str(event.row_key.value)))

    def action_parent(self) -> None:
        if self.run and self.run["parent_run_id"]:
            self.app.push_screen(RunScreen(self.source, self.run["parent_run_id"]))

    def action_children(self) -> None:
        self.query_one(TabbedContent).active = "children-pane"
        self.query_one("#children", DataTable).focus()
