"""Capture a LangChain 1.x agent (``langchain.agents.create_agent``) through each
LangChain instrumentation (no network).

Run: python tests/otlp_fixtures/capture/langchain_create_agent.py openinference
       needs langchain langchain-openai openinference-instrumentation-langchain
       writes langchain_openinference_<scenario>.json
     python tests/otlp_fixtures/capture/langchain_create_agent.py openllmetry
       needs langchain langchain-openai opentelemetry-instrumentation-langchain (traceloop)
       writes langchain_openllmetry_<scenario>.json
     python tests/otlp_fixtures/capture/langchain_create_agent.py genai
       needs langchain langchain-openai opentelemetry-instrumentation-genai-langchain
       (OpenTelemetry's own, GenAI conventions; content capture turned on by the script)
       writes langchain_genai_<scenario>.json
     python tests/otlp_fixtures/capture/langchain_create_agent.py openlit
       needs langchain langchain-openai openlit (openai < 3); writes
       langchain_openlit_<scenario>.json
All need opentelemetry-sdk opentelemetry-exporter-otlp-proto-common. The
instrumentations each hook LangChain's callbacks (OpenLIT: LangGraph's methods too):
install and run one at a time, in a virtual environment each.

``create_agent`` (LangChain 1.x's agent, replacing LangGraph's ``create_react_agent``)
builds a LangGraph graph named after the agent, with nodes ``model`` and ``tools`` and
one node per middleware hook (``ModelCallLimitMiddleware.before_model`` …). The model is
langchain-openai's ``ChatOpenAI`` (Chat Completions) over an ``httpx.MockTransport``
that answers from a script, so each instrumentation sees a real provider ("openai"), the
model's tool-argument string and its token usage: the call of turn n (n = the number of
tool results in the request, per agent) reports input 100 + 10n, output 20 + n, total
120 + 11n. The loop's arguments are the string '{"city": "Paris",  "unit": "celsius"}'
(two spaces, on purpose).

Scenarios (one fixture each):
  loop          weather_agent calls get_weather three times with the same arguments, one
                call per turn, then answers (4 model calls)
  tool_error    fetch_agent's fetch_page raises. create_agent's ToolNode keeps LangGraph's
                default handler, which re-raises anything but an invalid tool call: the
                run fails (the model is not told)
  tool_error_handled  the same with ToolErrorMiddleware(on_error=...): the error goes back
                to the model as a ToolMessage(status="error"), and the model answers
  nested        orchestrator's tool ask_weather_expert invokes an inner create_agent agent
                weather_expert, which calls get_weather once and answers
  step_limit    weather_agent's model asks for get_weather forever; ModelCallLimitMiddleware
                (run_limit=2, exit_behavior="end"): two model calls and two tool calls, then
                the middleware ends the run with an AIMessage "Model call limits exceeded:
                run limit (2/2)", no exception
  step_limit_recursion  the same model without middleware, recursion_limit=4: two model
                calls and two tool calls, then GraphRecursionError (create_agent, unlike
                create_react_agent, has no remaining_steps: the run fails)
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:  # openai < 3 (OpenLIT's) on httpx
    import httpx
from _otlp import Capture

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
PREFIX = f"langchain_{INSTRUMENTATION}"
cap = Capture(f"keelwave-capture-langchain-{INSTRUMENTATION}")
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=cap.provider)
elif INSTRUMENTATION == "openllmetry":
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    LangchainInstrumentor().instrument(tracer_provider=cap.provider)
elif INSTRUMENTATION == "genai":
    # The upstream GenAI instrumentation records content only when told to, and only
    # in the latest GenAI conventions.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=cap.provider)
elif INSTRUMENTATION == "openlit":
    import openlit
    from opentelemetry import trace

    trace.set_tracer_provider(cap.provider)  # openlit.init reuses a global SDK provider
    # An empty price list of its own: otherwise openlit downloads one.
    _pricing_dir = tempfile.mkdtemp(prefix="openlit-")
    atexit.register(shutil.rmtree, _pricing_dir, ignore_errors=True)
    _pricing = Path(_pricing_dir) / "pricing.json"
    _pricing.write_text("{}")
    # Before any graph is built: OpenLIT wraps StateGraph.add_node.
    openlit.init(
        service_name=f"keelwave-capture-langchain-{INSTRUMENTATION}",
        disable_metrics=True,
        disable_events=True,
        pricing_json=str(_pricing),
        capture_message_content=True,
    )
else:
    raise SystemExit(
        f"unknown instrumentation {INSTRUMENTATION!r}: openinference, openllmetry, genai or openlit"
    )

from langchain.agents import create_agent  # noqa: E402  (after the instrumentors)
from langchain.agents.middleware import ModelCallLimitMiddleware, ToolErrorMiddleware  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.errors import GraphRecursionError  # noqa: E402

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'
BASE_URL = "http://fake-openai.invalid/v1"


# The model scripts: model name -> turn -> ("call", tool, arguments) or ("text", answer),
# where turn is the number of tool results the model has been sent.
def _script(model: str, turn: int) -> tuple[str, str, str]:
    if model == "fake-loop-model":
        if turn < 3:
            return ("call", "get_weather", LOOP_ARGS)
        return ("text", "It is 18 degrees in Paris.", "")
    if model == "fake-forever-model":  # never stops asking
        return ("call", "get_weather", LOOP_ARGS)
    if model == "fake-error-model":
        if turn < 1:
            return ("call", "fetch_page", '{"url": "https://example.com/"}')
        return ("text", "The page could not be fetched.", "")
    if model == "fake-outer-model":
        if turn < 1:
            return ("call", "ask_weather_expert", '{"question": "Weather in Paris?"}')
        return ("text", "The expert says: 18 degrees in Paris.", "")
    if model == "fake-inner-model":
        if turn < 1:
            return ("call", "get_weather", LOOP_ARGS)
        return ("text", "18 degrees celsius in Paris.", "")
    raise AssertionError(model)


def _chat(body: dict) -> dict:
    turn = sum(m["role"] == "tool" for m in body["messages"])
    kind, a, b = _script(body["model"], turn)
    if kind == "call":
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{a}_{turn}",
                    "type": "function",
                    "function": {"name": a, "arguments": b},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": a}
        finish = "stop"
    return {
        "id": f"chatcmpl-{body['model']}-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {
            "prompt_tokens": 100 + 10 * turn,
            "completion_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(json.loads(request.content)))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


_http_client = httpx.Client(transport=httpx.MockTransport(_handle))


def model(name: str) -> ChatOpenAI:
    return ChatOpenAI(model=name, api_key="sk-fake", base_url=BASE_URL, http_client=_http_client)


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


def main() -> None:
    agent = create_agent(
        model("fake-loop-model"),
        [get_weather],
        system_prompt="Answer weather questions.",
        name="weather_agent",
    )
    print(agent.invoke({"messages": [("user", "Weather in Paris?")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_loop")

    agent = create_agent(model("fake-error-model"), [fetch_page], name="fetch_agent")
    try:
        agent.invoke({"messages": [("user", "Fetch example.com")]})
    except RuntimeError as exc:
        print("run failed as intended:", exc)
    cap.save(f"{PREFIX}_tool_error")

    def on_error(exc: Exception, request) -> str:
        return f"Error: {type(exc).__name__}: {exc}"

    agent = create_agent(
        model("fake-error-model"),
        [fetch_page],
        middleware=[ToolErrorMiddleware(on_error)],
        name="fetch_agent",
    )
    print(agent.invoke({"messages": [("user", "Fetch example.com")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_tool_error_handled")

    weather_expert = create_agent(model("fake-inner-model"), [get_weather], name="weather_expert")

    @tool
    def ask_weather_expert(question: str) -> str:
        """Ask the weather expert agent."""
        result = weather_expert.invoke({"messages": [("user", question)]})
        return result["messages"][-1].content

    agent = create_agent(model("fake-outer-model"), [ask_weather_expert], name="orchestrator")
    print(agent.invoke({"messages": [("user", "Weather in Paris?")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_nested")

    agent = create_agent(
        model("fake-forever-model"),
        [get_weather],
        middleware=[ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")],
        name="weather_agent",
    )
    print(agent.invoke({"messages": [("user", "Weather in Paris?")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_step_limit")

    agent = create_agent(model("fake-forever-model"), [get_weather], name="weather_agent")
    try:
        agent.invoke({"messages": [("user", "Weather in Paris?")]}, {"recursion_limit": 4})
    except GraphRecursionError as exc:
        print("run failed as intended:", type(exc).__name__)
    cap.save(f"{PREFIX}_step_limit_recursion")
    cap.shutdown()


if __name__ == "__main__":
    main()
