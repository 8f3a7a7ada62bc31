#!/usr/bin/env bash
# Re-create every fixture in tests/otlp_fixtures/ with the versions they were made with.
# Each instrumentation gets its own virtual environment under $VENV_ROOT (default
# /tmp/keelwave-otlp-capture), outside the repository; only PyPI is needed, and the
# scripts themselves make no network calls. Run from anywhere:
#   bash tests/otlp_fixtures/capture/run_all.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${VENV_ROOT:-/tmp/keelwave-otlp-capture}"
python="${PYTHON:-python3}"
otel="opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2"

env_for() {  # env_for NAME PACKAGES...: a venv with exactly these packages (and theirs)
    local name="$1"
    shift
    if [ ! -x "$root/$name/bin/python" ]; then
        "$python" -m venv "$root/$name"
        "$root/$name/bin/pip" install -q "$@"
    fi
    echo "$root/$name/bin/python"
}

cd "$here"
py=$(env_for pydanticai pydantic-ai-slim==2.68.0 $otel)
"$py" pydanticai.py builtin
py=$(env_for pydanticai-openinference pydantic-ai-slim==2.68.0 \
    openinference-instrumentation-pydantic-ai==0.1.30 $otel)
"$py" pydanticai.py openinference
py=$(env_for openaiagents-openinference openai-agents==0.24.0 openai==3.57.0 \
    openinference-instrumentation-openai-agents==2.6.0 $otel)
"$py" openaiagents.py openinference
py=$(env_for openaiagents-openllmetry openai-agents==0.24.0 openai==3.57.0 \
    opentelemetry-instrumentation-openai-agents==0.62.4 $otel)
"$py" openaiagents.py openllmetry
py=$(env_for openaiagents-genai openai-agents==0.24.0 openai==3.57.0 \
    opentelemetry-instrumentation-genai-openai-agents==1.3b0 $otel)
"$py" openaiagents.py genai
py=$(env_for openaiagents-mcp openai-agents==0.24.0 openai==3.57.0 mcp==1.30.0 \
    openinference-instrumentation-openai-agents==2.6.0 opentelemetry-instrumentation-mcp==0.62.4 $otel)
"$py" openaiagents.py mcp
py=$(env_for langgraph-openinference langgraph==1.2.24 langchain-core==1.8.3 \
    openinference-instrumentation-langchain==0.1.80 $otel)
"$py" langgraph_react.py openinference
py=$(env_for langgraph-openllmetry langgraph==1.2.24 langchain-core==1.8.3 \
    opentelemetry-instrumentation-langchain==0.62.4 $otel)
"$py" langgraph_react.py openllmetry
py=$(env_for langgraph-genai langgraph==1.2.24 langchain-core==1.8.3 \
    opentelemetry-instrumentation-genai-langchain==1.3b0 $otel)
"$py" langgraph_react.py genai
py=$(env_for smolagents-openinference smolagents==1.26.0 openai==3.57.0 \
    openinference-instrumentation-smolagents==0.1.43 $otel)
"$py" smolagents_agent.py openinference
py=$(env_for smolagents-genai smolagents==1.26.0 openai==3.63.0 \
    opentelemetry-instrumentation-genai-smolagents==1.2b0 \
    opentelemetry-instrumentation-genai-openai==1.3b0 opentelemetry-util-genai==1.3b0 $otel)
"$py" smolagents_agent.py genai
py=$(env_for strands strands-agents==1.62.0 opentelemetry-sdk==1.45.1 \
    opentelemetry-instrumentation-threading==0.66b1 opentelemetry-exporter-otlp-proto-common==1.45.2)
"$py" strands_agents.py
py=$(env_for googleadk google-adk==2.13.0 opentelemetry-sdk==1.44.0 opentelemetry-exporter-otlp-proto-common==1.44.0)
"$py" google_adk.py
py=$(env_for llamaindex-openinference llama-index-core==0.14.25 \
    openinference-instrumentation-llama-index==4.6.1 $otel)
"$py" llamaindex_agent.py openinference
py=$(env_for llamaindex-openllmetry llama-index-core==0.14.25 llama-index-llms-openai \
    opentelemetry-instrumentation-llamaindex==0.62.4 $otel)
"$py" llamaindex_agent.py openllmetry
py=$(env_for agentframework agent-framework-core==1.26.0 agent-framework-orchestrations==1.4.0 $otel)
"$py" agent_framework.py
py=$(env_for semantickernel semantic-kernel==1.45.0 $otel)
"$py" semantic_kernel.py
py=$(env_for dspy-openinference dspy==3.4.1 openinference-instrumentation-dspy==0.1.48 $otel)
"$py" dspy_react.py
py=$(env_for haystack-openinference haystack-ai==3.4.1 \
    openinference-instrumentation-haystack==0.1.46 $otel)
