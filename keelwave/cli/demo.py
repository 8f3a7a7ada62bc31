"""``keelwave demo``: realistic agent traffic through the Python SDK, so a new
user sees loops, stalls, errors, guards and costs on the first minute.

The SDK and the API client are imported when the demo runs, not when typer reads the signature
(see :mod:`keelwave.cli.commands`)."""

from __future__ import annotations

import os
import random
import time
from typing import TYPE_CHECKING, Annotated

import typer

from keelwave.cli.common import fail, stdout

if TYPE_CHECKING:
    from keelwave.sdk import Keelwave

QUESTIONS = [
    "What changed in the Q3 pricing?", "Why did the nightly build fail?",
    "Summarise ticket #4821", "Which customers churned last month?",
    "Draft a reply to the refund request", "Find the flaky test in payments",
]  # fmt: skip
MODELS = [("openai", "gpt-4o-mini"), ("openai", "gpt-4.1"), ("anthropic", "claude-sonnet-4-5"),
          ("anthropic", "claude-haiku-4-5"), ("google", "gemini-2.5-flash")]  # fmt: skip


def demo(
    runs: Annotated[int, typer.Option(help="How many agent runs to send.", min=1)] = 40,
    endpoint: Annotated[
        str | None, typer.Option(help="Server URL (env KEELWAVE_ENDPOINT).", show_default=False)
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key", help="An ingest or all key (env KEELWAVE_API_KEY).", show_default=False
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed, for the same traffic twice.")] = 7,
) -> None:
    """Send realistic agent traffic: loops, stalls, errors and costs.

    Seven small agents through the Python SDK, with guards, model calls, nested runs,
    exact loops, a cycle and near-duplicate calls.
    """
    from keelwave.remote.api import Api, ApiError
    from keelwave.remote.config import Credentials
    from keelwave.sdk import Keelwave, LoopDetected, MaxStepsExceeded

    endpoint = endpoint or os.environ.get("KEELWAVE_ENDPOINT") or "http://localhost:8080"
    endpoint = endpoint.rstrip("/")
    api_key = api_key or os.environ.get("KEELWAVE_API_KEY")
    if not api_key:
        fail(
            "no API key: pass --api-key or set KEELWAVE_API_KEY (`keelwave serve` printed one "
            "on its first start; `keelwave keys create` makes another)"
        )
    try:
        me = Api(Credentials(endpoint, api_key, "flag")).me()
    except ApiError as error:
        fail(str(error))
    if me["scope"] == "read":
        fail("this key has scope 'read'; the demo sends data and needs an 'ingest' or 'all' key")

    client = Keelwave(api_key=api_key, endpoint=endpoint, flush_at_exit=False)
    rng = random.Random(seed)
    agents = _agents(client, rng)
    outcomes: dict[str, int] = {}
    for number in range(runs):
        name, agent = agents[number % len(agents)]
        try:
            result = agent(rng.choice(QUESTIONS))
            unusual = ("left unfinished", "stopped: context limit")
            outcome = result if result in unusual else "ok"
        except LoopDetected:
            outcome = "stopped: loop"
        except MaxStepsExceeded:
            outcome = "stopped: max steps"
        except RuntimeError:
            outcome = "error"
        outcomes[f"{name} ({outcome})"] = outcomes.get(f"{name} ({outcome})", 0) + 1
    if not client.flush(timeout=60):
        fail("the server did not take everything within 60 s; try again with fewer --runs")
    client.shutdown()
    sent = f"{runs} run" if runs == 1 else f"{runs} runs"
    stdout.print(f"Sent {sent} to project [bold]{me['project']}[/] at {endpoint}:")
    for label, count in sorted(outcomes.items()):
        stdout.print(f"  {count:>4}  {label}")
    stdout.print(
        "Some runs were left unfinished on purpose: they show as running, then stalled "
        "(after KEELWAVE_STALL_AFTER_SECONDS), then timed out."
    )
    stdout.print(f"Look: `keelwave runs --loops`, `keelwave summary`, or {endpoint}")


def _agents(client: Keelwave, rng: random.Random) -> list[tuple[str, object]]:
    """Seven agents with the failure modes keelwave is for, one of them delegating to
    the others (nested runs)."""
    from keelwave.sdk import get_current_run

    turns: dict[str, int] = {}

    def turn(habit: str) -> int:
        """How often this habit came up before: each failure mode shows at a fixed rate,
        so every demo shows every one of them (sizes and timings stay random)."""
        turns[habit] = turns.get(habit, -1) + 1
        return turns[habit]

    def think_with_model(tokens: int, leads_to_a_step: bool = True) -> None:
        """A model call that decides the next tool call: it takes (a little) time, and
        is linked to the step it leads to, as an adapter in a real agent would record it
        (a call that leads to a child run instead is linked to no step)."""
        run = get_current_run()
        provider, model = rng.choice(MODELS)
        started = time.perf_counter()
        work(0.01, 0.05)
        run.llm_call(
            provider,
            model,
            input_tokens=tokens,
            output_tokens=tokens // 8,
            cache_read_tokens=tokens // 3,
            latency_ms=(time.perf_counter() - started) * 1000,
            step_index=run.step_count + 1 if leads_to_a_step else None,
        )

    def work(low: float, high: float) -> None:
        time.sleep(rng.uniform(low, high))  # tools take time: durations worth looking at

    @client.observe(name="web_search")
    def web_search(q: str, max_results: int = 3, request_id: str | None = None) -> dict:
        work(0.01, 0.06)
        return {"results": [f"{q} — result {i}" for i in range(max_results)]}

    @client.observe(name="fetch_url")
    def fetch_url(url: str) -> str:
        work(0.005, 0.04)
        return f"<html>{url}</html>"

    @client.observe(name="run_sql")
    def run_sql(query: str) -> list:
        work(0.002, 0.02)
        if "DROP" in query:
            raise RuntimeError("permission denied for table customers")
        return [{"rows": rng.randint(0, 500)}]

    @client.observe(name="open_page")
    def open_page(url: str) -> str:
        work(0.01, 0.04)
        return f"<title>{url.rsplit('/', 1)[-1]}</title>"

    @client.observe(name="click")
    def click(selector: str) -> dict:
        work(0.005, 0.02)
        return {"navigated": False}

    @client.agent(name="research-agent")
    def research(question: str) -> str:
        run = get_current_run()
        habit = ("varied", "looping", "varied", "rephrasing")[turn("research") % 4]
        for attempt in range(rng.randint(3, 7)):
            think_with_model(rng.randint(2_000, 12_000))
            if habit == "looping":  # the same thing again and again: the SDK flags it
                web_search(q=question)
            elif habit == "rephrasing":  # the same search with a fresh request id each time:
                # no two calls are byte-identical, the server calls them near-duplicates
                web_search(q=question, request_id=f"req-{rng.getrandbits(48):012x}")
            else:
                web_search(q=f"{question} {attempt}")
        run.think("I have enough to answer.")
        return f"Answer to {question!r}"

    @client.agent(name="browser-agent")
    def browser(question: str) -> str:
        # Half the time it goes round in circles, cart → "Checkout" → cart → …: no call
        # repeats on its own, the pair does (a cycle).
        if turn("browser") % 2 == 0:
            for _ in range(rng.randint(2, 4)):
                think_with_model(rng.randint(1_000, 3_000))
                open_page(url="https://shop.example.com/cart")
                click(selector="button#checkout")
            return "Could not check out."
        for item in range(rng.randint(2, 4)):
            think_with_model(rng.randint(1_000, 3_000))
            open_page(url=f"https://shop.example.com/item/{item}")
        return "Compared the items."

    @client.agent(name="triage-agent")
    def triage(question: str) -> str:
        think_with_model(rng.randint(500, 1_500), leads_to_a_step=False)
        # It hands the question to a specialist: that agent's run is a child of this one.
        specialist = sql if turn("triage") % 3 == 2 else research
        specialist(question)
        return "Routed and answered."

    @client.agent(name="support-agent")
    def support(question: str) -> str:
        think_with_model(rng.randint(500, 3_000))
        fetch_url(url="https://help.example.com/" + str(rng.randint(1, 99)))
        return "Here is how to fix it."

    def stalling_support(question: str) -> str:
        if turn("support") % 4 != 3:
            return support(question)
        # A run that is never finished, as when an agent process hangs or dies:
        # it shows as running, then stalled, then timed out.
        run = client.start_run("support-agent", input={"question": question})
        run.tool_call("fetch_url", input={"url": "https://help.example.com/slow"})
        return "left unfinished"

    @client.agent(name="sql-agent")
    def sql(question: str) -> list:
        think_with_model(rng.randint(1_000, 6_000))
        run_sql(query="SELECT count(*) FROM customers")
        if turn("sql") % 3 == 1:
            run_sql(query="DROP TABLE customers")  # the tool fails: the run errors
        return []

    @client.agent(name="planner-agent", max_steps=8)
    def planner(question: str) -> str:
        for step in range((4, 6, 12)[turn("planner") % 3]):  # 12 passes max_steps: stopped
            think_with_model(rng.randint(800, 4_000))
            fetch_url(url=f"https://wiki.example.com/page/{step}")
        return "Plan ready."

    @client.agent(name="summarizer-agent", stop_on_loop=True)
    def summarizer(question: str) -> str:
        run = get_current_run()
        think_with_model(rng.randint(20_000, 120_000))
        fetch_url(url="https://docs.example.com/long")
        if turn("summarizer") % 3 == 2:
            fetch_url(url="https://docs.example.com/long")  # a repeat: stop_on_loop stops it
        elif turn("summarizer-context") % 3 == 1:
            run.finish("context_limit", error="context window exceeded (128k tokens)")
            return "stopped: context limit"
        return "Summary."

    return [("research-agent", research), ("support-agent", stalling_support),
            ("sql-agent", sql), ("planner-agent", planner),
            ("summarizer-agent", summarizer), ("browser-agent", browser),
            ("triage-agent", triage)]  # fmt: skip
