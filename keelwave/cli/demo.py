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

    Five small agents through the Python SDK, with guards and model calls.
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
            outcome = result if result == "left unfinished" else "ok"
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
    """Five agents with the failure modes keelwave is for."""
    from keelwave.sdk import get_current_run

    def think_with_model(tokens: int) -> None:
        """A model call that decides the next tool call: it takes (a little) time, and
        is linked to the step it leads to, as an adapter in a real agent would record it."""
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
            step_index=run.step_count + 1,
        )

    def work(low: float, high: float) -> None:
        time.sleep(rng.uniform(low, high))  # tools take time: durations worth looking at

    @client.observe(name="web_search")
    def web_search(q: str, max_results: int = 3) -> dict:
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

    @client.agent(name="research-agent")
    def research(question: str) -> str:
        run = get_current_run()
        looping = rng.random() < 0.4
        for attempt in range(rng.randint(3, 7)):
            think_with_model(rng.randint(2_000, 12_000))
            # A looping run asks the same thing again and again: the SDK flags it.
            web_search(q=question if looping else f"{question} {attempt}")
        run.think("I have enough to answer.")
        return f"Answer to {question!r}"

    @client.agent(name="support-agent")
    def support(question: str) -> str:
        think_with_model(rng.randint(500, 3_000))
        fetch_url(url="https://help.example.com/" + str(rng.randint(1, 99)))
        return "Here is how to fix it."

    def stalling_support(question: str) -> str:
        if rng.random() >= 0.25:
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
        if rng.random() < 0.35:
            run_sql(query="DROP TABLE customers")  # the tool fails: the run errors
        return []

    @client.agent(name="planner-agent", max_steps=8)
    def planner(question: str) -> str:
        for step in range(rng.choice([4, 6, 12])):  # 12 passes max_steps: stopped
            think_with_model(rng.randint(800, 4_000))
            fetch_url(url=f"https://wiki.example.com/page/{step}")
        return "Plan ready."

    @client.agent(name="summarizer-agent", stop_on_loop=True)
    def summarizer(question: str) -> str:
        run = get_current_run()
        think_with_model(rng.randint(20_000, 120_000))
        fetch_url(url="https://docs.example.com/long")
        if rng.random() < 0.3:
            fetch_url(url="https://docs.example.com/long")  # a repeat: stop_on_loop stops it
        if rng.random() < 0.3:
            run.finish("context_limit", error="context window exceeded (128k tokens)")
        return "Summary."

    return [("research-agent", research), ("support-agent", stalling_support),
            ("sql-agent", sql), ("planner-agent", planner),
            ("summarizer-agent", summarizer)]  # fmt: skip
