"""Model-call content: the adapters' opt-in capture sends the prompt and the response,
redacted, and the server keeps and answers them (/llm, the timeline); without the
option nothing of the content leaves the agent. OTLP messages (attribute form, the
older events, OpenInference's flattened lists) land in the same fields."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from conftest import make_project
from fake_providers import FakeProviders

from keelwave import Keelwave

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

SECRET = "sk-" + "Zx9Yw8Vu" * 6


@pytest.fixture(scope="module")
def providers():
    fake = FakeProviders()
    yield fake
    fake.stop()


@pytest.fixture
def setup(server, db_url):
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


def test_openai_content_is_sent_when_asked(setup, server, providers) -> None:
    sdk, project = setup
    client = sdk.wrap_openai(
        openai.OpenAI(api_key="sk-test", base_url=providers.url + "/v1"), capture_content=True
    )
    prompt = [{"role": "user", "content": f"my key is {SECRET}, say hello"}]
    with sdk.run("capturing") as run:
        client.chat.completions.create(model="gpt-4o-mini", messages=prompt)
        stream = client.chat.completions.create(model="gpt-4o", messages=prompt, stream=True)
        assert "".join(c.choices[0].delta.content for c in stream if c.choices) == "hello"
        client.responses.create(model="o4-mini", input="hi", instructions="be brief")
    sdk.flush()
    chat, streamed, responses = model_calls(server, project, run.id)
    assert chat["input_messages"] == [
        {"role": "user", "content": "my key is [REDACTED], say hello"}
    ]
    assert chat["output_messages"] == [{"role": "assistant", "content": "hello"}]
    assert streamed["output_messages"] == [{"role": "assistant", "content": "hello"}]
    assert responses["input_messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    [item] = responses["output_messages"]
    assert item["role"] == "assistant" and item["content"][0]["text"] == "hi"


def test_anthropic_content_sync_streamed_and_async(setup, server, providers) -> None:
    sdk, project = setup
    client = sdk.wrap_anthropic(
        anthropic.Anthropic(api_key="sk-ant-test", base_url=providers.url), capture_content=True
    )
    async_client = sdk.wrap_anthropic(
        anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=providers.url),
        capture_content=True,
    )
    prompt = [{"role": "user", "content": "hi"}]
    with sdk.run("capturing") as run:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=5, system="terse",
                               messages=prompt)  # fmt: skip
        for _ in client.messages.create(
            model="claude-sonnet-4-5", max_tokens=5, messages=prompt, stream=True
        ):
            pass

        async def ask() -> None:
            await async_client.messages.create(
                model="claude-haiku-4-5", max_tokens=5, messages=prompt
            )

        asyncio.run(ask())
    sdk.flush()
    plain, streamed, from_async = model_calls(server, project, run.id)
    assert plain["input_messages"] == [{"role": "system", "content": "terse"}, *prompt]
    assert plain["output_messages"] == [
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    ]
    assert streamed["input_messages"] == prompt
    assert streamed["output_messages"] == [{"role": "assistant", "content": "hi"}]
    assert from_async["output_messages"] == plain["output_messages"]


def test_without_the_option_no_content_is_sent(setup, server, providers) -> None:
    sdk, project = setup
    client = sdk.wrap_openai(openai.OpenAI(api_key="sk-test", base_url=providers.url + "/v1"))
    with sdk.run("private") as run:
        prompt = [{"role": "user", "content": "secret"}]
        client.chat.completions.create(model="gpt-4o-mini", messages=prompt)
    sdk.flush()
    [call] = model_calls(server, project, run.id)
    assert call["input_messages"] is None and call["output_messages"] is None


def test_the_ingest_api_takes_messages_and_redacts_them(server, db_url) -> None:
    project = make_project(db_url)
    run_id = str(uuid.uuid4())
    httpx.post(f"{server.url}/v1/ingest/agent/runs", json={"id": run_id, "agent_name": "curl"},
               headers=project.auth("ingest"))  # fmt: skip
    call = {
        "provider": "openai", "model": "gpt-4o", "run_id": run_id,
        "input_messages": [{"role": "user", "content": f"token {SECRET}"}],
        "output_messages": {"text": "ok", "api_key": "hunter2"},
    }  # fmt: skip
    answer = httpx.post(f"{server.url}/v1/ingest/ai", json=call, headers=project.auth("ingest"))
    assert answer.status_code == 200, answer.text
    [stored] = model_calls(server, project, run_id)
    assert stored["input_messages"] == [{"role": "user", "content": "token [REDACTED]"}]
    assert stored["output_messages"] == {"text": "ok", "api_key": "[REDACTED]"}


def _attribute(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def _inference(span_id: str, parent: str, start: int, attributes: list, events=()) -> dict:
    return {
        "traceId": "cd" * 16, "spanId": span_id, "parentSpanId": parent, "name": "chat gpt-4o",
        "startTimeUnixNano": str(1764590000000000000 + start * 1000000),
        "endTimeUnixNano": str(1764590000000000000 + (start + 10) * 1000000),
        "attributes": [_attribute("gen_ai.operation.name", "chat"),
                       _attribute("gen_ai.request.model", "gpt-4o"), *attributes],
        "events": list(events),
    }  # fmt: skip


def test_otlp_messages_in_every_form(server, db_url) -> None:
    project = make_project(db_url)
    agent = "0a" * 8
    spans = [
        {"traceId": "cd" * 16, "spanId": agent, "name": "invoke_agent helper",
         "startTimeUnixNano": "1764590000000000000", "endTimeUnixNano": "1764590001000000000",
         "attributes": [_attribute("gen_ai.operation.name", "invoke_agent"),
                        _attribute("gen_ai.agent.name", "helper")]},
        _inference("0b" * 8, agent, 100, [
            _attribute("gen_ai.input.messages",
                       '[{"role":"user","parts":[{"type":"text","content":"a"}]}]'),
            _attribute("gen_ai.output.messages", '[{"role":"assistant","parts":[]}]'),
        ]),
        _inference("0c" * 8, agent, 200, [], events=[
            {"name": "gen_ai.system.message", "attributes": [_attribute("content", "be kind")]},
            {"name": "gen_ai.user.message", "attributes": [_attribute("content", "b")]},
            {"name": "gen_ai.choice", "attributes": [
                _attribute("message", '{"role":"assistant","content":"B"}'),
                _attribute("finish_reason", "stop")]},
        ]),
        _inference("0d" * 8, agent, 300, [
            _attribute("llm.input_messages.0.message.role", "user"),
            _attribute("llm.input_messages.0.message.content", "c"),
            _attribute("llm.input_messages.1.message.role", "assistant"),
            _attribute("llm.input_messages.1.message.content", "C?"),
            _attribute("llm.output_messages.0.message.role", "assistant"),
            _attribute("llm.output_messages.0.message.content", "C"),
        ]),
    ]  # fmt: skip
    body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    answer = httpx.post(f"{server.url}/v1/traces", json=body, headers=project.auth("ingest"))
    assert answer.status_code == 200, answer.text
    runs = httpx.get(f"{server.url}/v1/projects/{project.id}/agent/runs", headers=project.auth())
    [run] = runs.json()["data"]
    current, events, openinference = model_calls(server, project, run["id"])
    assert current["input_messages"] == [
        {"role": "user", "parts": [{"type": "text", "content": "a"}]}
    ]
    assert current["output_messages"] == [{"role": "assistant", "parts": []}]
    assert events["input_messages"] == [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": "b"},
    ]
    assert events["output_messages"] == [
        {"message": {"role": "assistant", "content": "B"}, "finish_reason": "stop"}
    ]
    assert openinference["input_messages"] == [
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "C?"},
    ]
    assert openinference["output_messages"] == [{"role": "assistant", "content": "C"}]
