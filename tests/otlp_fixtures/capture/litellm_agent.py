"""Capture a hand-written agent loop on LiteLLM, with LiteLLM's instrumentations (no network).

Run: python tests/otlp_fixtures/capture/litellm_agent.py MODE
Needs: litellm opentelemetry-sdk opentelemetry-exporter-otlp-proto-common, and per MODE:
  otel               nothing more: LiteLLM's own callback, ``litellm.callbacks = ["otel"]``
                     (litellm_otel_<scenario>.json)
  otel-request-span  the same with ``USE_OTEL_LITELLM_REQUEST_SPAN=true``
                     (litellm_otel_request_span_<scenario>.json)
  otel-genai         the same plus ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
                     (litellm_otel_genai_<scenario>.json)
  openinference      openinference-instrumentation-litellm (litellm_<scenario>.json)
  openllmetry        opentelemetry-instrumentation-litellm, OpenLLMetry's
                     (litellm_openllmetry_<scenario>.json)
  smolagents         smolagents openinference-instrumentation-smolagents
                     openinference-instrumentation-litellm: smolagents' ``ToolCallingAgent`` with
                     ``LiteLLMModel`` under both OpenInference instrumentors
                     (smolagents_litellm_loop.json only)

The loop calls ``litellm.completion(model="openai/gpt-4o-mini", tools=[...])``, runs the
tool calls the model asks for itself and answers when the model stops asking. LiteLLM's
OpenAI provider goes through the real OpenAI SDK, whose HTTP client is
``litellm.client_session``: an ``httpx.MockTransport`` answering in-process. Turn n of an
agent (n = tool results in its conversation) reports input 100 + 10n, output 20 + n
tokens; the loop's tool calls carry the arguments ``{"city": "Paris",  "unit": "celsius"}``
(two spaces). ``LITELLM_LOCAL_MODEL_COST_MAP`` keeps LiteLLM from fetching its price list.

LiteLLM's ``otel`` callback takes the global tracer provider when it is an SDK one (the
script sets the Capture's first; ``OTEL_EXPORTER``/``OTEL_ENDPOINT`` only matter when it
builds its own). It logs a call from a background thread after the call returned, with
the caller's context, and, when a span is current and ``USE_OTEL_LITELLM_REQUEST_SPAN`` is
not set, writes the call's attributes onto *that* span (here the agent span) instead of
opening one. The script waits for that thread after each call, so that the spans do not
depend on timing (without the wait, the last call's attributes can reach the agent span
after it ended, and be dropped).

Scenarios (the loop opens no tool spans, except in tool_error):
  loop        ``invoke_agent weather_agent`` (``gen_ai.operation.name = invoke_agent``,
              ``gen_ai.agent.name = weather_agent``): get_weather 3x with the same
              arguments, then an answer (4 model calls)
  tool_error  ``invoke_agent fetch_agent``: fetch_page raises inside an
              ``execute_tool fetch_page`` span the loop opens (ERROR, exception event);
              the loop sends the error to the model, which answers
  nested      ``invoke_agent trip_planner`` calls ask_weather_agent, which runs the
              weather loop in ``invoke_agent weather_agent`` (no tool span between)
  loop_root   the loop inside a plain span ``weather_agent`` (no agent marker)
"""

from __future__ import annotations

import json
import os
import re
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported

try:  # openai 3 sends through httpx2
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx
from _otlp import Capture
from opentelemetry import trace

MODE = sys.argv[1] if len(sys.argv) > 1 else "otel"
if MODE in ("otel", "otel-request-span", "otel-genai"):
    if MODE != "otel":  # a litellm_request span per call even when a span is current
        os.environ["USE_OTEL_LITELLM_REQUEST_SPAN"] = "true"
    if MODE == "otel-genai":
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    cap = Capture(f"keelwave-capture-litellm-{MODE}")
    trace.set_tracer_provider(cap.provider)  # LiteLLM's callback takes it over
    import litellm

    litellm.callbacks = ["otel"]
    PREFIX = "litellm_" + MODE.replace("-", "_")
elif MODE == "openinference":
    import litellm
    from openinference.instrumentation.litellm import LiteLLMInstrumentor

    cap = Capture("keelwave-capture-litellm-openinference")
    LiteLLMInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "litellm"
elif MODE == "openllmetry":
    import litellm
    from opentelemetry.instrumentation.litellm import LiteLLMInstrumentor

    cap = Capture("keelwave-capture-litellm-openllmetry")
    LiteLLMInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "litellm_openllmetry"
elif MODE == "smolagents":
    import litellm
    from openinference.instrumentation.litellm import LiteLLMInstrumentor
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    cap = Capture("keelwave-capture-smolagents-litellm")
    SmolagentsInstrumentor().instrument(tracer_provider=cap.provider)
    LiteLLMInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "smolagents_litellm"
else:
    raise SystemExit(f"unknown mode {MODE!r}: see the docstring")

from litellm.litellm_core_utils.thread_pool_executor import executor  # noqa: E402

tracer = cap.provider.get_tracer("hand-written-agent")
MODEL = "openai/gpt-4o-mini"
ARGUMENTS = '{"city": "Paris",  "unit": "celsius"}'

