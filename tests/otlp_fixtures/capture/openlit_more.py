"""Capture OpenLIT's auto-instrumentation of more agent frameworks (no network).

Run: python tests/otlp_fixtures/capture/openlit_more.py FRAMEWORK
  FRAMEWORK  needs (besides openlit opentelemetry-sdk opentelemetry-exporter-otlp-proto-common),
             each in an environment of its own
  pydanticai pydantic-ai (the full distribution: OpenLIT only instruments when a
             distribution named "pydantic-ai" is installed, pydantic-ai-slim is not enough)
  smolagents smolagents
  googleadk  google-adk
  agno       agno
  llamaindex llama-index (the full distribution, for the same reason; it brings
             llama-index-llms-openai)
  ag2        ag2 (0.x, the ``autogen`` API)
  autogen    autogen-agentchat autogen-ext[openai]
  strands    strands-agents
Writes openlit_<framework>_<scenario>.json. ``openlit_agents.py`` does the OpenAI Agents
SDK, LangGraph and CrewAI the same way.

What OpenLIT 1.45.0 does with each (the README has the spans): pydantic-ai: wraps
``Agent.run`` (``execute_task``) and the graph nodes' async ``run`` with sync wrappers
(zero-length spans; ``execute_tool <model>`` without the tool). smolagents: agent runs,
steps, ``execute_tool_call`` and ``Tool.__call__``. Google ADK: the Runner and
``BaseAgent.run_async``; its enrichment of ADK's own model and tool spans targets where ADK 1
had them, so ADK 2's spans come as ADK makes them. Agno: ``Agent.run``, ``Team.run``,
``FunctionCall.execute``. LlamaIndex: RAG pipeline methods and the base ``LLM.chat``, no
agent: only the OpenAI spans. AG2: ``ConversableAgent.send`` / ``receive`` /
``generate_reply`` (no tool spans). AutoGen AgentChat: nothing (OpenLIT's "autogen" is AG2's
package); autogen-core's own spans go to the global provider. Strands: nothing, the
instrumentation fails to import (``truncate_content``) and ``init`` skips it; Strands' own
spans go to the global provider.

As there: the capture provider is made the global one before ``openlit.init()`` (which
reuses a global SDK provider), and ``init`` runs with no metrics, no log-record events,
a local empty price list and content capture on. The frameworks are imported after
``init``. Models: where OpenLIT leaves model calls to the provider SDK's
instrumentation, the framework's real OpenAI model class over an ``openai`` client whose
``httpx`` transport is an in-process fake of the Chat Completions API (pydantic-ai:
``OpenAIChatModel``; smolagents: ``OpenAIModel``; Agno: ``OpenAIChat``; LlamaIndex:
``llama_index.llms.openai.OpenAI``, ``FunctionAgent(streaming=False)``: the fake API does not
stream; AG2: its OpenAI client, given the fake ``http_client`` in the config entry; AutoGen:
``OpenAIChatCompletionClient``). Google ADK and Strands open model-call spans themselves, whatever
the model class: there a hand-written model answers from the same script (ADK: a
``BaseLlm``; Strands: a ``Model`` streaming Bedrock-style events). Token counts follow the
README's convention (turn n: input 100 + 10n, output 20 + n), turn n being the number of
tool results in the conversation.

Scenarios (one fixture each):
  loop        agent weather_agent calls get_weather three times with the same arguments
              (the model's string '{"city": "Paris",  "unit": "celsius"}'; ADK: a dict),
              one call per turn, then answers
  tool_error  agent fetch_agent's tool fetch_page raises (what happens next is the
              framework's: see the README)
  nested      agent coordinator calls agent researcher, which calls its own tool lookup:
              through a tool ask_researcher that runs the inner agent (pydantic-ai,
              LlamaIndex, AG2: an inner two-agent chat, Strands), a managed agent
              (smolagents), an ``AgentTool`` (ADK, AutoGen) or a Team member (Agno: the
              team is coordinator, the tool delegate_task_to_member)
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import httpx  # openai < 3 (which openlit requires) is built on httpx
import openlit
from _otlp import Capture
from opentelemetry import trace

FRAMEWORKS = (
    "pydanticai",
    "smolagents",
    "googleadk",
    "agno",
    "llamaindex",
    "ag2",
    "autogen",
    "strands",
)
FRAMEWORK = sys.argv[1] if len(sys.argv) > 1 else ""
if FRAMEWORK not in FRAMEWORKS:
    raise SystemExit(f"unknown framework {FRAMEWORK!r}: one of {', '.join(FRAMEWORKS)}")
os.environ.setdefault("AGNO_TELEMETRY", "false")  # Agno's usage ping: no network
PREFIX = f"openlit_{FRAMEWORK}"
cap = Capture(f"keelwave-capture-{FRAMEWORK}-openlit")
trace.set_tracer_provider(cap.provider)  # openlit.init reuses a global SDK provider

# An empty price list of its own: otherwise openlit downloads one.
_pricing_dir = tempfile.mkdtemp(prefix="openlit-")
atexit.register(shutil.rmtree, _pricing_dir, ignore_errors=True)
_pricing = Path(_pricing_dir) / "pricing.json"
_pricing.write_text("{}")
openlit.init(
    service_name=f"keelwave-capture-{FRAMEWORK}-openlit",
    disable_metrics=True,
    disable_events=True,
    pricing_json=str(_pricing),
    capture_message_content=True,
)

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'
BASE_URL = "http://fake-openai.invalid/v1"
QUESTION = "What is a keel?"

# model name -> one answer per turn: (tool, arguments) or (None, text)
SCRIPTS: dict[str, list[tuple[str | None, str]]] = {
    "fake-loop-model": [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", '{"url": "https://example.com/"}'),
        (None, "The page could not be fetched."),
    ],
    "fake-outer-model": [
        ("ask_researcher", json.dumps({"question": QUESTION})),
        (None, "Researcher says: a keel is a backbone."),
    ],
    "fake-inner-model": [("lookup", '{"term": "keel"}'), (None, "A keel is a ship's backbone.")],
    # smolagents: the managed agent is a tool named after it, with a "task"
    "fake-manager-model": [
        ("researcher", json.dumps({"task": QUESTION})),
        (None, "Researcher says: a keel is a backbone."),
    ],
    # Agno: the team leader delegates with its tool delegate_task_to_member
    "fake-team-model": [
        ("delegate_task_to_member", json.dumps({"member_id": "researcher", "task": QUESTION})),
        (None, "Researcher says: a keel is a backbone."),
    ],
    # Google ADK: an AgentTool is named after its agent, with a "request"
    "fake-agenttool-model": [
        ("researcher", json.dumps({"request": QUESTION})),
        (None, "Researcher says: a keel is a backbone."),
    ],
}


def _answer(model: str, turn: int) -> tuple[str | None, str]:
    script = SCRIPTS[model]
    return script[min(turn, len(script) - 1)]


def _usage(turn: int) -> dict:
    return {
        "prompt_tokens": 100 + 10 * turn,
        "completion_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


# --- the fake Chat Completions API ---------------------------------------------------------


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _turn(messages: list[dict]) -> int:
    """The number of tool results in the conversation."""
    results = sum(m.get("role") == "tool" for m in messages)
    if results:
        return results
    # smolagents sends tool results as user messages ("Observation:" / "Error:"), merged.
    return sum(
        len(re.findall(r"(?:^|\n)(?:Observation|Error):\n", _text(m.get("content"))))
        for m in messages
    )


def _chat(body: dict) -> dict:
    turn = _turn(body["messages"])
    tool, payload = _answer(body["model"], turn)
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if tool is not None and not offered:  # asked without tools: it must answer
        tool, payload = None, "I could not finish: no more tool calls allowed."
    if tool is None and "final_answer" in offered:  # smolagents ends with its tool
        tool, payload = "final_answer", json.dumps({"answer": payload})
    if tool is None:
        message = {"role": "assistant", "content": payload}
        finish = "stop"
    else:
        function = {"name": tool, "arguments": payload}
        call = {"id": f"call_{tool}_{turn}", "type": "function", "function": function}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{body['model']}-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": _usage(turn),
    }


def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(json.loads(request.content)))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


def sync_http() -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(_handle))


def async_http() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(_handle))


# --- tools (plain functions; each framework wraps them its own way) --------------------------


def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city.

    Args:
        city: The city.
        unit: celsius or fahrenheit.
    """
    return f"18 degrees {unit} in {city}"


