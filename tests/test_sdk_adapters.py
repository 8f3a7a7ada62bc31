"""wrap_openai / wrap_anthropic with the real provider packages against a local fake."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from conftest import make_project
from fake_providers import USAGE_ANTHROPIC, USAGE_OPENAI, USAGE_RESPONSES, FakeProviders

from keelwave import Keelwave, get_current_run

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")


@pytest.fixture(scope="module")
def providers():
    fake = FakeProviders()
    yield fake
    fake.stop()


@pytest.fixture
def setup(server, providers, db_url):
    project = make_project(db_url)
    sdk = Keelwave(api_key=project.keys["ingest"], endpoint=server.url, flush_at_exit=False)
    yield sdk, project
    sdk.shutdown()


def model_calls(server, project, run_id: str) -> list[dict]:
    response = httpx.get(
        f"{server.url}/v1/projects/{project.id}/agent/runs/{run_id}/llm", headers=project.auth()
    )
    response.raise_for_status()
    return response.json()["data"]


def test_openai_sync_calls_are_recorded(setup, server, providers) -> None:
    sdk, project = setup
    client = sdk.wrap_openai(openai.OpenAI(api_key="sk-test", base_url=providers.url + "/v1"))
    assert isinstance(client, openai.OpenAI)

    @sdk.observe()
    def ask(question: str) -> str:
        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
        )
        return completion.choices[0].message.content

    with sdk.run("openai-agent") as run:
        assert ask("hi") == "hello"
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[], stream=True, stream_options={"include_usage": True}
        )
        assert "".join(c.choices[0].delta.content for c in stream if c.choices) == "hello"
        response = client.responses.create(model="o4-mini", input="hi")
        assert response.output_text == "hi"
        events = list(client.responses.create(model="o4-mini", input="hi", stream=True))
        assert events[-1].type == "response.completed"
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="broken", messages=[])
    sdk.flush()
    calls = model_calls(server, project, run.id)
    assert len(calls) == 5
    first = calls[0]
    assert first["model"] == "gpt-4o-mini-2026-01-01" and first["provider"] == "openai"
    assert first["step_index"] == 1  # made inside the observed tool
    assert (first["input_tokens"], first["output_tokens"]) == (1200, 300)
    assert (first["cache_read_tokens"], first["reasoning_tokens"]) == (200, 120)
    assert first["cost_usd"] > 0  # priced by the server
    streamed = calls[1]
    assert streamed["step_index"] is None
    assert streamed["input_tokens"] == USAGE_OPENAI["prompt_tokens"]
    for call in calls[2:4]:
        assert call["input_tokens"] == USAGE_RESPONSES["input_tokens"]
        assert call["cache_read_tokens"] == 300 and call["reasoning_tokens"] == 40
    assert calls[4]["status"] == "error" and "BadRequestError" in calls[4]["error"]


def test_anthropic_sync_and_async(setup, server, providers) -> None:
    sdk, project = setup
    client = sdk.wrap_anthropic(anthropic.Anthropic(api_key="x", base_url=providers.url))
    async_client = sdk.wrap_anthropic(anthropic.AsyncAnthropic(api_key="x", base_url=providers.url))
    expected_input = sum(
        USAGE_ANTHROPIC[k]
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )

    @sdk.agent(name="claude-agent")
    def agent() -> str:
        message = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
        assert message.content[0].text == "hi"
        stream = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=10, messages=[], stream=True
        )
        assert [event.type for event in stream][-1] == "message_stop"

        async def async_part() -> None:
            await async_client.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=[])
            stream = await async_client.messages.create(
                model="claude-haiku-4-5", max_tokens=10, messages=[], stream=True
            )
            async for _ in stream:
                pass
            with pytest.raises(anthropic.BadRequestError):
                await async_client.messages.create(model="broken", max_tokens=1, messages=[])

        asyncio.run(async_part())
        return get_current_run().id

    run_id = agent()
    sdk.flush()
    calls = model_calls(server, project, run_id)
    assert [c["model"] for c in calls] == ["claude-sonnet-4-5"] * 2 + ["claude-haiku-4-5"] * 2 + [
        "broken"
    ]
    for call in calls[:4]:
        assert call["input_tokens"] == expected_input
        assert call["cache_read_tokens"] == USAGE_ANTHROPIC["cache_read_input_tokens"]
        assert call["output_tokens"] == USAGE_ANTHROPIC["output_tokens"]
        assert call["cost_usd"] > 0
    assert calls[4]["status"] == "error"
    response = httpx.get(
        f"{server.url}/v1/projects/{project.id}/agent/runs/{run_id}", headers=project.auth()
    )
    run = response.json()["data"]
    assert run["llm_calls"] == 5
    assert run["cost_usd"] == pytest.approx(sum(c["cost_usd"] or 0 for c in calls))