# What the fake model does, by the (first) tool it is offered: (tool, arguments) per turn,
# then the answer.
SCRIPTS = {
    "get_weather": ([("get_weather", ARGUMENTS)] * 3, "It is 18 degrees in Paris."),
    "fetch_page": ([("fetch_page", '{"url": "https://example.com/"}')], "The page is down."),
    "ask_weather_agent": (
        [("ask_weather_agent", '{"question": "Weather in Paris?"}')],
        "Pack a light jacket: 18 degrees in Paris.",
    ),
    # smolagents: its ToolCallingAgent ends with the final_answer tool
    "final_answer": (
        [("get_weather", ARGUMENTS)] * 3 + [("final_answer", '{"answer": "18 degrees"}')],
        "18 degrees",
    ),
}


PARAMETERS = {
    "get_weather": {"city": "string", "unit": "string"},
    "fetch_page": {"url": "string"},
    "ask_weather_agent": {"question": "string"},
}


def _spec(name: str, **properties: str) -> dict:
    props = {key: {"type": kind} for key, kind in properties.items()}
    return {"type": "function", "function": {"name": name, "description": name,
            "parameters": {"type": "object", "properties": props}}}  # fmt: skip


# --- the fake Chat Completions API -------------------------------------------------------


def _turn(messages: list[dict]) -> int:
    """Tool results so far (smolagents' ToolCallingAgent reports them as user text, merging
    consecutive user messages: count its markers)."""
    done = 0
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"text": content or ""}]
        text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        done += m.get("role") == "tool" or len(
            re.findall(r"(?:^|\n)(?:Observation|Error):\n", text)
        )
    return done


def _chat(body: dict) -> dict:
    n = _turn(body["messages"])
    names = [t["function"]["name"] for t in body.get("tools", [])]
    calls, answer = SCRIPTS["final_answer" if "final_answer" in names else names[0]]
    if n < len(calls):
        name, arguments = calls[n]
        call = {"id": f"call_{n}", "type": "function",
                "function": {"name": name, "arguments": arguments}}  # fmt: skip
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": answer}, "stop"
    return {
        "id": f"chatcmpl-{names[0]}-{n}", "object": "chat.completion", "created": 1764490000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100 + 10 * n, "completion_tokens": 20 + n,
                  "total_tokens": 120 + 11 * n},
    }  # fmt: skip


def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(json.loads(request.content)))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


# The HTTP client LiteLLM gives the OpenAI SDK (documented setting): the fake API.
litellm.client_session = httpx.Client(transport=httpx.MockTransport(_handle))


def settle() -> None:
    """Wait until LiteLLM's logging thread pool has run every callback submitted so far."""
    slots = executor._pending_slots
    for _ in range(executor._max_pending_tasks):
        slots.acquire()
    for _ in range(executor._max_pending_tasks):
        slots.release()


# --- the hand-written agent ----------------------------------------------------------------


def get_weather(city: str, unit: str = "celsius") -> str:
    return f"18 degrees {unit} in {city}"


def fetch_page(url: str) -> str:
    raise RuntimeError(f"connection refused: {url}")


def ask_weather_agent(question: str) -> str:
    return agent("weather_agent", question, {"get_weather": get_weather})


def run_tool(call, tools: dict, tool_span: bool) -> str:
    name, arguments = call.function.name, call.function.arguments
    if not tool_span:
        return tools[name](**json.loads(arguments))
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.call.arguments": arguments,
    }
    try:  # the SDK records the exception (ERROR status, exception event) as it leaves
        with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
            try:
                result = tools[name](**json.loads(arguments))
            except Exception as error:
                span.set_attribute("error.type", type(error).__name__)
                raise
            span.set_attribute("gen_ai.tool.call.result", result)
            return result
    except Exception as error:
        return f"Error: {error}"


def loop(question: str, tools: dict, tool_span: bool = False) -> str:
    specs = [_spec(name, **PARAMETERS[name]) for name in tools]
    messages: list[dict] = [{"role": "user", "content": question}]
    while True:
        response = litellm.completion(
            model=MODEL, messages=messages, tools=specs, api_key="sk-fake"
        )
        settle()
        reply = response.choices[0].message
        if not reply.tool_calls:
            return reply.content or ""
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in reply.tool_calls]})  # fmt: skip
        for call in reply.tool_calls:
            result = run_tool(call, tools, tool_span)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def agent(name: str, question: str, tools: dict, tool_span: bool = False) -> str:
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes):
        return loop(question, tools, tool_span)


def smolagents_loop() -> None:
    from smolagents import LiteLLMModel, ToolCallingAgent, tool

    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather for a city.

        Args:
            city: The city.
            unit: celsius or fahrenheit.
        """
        return f"18 degrees {unit} in {city}"

    model = LiteLLMModel(model_id=MODEL, api_key="sk-fake")
    weather = ToolCallingAgent(
        tools=[get_weather], model=model, name="weather_agent", verbosity_level=0
    )
    print(weather.run("Weather in Paris?"))
    settle()
    cap.save(f"{PREFIX}_loop")


def main() -> None:
    if MODE == "smolagents":
        smolagents_loop()
        cap.shutdown()
        return
    print(agent("weather_agent", "Weather in Paris?", {"get_weather": get_weather}))
    cap.save(f"{PREFIX}_loop")
    print(agent("fetch_agent", "Fetch example.com", {"fetch_page": fetch_page}, tool_span=True))
    cap.save(f"{PREFIX}_tool_error")
    print(agent("trip_planner", "Plan my day in Paris", {"ask_weather_agent": ask_weather_agent}))
    cap.save(f"{PREFIX}_nested")
    with tracer.start_as_current_span("weather_agent"):
        print(loop("Weather in Paris?", {"get_weather": get_weather}))
    cap.save(f"{PREFIX}_loop_root")
    cap.shutdown()


if __name__ == "__main__":
    main()