def fetch_page(url: str) -> str:
    """Fetch a web page.

    Args:
        url: The address.
    """
    raise RuntimeError(f"connection refused: {url}")


def lookup(term: str) -> str:
    """Look a term up in the encyclopedia.

    Args:
        term: The term.
    """
    return f"{term}: the structural backbone of a ship"


def _try(label: str, fn) -> None:
    """Run a scenario that may fail (the tool_error ones): print, don't stop."""
    try:
        print(label, "->", fn())
    except Exception as exc:
        print(label, "failed:", type(exc).__name__, exc)


# --- pydantic-ai ---------------------------------------------------------------------------


async def pydanticai() -> None:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(api_key="sk-fake", base_url=BASE_URL, http_client=async_http())

    def model(name: str) -> OpenAIChatModel:
        return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))

    async def run(label: str, agent: Agent, question: str) -> None:
        try:
            print(label, "->", (await agent.run(question)).output)
        except Exception as exc:
            print(label, "failed:", type(exc).__name__, exc)

    agent = Agent(
        model("fake-loop-model"),
        name="weather_agent",
        instructions="Answer weather questions.",
        tools=[get_weather],
    )
    await run("loop", agent, "Weather in Paris?")
    cap.save(f"{PREFIX}_loop")

    agent = Agent(model("fake-error-model"), name="fetch_agent", tools=[fetch_page])
    await run("tool_error", agent, "Fetch example.com")
    cap.save(f"{PREFIX}_tool_error")

    researcher = Agent(model("fake-inner-model"), name="researcher", tools=[lookup])

    async def ask_researcher(question: str) -> str:
        """Ask the research agent.

        Args:
            question: The question.
        """
        return (await researcher.run(question)).output

    coordinator = Agent(model("fake-outer-model"), name="coordinator", tools=[ask_researcher])
    await run("nested", coordinator, QUESTION)
    cap.save(f"{PREFIX}_nested")