"$py" haystack_agent.py
py=$(env_for beeai-openinference beeai-framework==0.1.85 \
    openinference-instrumentation-beeai==0.1.30 $otel)
"$py" beeai_agent.py
py=$(env_for openaiagents-v2 openai-agents==0.24.0 openai==3.57.0 \
    opentelemetry-instrumentation-openai-agents-v2==0.1.0 $otel)
"$py" openaiagents.py v2
py=$(env_for claude-agent-sdk claude-agent-sdk==0.2.184 \
    openinference-instrumentation-claude-agent-sdk==0.1.22 $otel)
"$py" claude_agent_sdk.py
# Vercel AI SDK (JavaScript): npm, with the versions in vercel_ai/package-lock.json; node_modules
# stays in that folder (git-ignored).
(cd "$here/vercel_ai" && npm ci --no-audit --no-fund && node capture.mjs)
py=$(env_for openai-client openai==3.63.0 openinference-instrumentation-openai==0.1.66 $otel)
"$py" openai_client.py
py=$(env_for strands-openinference strands-agents==1.62.0 opentelemetry-sdk==1.45.1 \
    opentelemetry-instrumentation-threading==0.66b1 opentelemetry-exporter-otlp-proto-common==1.45.2 \
    openinference-instrumentation-strands-agents==0.1.12)
"$py" strands_agents.py openinference
py=$(env_for agentframework-openinference agent-framework-core==1.26.0 \
    agent-framework-orchestrations==1.4.0 openinference-instrumentation-agent-framework==0.1.13 $otel)
"$py" agent_framework.py openinference
py=$(env_for googleadk-openinference google-adk==2.13.0 openinference-instrumentation-google-adk==1.0.5 \
    opentelemetry-sdk==1.44.0 opentelemetry-exporter-otlp-proto-common==1.44.0)
"$py" google_adk.py openinference
py=$(env_for agno-openllmetry agno==3.1.10 opentelemetry-instrumentation-agno==0.62.4 $otel)
"$py" agno_agent.py openllmetry
py=$(env_for agno-genai agno==3.1.10 opentelemetry-instrumentation-genai-agno==1.3b0 $otel)
"$py" agno_agent.py genai
py=$(env_for openai-client-genai openai==3.63.0 opentelemetry-instrumentation-genai-openai==1.3b0 $otel)
"$py" openai_client.py genai
for mode in openinference openllmetry genai; do
    case "$mode" in
        openinference) pkg=openinference-instrumentation-anthropic==3.1.0 ;;
        openllmetry) pkg=opentelemetry-instrumentation-anthropic==0.62.4 ;;
        genai) pkg=opentelemetry-instrumentation-genai-anthropic==1.3b0 ;;
    esac
    py=$(env_for "anthropic-client-$mode" anthropic==2.17.0 "$pkg" $otel)
    "$py" anthropic_client.py "$mode"
done
py=$(env_for google-genai-client google-genai==2.34.0 \
    opentelemetry-instrumentation-google-genai==1.3b0 $otel)
"$py" google_genai_client.py
py=$(env_for dspy-genai dspy==3.4.1 opentelemetry-instrumentation-genai-dspy==1.3b0 $otel)
"$py" dspy_react.py genai
py=$(env_for llamaindex-genai llama-index-core==0.14.25 \
    opentelemetry-instrumentation-genai-llama-index==1.3b0 $otel)
"$py" llamaindex_agent.py genai
py=$(env_for haystack-openllmetry haystack-ai==3.4.1 opentelemetry-instrumentation-haystack==0.62.4 $otel)
"$py" haystack_agent.py openllmetry
py=$(env_for ag2-openinference ag2==0.14.0 openinference-instrumentation-ag2==0.1.12 $otel)
"$py" ag2_agents.py
py=$(env_for logfire logfire==5.4.0 openai-agents==0.24.0 openai==3.57.0 $otel)
"$py" logfire_agents.py openaiagents
"$py" logfire_agents.py openai
py=$(env_for logfire-langgraph logfire==5.4.0 langgraph==1.2.24 langchain-core==1.8.3 \
    "langsmith[otel]==0.15.1" $otel)
"$py" logfire_agents.py langgraph
py=$(env_for mlflow mlflow-tracing==3.17.2 openai==3.57.0 openai-agents==0.24.0 \
    langgraph==1.2.24 langchain-core==1.8.3 langchain-openai==1.8.1 $otel)
for framework in openaiagents handloop langgraph; do
    "$py" mlflow_tracing.py "$framework"
    "$py" mlflow_tracing.py "$framework" genai
done
py=$(env_for openlit openlit==1.45.0 openai==2.54.0 openai-agents==0.20.0 langgraph==1.2.24 \
    langchain-core==1.8.3 langchain-openai==1.8.1 opentelemetry-sdk==1.45.1 \
    opentelemetry-exporter-otlp-proto-common==1.45.1)
