"""Genkit for Python 0.12 (its own OpenTelemetry spans, global provider) + genkit-openai
against the fake OpenAI server (../js/fake_openai.py on 18990, capture_proxy.py on 18999).

usage: python agent.py <loop|error|maxturns> <json|proto>   (KEELWAVE_API_KEY set)"""

import asyncio
import json
import os
import sys
import time

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

scenario = sys.argv[1] if len(sys.argv) > 1 else "loop"
enc = sys.argv[2] if len(sys.argv) > 2 else "proto"
name = f"genkitpy_{scenario}_{enc}"
if enc == "json":
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter  # type: ignore
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
provider = TracerProvider(resource=Resource.create({"service.name": name}))
provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:18999/cap/{name}/v1/traces",
            headers={"Authorization": "Bearer " + os.environ["KEELWAVE_API_KEY"]},
        ),
        max_export_batch_size=5,
        schedule_delay_millis=200,
    )
)
trace.set_tracer_provider(provider)
# (genkit after the global provider is set: its tracer is the global one)
from genkit import Genkit  # noqa: E402
from genkit_openai import OpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402

ai = Genkit(plugins=[OpenAI(api_key="sk-fake", base_url="http://127.0.0.1:18990/v1")])
tag = time.time()


def S(arr):
    return f"You are an agent. <<SCRIPT:{json.dumps(arr)}>> tag={tag}"


class Q(BaseModel):
    q: str
    n: int | None = None


class X(BaseModel):
    x: int


@ai.tool(name="search", description="search the web")
async def search(i: Q) -> str:
    return f"results for {i.q}"


@ai.tool(name="boom", description="always fails")
async def boom(i: X) -> str:
    raise RuntimeError(f"boom failed on {i.x}")


MODEL = "openai/gpt-4o-mini"


async def main():
    try:
        if scenario == "loop":

            @ai.flow(name="researcher")
            async def researcher(q: str) -> str:
                r = await ai.generate(
                    model=MODEL,
                    system=S(
                        [{"calls": [{"name": "search", "args": {"q": "keelwave", "n": 3}}]}] * 3
                        + [{"text": "final: keelwave is a tool"}]
                    ),
                    prompt=q,
                    tools=["search"],
                )
                return r.text

            out = await researcher("what is keelwave?")
        elif scenario == "error":

            @ai.flow(name="failer")
            async def failer(q: str) -> str:
                r = await ai.generate(
                    model=MODEL,
                    system=S(
                        [
                            {"calls": [{"name": "search", "args": {"q": "a"}}]},
                            {"calls": [{"name": "boom", "args": {"x": 7}}]},
                            {"text": "never"},
                        ]
                    ),
                    prompt=q,
                    tools=["search", "boom"],
                )
                return r.text

            out = await failer("please fail")
        elif scenario == "maxturns":

            @ai.flow(name="limited")
            async def limited(q: str) -> str:
                r = await ai.generate(
                    model=MODEL,
                    system=S(
                        [{"calls": [{"name": "search", "args": {"q": "again"}}], "repeat": True}]
                    ),
                    prompt=q,
                    tools=["search"],
                    max_turns=2,
                )
                return r.text

            out = await limited("loop forever")
    except Exception as e:
        out = f"raised: {type(e).__name__}: {e}"
    print("OUT", str(out)[:300])


asyncio.run(main())
provider.force_flush()
time.sleep(0.5)
provider.shutdown()