# --- smolagents ----------------------------------------------------------------------------


def smolagents() -> None:
    from smolagents import OpenAIModel, ToolCallingAgent, tool

    def model(name: str) -> OpenAIModel:
        return OpenAIModel(
            name, api_base=BASE_URL, api_key="sk-fake", client_kwargs={"http_client": sync_http()}
        )

    def agent(name: str, model_name: str, tools: list, **kw) -> ToolCallingAgent:
        return ToolCallingAgent(
            tools=tools, model=model(model_name), name=name, verbosity_level=0, **kw
        )

    weather = agent("weather_agent", "fake-loop-model", [tool(get_weather)])
    _try("loop", lambda: weather.run("Weather in Paris?"))
    cap.save(f"{PREFIX}_loop")

    fetcher = agent("fetch_agent", "fake-error-model", [tool(fetch_page)])
    _try("tool_error", lambda: fetcher.run("Fetch example.com"))
    cap.save(f"{PREFIX}_tool_error")

    researcher = agent(
        "researcher",
        "fake-inner-model",
        [tool(lookup)],
        description="Answers questions from the encyclopedia.",
    )
    coordinator = agent("coordinator", "fake-manager-model", [], managed_agents=[researcher])
    _try("nested", lambda: coordinator.run(QUESTION))
    cap.save(f"{PREFIX}_nested")


# --- Google ADK ----------------------------------------------------------------------------


async def googleadk() -> None:
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.agent_tool import AgentTool
    from google.genai import types

    class ScriptedModel(BaseLlm):
        """Answers turn n of SCRIPTS[model], n being the tool results seen so far."""

        async def generate_content_async(
            self, llm_request, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            turn = sum(
                1
                for content in llm_request.contents
                for part in content.parts or []
                if part.function_response
            )
            tool, payload = _answer(self.model, turn)
            if tool is None:
                part = types.Part(text=payload)
            else:  # Gemini sends the arguments as an object, not a string
                call = types.FunctionCall(name=tool, args=json.loads(payload), id=f"call_{turn}")
                part = types.Part(function_call=call)
            yield LlmResponse(
                content=types.Content(role="model", parts=[part]),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=100 + 10 * turn,
                    candidates_token_count=20 + turn,
                    total_token_count=120 + 11 * turn,
                ),
            )

    async def run(label: str, agent: LlmAgent, question: str) -> None:
        runner = InMemoryRunner(agent=agent, app_name="keelwave-capture")
        session = await runner.session_service.create_session(
            app_name="keelwave-capture", user_id="u"
        )
        message = types.Content(role="user", parts=[types.Part(text=question)])
        try:
            async for event in runner.run_async(
                user_id="u", session_id=session.id, new_message=message
            ):
                if event.is_final_response() and event.content and event.content.parts:
                    print(label, "->", event.content.parts[0].text)
        except Exception as exc:  # tool_error: ADK lets the exception end the run
            print(label, "failed:", type(exc).__name__, exc)

    agent = LlmAgent(
        name="weather_agent",
        model=ScriptedModel(model="fake-loop-model"),
        instruction="Answer weather questions.",
        tools=[get_weather],
    )
    await run("loop", agent, "Weather in Paris?")
    cap.save(f"{PREFIX}_loop")

    agent = LlmAgent(
        name="fetch_agent", model=ScriptedModel(model="fake-error-model"), tools=[fetch_page]
    )
    await run("tool_error", agent, "Fetch example.com")
    cap.save(f"{PREFIX}_tool_error")

    researcher = LlmAgent(
        name="researcher",
        model=ScriptedModel(model="fake-inner-model"),
        description="Answers questions from the encyclopedia.",
        tools=[lookup],
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel(model="fake-agenttool-model"),
        tools=[AgentTool(agent=researcher)],
    )
    await run("nested", coordinator, QUESTION)
    cap.save(f"{PREFIX}_nested")