"$py" openlit_agents.py openaiagents
"$py" openlit_agents.py langgraph
py=$(env_for openlit-crewai openlit==1.45.0 crewai==1.15.30 openai==2.54.0 opentelemetry-sdk==1.45.1 \
    opentelemetry-exporter-otlp-proto-common==1.45.1)
"$py" openlit_agents.py crewai
py=$(env_for crewai crewai==1.15.30 openai==2.54.0 openinference-instrumentation-crewai==1.1.21 \
    openinference-instrumentation-openai==0.1.66 $otel)
"$py" crewai_crew.py openinference
"$py" crewai_crew.py events
py=$(env_for crewai-openllmetry crewai==1.15.30 openai==2.54.0 opentelemetry-instrumentation-crewai==0.62.4 \
    opentelemetry-instrumentation-openai==0.62.4 $otel)
"$py" crewai_crew.py openllmetry
py=$(env_for autogen autogen-agentchat==0.7.5 "autogen-ext[openai]==0.7.5" openai==3.63.0 \
    openinference-instrumentation-autogen-agentchat==0.1.22 $otel)
"$py" autogen_agents.py native
"$py" autogen_agents.py openinference
# Mastra (JavaScript): npm, with the versions in mastra/package-lock.json; node_modules stays in
# that folder (git-ignored).
(cd "$here/mastra" && npm ci --no-audit --no-fund && node capture.mjs)
py=$(env_for litellm litellm==1.110.2 openai==3.63.0 $otel)
for mode in otel otel-request-span otel-genai; do
    "$py" litellm_agent.py "$mode"
done
py=$(env_for litellm-openinference litellm==1.110.2 openai==3.63.0 \
    openinference-instrumentation-litellm==0.1.51 $otel)
"$py" litellm_agent.py openinference
py=$(env_for litellm-openllmetry litellm==1.110.2 openai==3.63.0 \
    opentelemetry-instrumentation-litellm==0.62.4 $otel)
"$py" litellm_agent.py openllmetry
py=$(env_for litellm-smolagents litellm==1.110.2 openai==3.63.0 smolagents==1.26.0 \
    openinference-instrumentation-smolagents==0.1.43 openinference-instrumentation-litellm==0.1.51 $otel)
"$py" litellm_agent.py smolagents
lc="langchain==1.5.2 langgraph==1.2.24 langchain-core==1.8.3 langchain-openai==1.8.1"
py=$(env_for lc-openinference $lc openai==3.57.0 openinference-instrumentation-langchain==0.1.80 $otel)
"$py" langchain_create_agent.py openinference
py=$(env_for lc-openllmetry $lc openai==3.57.0 opentelemetry-instrumentation-langchain==0.62.4 $otel)
"$py" langchain_create_agent.py openllmetry
py=$(env_for lc-genai $lc openai==3.57.0 opentelemetry-instrumentation-genai-langchain==1.3b0 $otel)
"$py" langchain_create_agent.py genai
py=$(env_for lc-openlit $lc openlit==1.45.0 openai==2.54.0 opentelemetry-sdk==1.45.1 \
    opentelemetry-exporter-otlp-proto-common==1.45.1)
"$py" langchain_create_agent.py openlit
# OpenLIT with more frameworks: an environment each (openlit pins openai < 3)
ol="openlit==1.45.0 opentelemetry-sdk==1.45.1 opentelemetry-exporter-otlp-proto-common==1.45.1"
py=$(env_for openlit-pydanticai $ol pydantic-ai==2.31.1)
"$py" openlit_more.py pydanticai
py=$(env_for openlit-smolagents $ol smolagents==1.26.0 openai==2.54.0)
"$py" openlit_more.py smolagents
py=$(env_for openlit-googleadk openlit==1.45.0 google-adk==2.13.0 opentelemetry-sdk==1.44.0 \
    opentelemetry-exporter-otlp-proto-common==1.44.0)
"$py" openlit_more.py googleadk
py=$(env_for openlit-agno $ol agno==3.1.10)
"$py" openlit_more.py agno
py=$(env_for openlit-llamaindex $ol llama-index==0.14.25 llama-index-core==0.14.25)
"$py" openlit_more.py llamaindex
py=$(env_for openlit-ag2 $ol ag2==0.14.0)
"$py" openlit_more.py ag2
py=$(env_for openlit-autogen $ol autogen-agentchat==0.7.5 "autogen-ext[openai]==0.7.5")
"$py" openlit_more.py autogen
py=$(env_for openlit-strands $ol strands-agents==1.62.0 opentelemetry-instrumentation-threading==0.66b1)
"$py" openlit_more.py strands