# --- Agno ----------------------------------------------------------------------------------


def agno() -> None:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    def model(name: str) -> OpenAIChat:
        return OpenAIChat(id=name, api_key="sk-fake", base_url=BASE_URL, http_client=sync_http())

    agent = Agent(
        name="weather_agent",
        model=model("fake-loop-model"),
        instructions="Answer weather questions.",
        tools=[get_weather],
    )
    _try("loop", lambda: agent.run("Weather in Paris?").content)
    cap.save(f"{PREFIX}_loop")

    agent = Agent(name="fetch_agent", model=model("fake-error-model"), tools=[fetch_page])
    _try("tool_error", lambda: agent.run("Fetch example.com").content)
    cap.save(f"{PREFIX}_tool_error")

    researcher = Agent(
        id="researcher",
        name="researcher",
        role="Answers questions from the encyclopedia.",
        model=model("fake-inner-model"),
        tools=[lookup],
    )
    team = Team(name="coordinator", model=model("fake-team-model"), members=[researcher])
    _try("nested", lambda: team.run(QUESTION).content)
    cap.save(f"{PREFIX}_nested")


# --- LlamaIndex ----------------------------------------------------------------------------


async def llamaindex() -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import LLMMetadata
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai import OpenAI

    class FakeOpenAI(OpenAI):
        """The real OpenAI LLM; only its metadata accepts a model name OpenAI doesn't know."""

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(
                context_window=128000,
                num_output=-1,
                is_chat_model=True,
                is_function_calling_model=True,
                model_name=self.model,
            )

    def agent(name: str, model: str, tools: list, prompt: str) -> FunctionAgent:
        llm = FakeOpenAI(
            model=model,
            api_key="sk-fake",
            api_base=BASE_URL,
            http_client=sync_http(),
            async_http_client=async_http(),
        )
        tools = [FunctionTool.from_defaults(t) for t in tools]
        # streaming=False: the fake API answers with whole responses, not server-sent events
        return FunctionAgent(
            name=name,
            description=prompt,
            tools=tools,
            llm=llm,
            system_prompt=prompt,
            streaming=False,
        )

    async def run(label: str, workflow: FunctionAgent, question: str) -> None:
        try:
            print(label, "->", await workflow.run(user_msg=question))
        except Exception as exc:
            print(label, "failed:", type(exc).__name__, exc)

    weather = agent("weather_agent", "fake-loop-model", [get_weather], "Answer weather questions.")
    await run("loop", weather, "Weather in Paris?")
    cap.save(f"{PREFIX}_loop")

    fetcher = agent("fetch_agent", "fake-error-model", [fetch_page], "Fetch pages.")
    await run("tool_error", fetcher, "Fetch example.com")
    cap.save(f"{PREFIX}_tool_error")

    researcher = agent("researcher", "fake-inner-model", [lookup], "Answer from the encyclopedia.")

    async def ask_researcher(question: str) -> str:
        """Ask the research agent.

        Args:
            question: The question.
        """
        return str(await researcher.run(user_msg=question))

    coordinator = agent("coordinator", "fake-outer-model", [ask_researcher], "Coordinate.")
    await run("nested", coordinator, QUESTION)
    cap.save(f"{PREFIX}_nested")


# --- AG2 -----------------------------------------------------------------------------------


def ag2() -> None:
    from autogen import AssistantAgent, LLMConfig, UserProxyAgent, register_function

    def chat(name: str, model: str, tool, question: str):
        """A user proxy (executes the tools) talks to an assistant (its model asks for them)."""
        config = {
            "api_type": "openai",
            "model": model,
            "api_key": "sk-fake",
            "base_url": BASE_URL,
            "http_client": sync_http(),
        }
        assistant = AssistantAgent(
            name, llm_config=LLMConfig(config, cache_seed=None), system_message="Use the tools."
        )
        user = UserProxyAgent(
            "user",
            human_input_mode="NEVER",
            code_execution_config=False,
            max_consecutive_auto_reply=10,
            is_termination_msg=lambda m: not m.get("tool_calls") and bool(m.get("content")),
        )
        register_function(tool, caller=assistant, executor=user, description=tool.__doc__)
        return user.initiate_chat(assistant, message=question, silent=True).summary

    _try("loop", lambda: chat("weather_agent", "fake-loop-model", get_weather, "Weather in Paris?"))
    cap.save(f"{PREFIX}_loop")

    question = "Fetch example.com"
    _try("tool_error", lambda: chat("fetch_agent", "fake-error-model", fetch_page, question))
    cap.save(f"{PREFIX}_tool_error")

    def ask_researcher(question: str) -> str:
        """Ask the research agent."""
        return chat("researcher", "fake-inner-model", lookup, question)

    _try("nested", lambda: chat("coordinator", "fake-outer-model", ask_researcher, QUESTION))
    cap.save(f"{PREFIX}_nested")


# --- Strands -------------------------------------------------------------------------------


def strands() -> None:
    from strands import Agent, tool
    from strands.models.model import Model

    class ScriptedModel(Model):
        """A Strands model streaming SCRIPTS[model_id][number of tool results so far]."""

        def __init__(self, model_id: str) -> None:
            self.config = {"model_id": model_id}

        def update_config(self, **model_config) -> None:
            self.config.update(model_config)

        def get_config(self):
            return self.config

        async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
            raise NotImplementedError
            yield

        async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
            turn = sum("toolResult" in block for m in messages for block in m["content"])
            name, payload = _answer(self.config["model_id"], turn)
            yield {"messageStart": {"role": "assistant"}}
            if name is None:
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": payload}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "end_turn"}}
            else:
                start = {"toolUse": {"name": name, "toolUseId": f"tooluse_{turn}"}}
                yield {"contentBlockStart": {"start": start}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": payload}}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "tool_use"}}
            usage = {
                "inputTokens": 100 + 10 * turn,
                "outputTokens": 20 + turn,
                "totalTokens": 120 + 11 * turn,
            }
            yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 5}}}

    def agent(name: str, model: str, tools: list) -> Agent:
        return Agent(model=ScriptedModel(model), tools=tools, name=name, callback_handler=None)

    weather = agent("weather_agent", "fake-loop-model", [tool(get_weather)])
    _try("loop", lambda: weather("Weather in Paris?"))
    cap.save(f"{PREFIX}_loop")

    fetcher = agent("fetch_agent", "fake-error-model", [tool(fetch_page)])
    _try("tool_error", lambda: fetcher("Fetch example.com"))
    cap.save(f"{PREFIX}_tool_error")

    @tool
    def ask_researcher(question: str) -> str:
        """Ask the research agent.

        Args:
            question: The question.
        """
        return str(agent("researcher", "fake-inner-model", [tool(lookup)])(question))

    _try("nested", lambda: agent("coordinator", "fake-outer-model", [ask_researcher])(QUESTION))
    cap.save(f"{PREFIX}_nested")


# --- AutoGen AgentChat ---------------------------------------------------------------------


def autogen() -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.tools import AgentTool
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    info = {"vision": False, "function_calling": True, "json_output": False,
            "structured_output": False, "family": "unknown"}  # fmt: skip

    def agent(name: str, model: str, tools: list) -> AssistantAgent:
        client = OpenAIChatCompletionClient(
            model=model, api_key="sk-fake", base_url=BASE_URL, model_info=info,
            http_client=async_http(),
        )  # fmt: skip
        return AssistantAgent(
            name, model_client=client, tools=tools, max_tool_iterations=10, description=name
        )

    async def run(label: str, make, question: str) -> None:
        # (an agent is made inside the scenario's event loop, which its client binds to)
        result = await make().run(task=question)
        print(label, "->", result.messages[-1].content)

    # each in its own asyncio.run: AgentChat's run() leaves the agent's message stream
    # open, and its span ends only when the event loop shuts the generator down
    asyncio.run(run("loop", lambda: agent("weather_agent", "fake-loop-model", [get_weather]),
                    "Weather in Paris?"))  # fmt: skip
    cap.save(f"{PREFIX}_loop")

    asyncio.run(run("tool_error", lambda: agent("fetch_agent", "fake-error-model", [fetch_page]),
                    "Fetch example.com"))  # fmt: skip
    cap.save(f"{PREFIX}_tool_error")

    def coordinator() -> AssistantAgent:
        researcher = agent("researcher", "fake-inner-model", [lookup])
        return agent("coordinator", "fake-manager-model", [AgentTool(researcher)])

    asyncio.run(run("nested", coordinator, QUESTION))
    cap.save(f"{PREFIX}_nested")


if __name__ == "__main__":
    result = globals()[FRAMEWORK]()
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    cap.shutdown()
