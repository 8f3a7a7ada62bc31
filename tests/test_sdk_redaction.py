"""Redaction in the Python SDK (keelwave/sdk/_redact.py): the rules, the options, the
screen never skipping what the walk would redact, what a run sends, and, through a
real `keelwave serve`, no secret in the database while repeated calls that differ
only in a secret still group as a loop, with the SDK's fingerprint the server's."""

from __future__ import annotations

import base64
import functools
import json
import logging
import re
from pathlib import Path
from unittest import mock

import httpx
import pytest
from conftest import query
from hypothesis import given, settings
from hypothesis import strategies as st

from keelwave import Keelwave, Redaction
from keelwave.sdk import _redact, canonical_json, fingerprint
from keelwave.sdk._delivery import Event
from keelwave.sdk._redact import DEFAULT, REDACTED
from keelwave.sdk._run import Run
from keelwave.server.screen import SPREAD_UP_TO

VECTORS = Path(__file__).resolve().parent / "vectors" / "redaction.json"

SK = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
AWS = "AKIAIOSFODNN7EXAMPLE"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
OFFLINE = dict(api_key="kw_" + "x" * 43, endpoint="http://127.0.0.1:9", flush_at_exit=False)


def redacted(value: object) -> object:
    return json.loads(DEFAULT.canonical_json(value))


# -- the shared vectors ----------------------------------------------------------------


def test_python_agrees_with_the_shared_redaction_vectors() -> None:
    shared = json.loads(VECTORS.read_text())
    for vector in shared["vectors"]:
        text = DEFAULT.canonical_json(vector["input"])
        assert text == vector["redacted"], vector["name"]
        digest = base64.b64encode(fingerprint(vector["tool_name"], text)).decode()
        assert digest == vector["fingerprint"], vector["name"]
    for case in shared["texts"]:
        assert DEFAULT.redact_text(case["text"]) == case["redacted"]


# -- keys ------------------------------------------------------------------------------

SECRET_KEYS = [
    "password", "Password", "DB_PASSWORD", "passwd", "passphrase", "pass", "secret",
    "client_secret", "clientSecret", "aws_secret_access_key", "api_key", "apiKey", "apikey",
    "api-key", "X-Api-Key", "API_KEY", "x-goog-api-key", "token", "access_token",
    "refresh_token", "id_token", "ACCESS_TOKEN", "accessToken", "x-auth-token",
    "X-Amz-Security-Token", "csrf_token", "session_token", "sessionKey", "authorization",
    "Authorization", "Proxy-Authorization", "auth", "basic_auth", "oauth", "cookie", "Cookie",
    "set-cookie", "Set-Cookie", "cookies", "private_key", "privateKey", "credentials",
    "access_key", "signing_key", "bearer",
]  # fmt: skip
NOT_SECRET_KEYS = [
    "max_tokens", "tokens", "token_count", "input_tokens", "output_tokens", "prompt_tokens",
    "completion_tokens", "max_completion_tokens", "cache_read_tokens", "tokenizer",
    "token_type", "token_limit", "next_page_token", "pageToken", "NextToken",
    "continuation_token", "eos_token", "pad_token", "bos_token", "session_id", "sessionId",
    "author", "authority", "auth_url", "keywords", "key", "keys", "monkey", "passage",
    "compass", "q", "name", "value",
]  # fmt: skip


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_keys_that_look_secret_are_hidden_at_any_depth(key: str) -> None:
    assert DEFAULT.secret_key(key)
    value = {"outer": [{"inner": {key: "hunter2", "keep": 1}}]}
    assert redacted(value) == {"outer": [{"inner": {key: REDACTED, "keep": 1}}]}


@pytest.mark.parametrize("key", NOT_SECRET_KEYS)
def test_counts_and_settings_that_mention_tokens_are_not_secrets(key: str) -> None:
    assert not DEFAULT.secret_key(key)
    value = {key: 512, "nested": {key: "kept"}}
    assert DEFAULT.canonical_json(value) == canonical_json(value)


def test_different_counts_stay_different_calls() -> None:
    # Had max_tokens been hidden, these two calls would look like one repeated call.
    a = DEFAULT.canonical_json({"prompt": "hi", "max_tokens": 100, "next_page_token": "p1"})
    b = DEFAULT.canonical_json({"prompt": "hi", "max_tokens": 200, "next_page_token": "p1"})
    c = DEFAULT.canonical_json({"prompt": "hi", "max_tokens": 100, "next_page_token": "p2"})
    assert len({a, b, c}) == 3


def test_a_whole_value_under_a_secret_key_goes_but_nothing_to_hide_stays() -> None:
    value = {"credentials": {"user": "bob", "pin": 1234}, "api_key": ["a", "b"], "token": 42,
             "password": None, "secret": "", "refresh_token": False}  # fmt: skip
    assert redacted(value) == {"credentials": REDACTED, "api_key": REDACTED, "token": REDACTED,
                               "password": None, "secret": "", "refresh_token": False}  # fmt: skip


def test_name_value_pairs_are_read_as_keys() -> None:
    headers = [{"name": "Authorization", "value": "opaque"}, {"key": "X-Api-Key", "value": "k"},
               {"name": "Accept", "value": "application/json"}]  # fmt: skip
    assert redacted(headers) == [
        {"name": "Authorization", "value": REDACTED},
        {"key": "X-Api-Key", "value": REDACTED},
        {"name": "Accept", "value": "application/json"},
    ]


# -- values ----------------------------------------------------------------------------

CREDENTIALS = [
    SK,
    "sk-ant-api03-" + "Zx9_Yw8-Vu7tSr6qPo5nMl4kJi3hGf2eDc1bA0zY",
    "sk-" + "a1b2c3d4e5f6g7h8i9j0k1l2",
    AWS,
    "ASIAY34FZKBOKMUTVV7A",
    "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a",
    "github_pat_11ABCDEFG0abcdefghijklmnopqrstuvwxyz0123456789",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "xoxp-1234567890-abcdef",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    JWT,
    "kw_" + "q1W2e3R4t5Y6u7I8o9P0a1S2d3F4g5H6j7K8l9Z0x1C",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXkt\n-----END OPENSSH PRIVATE KEY-----",
]


@pytest.mark.parametrize("credential", CREDENTIALS, ids=lambda c: c[:12])
def test_credentials_are_replaced_wherever_they_are(credential: str) -> None:
    assert DEFAULT.redact_text(credential) == REDACTED
    assert DEFAULT.redact_text(f"before {credential} after") == f"before {REDACTED} after"
    assert redacted({"q": [f"x:{credential}"]}) == {"q": [f"x:{REDACTED}"]}


def test_bearer_keeps_the_word_and_spares_prose() -> None:
    text = DEFAULT.redact_text
    assert text("use Bearer abc.def.ghi please") == "use Bearer [REDACTED] please"
    assert text("Authorization: bearer 9f8e7d6c5b4a") == "Authorization: bearer [REDACTED]"
    assert text("BEARER\tXyZ-123_456") == "BEARER\t[REDACTED]"
    for prose in ("Bearer authentication is required", "a bearer tokens story",
                  "send Authorization: Bearer <token>", "Bearer Token"):  # fmt: skip
        assert text(prose) == prose


def test_urls_parameters_and_connection_strings() -> None:
    text = DEFAULT.redact_text
    assert (text("https://api.example.com/v1?q=acme&api_key=abc123&page=2#top")
            == "https://api.example.com/v1?q=acme&api_key=[REDACTED]&page=2#top")  # fmt: skip
    assert (text("postgresql://app:hunter2@db:5432/prod")
            == "postgresql://app:[REDACTED]@db:5432/prod")  # fmt: skip
    assert (text("host=db user=bob password=s3cret dbname=x")
            == "host=db user=bob password=[REDACTED] dbname=x")  # fmt: skip
    assert (
        text("username=bob&password=pw&remember=1") == "username=bob&password=[REDACTED]&remember=1"
    )
    unchanged = "https://x.test/list?page_token=abc&max_tokens=5 a@b.example ask-me-anything-now"
    assert text(unchanged) == unchanged


def test_redacting_redacted_text_again_changes_nothing() -> None:
    for vector in json.loads(VECTORS.read_text())["vectors"]:
        assert DEFAULT.redact_json(vector["redacted"]) is vector["redacted"], vector["name"]
    text = DEFAULT.canonical_json({"url": "https://u:pw@h/?token=t", "password": "x"})
    assert DEFAULT.redact_json(text) is text  # not even written again
    assert DEFAULT.redact_text(DEFAULT.redact_text(f"Bearer {JWT}")) == f"Bearer {REDACTED}"


def test_no_secret_no_change_byte_for_byte() -> None:
    value = {"q": "what is keelwave?", "max_results": 3, "f": [1e-07, 1e16, -0.0, 2**70],
             "u": "caf\u00e9 \ud83d\ude00", "s": {3, 1, 2}}  # fmt: skip
    text = canonical_json(value)
    assert DEFAULT.redact_json(text) is text  # the screen: not even copied
    tricky = canonical_json({**value, "max_tokens": 10, "author": "keyword"})
    assert DEFAULT.redact_json(tricky) == tricky  # walked (the screen saw "key"), unchanged


def test_a_private_key_cut_off_goes_to_the_end_of_the_text() -> None:
    cut = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    assert DEFAULT.redact_text(f"loaded {cut} and more") == f"loaded {REDACTED}"


# -- the screen --------------------------------------------------------------------------

# A pattern that never matches makes every payload go through the walk, and with the
# one-string screen off every rule is tried on every string: the screens may only
# ever skip what would change nothing.
WALKED = Redaction(patterns=[r"(?!)"])


def exhaustively(call, argument: object) -> object:
    with mock.patch.object(_redact, "_may_hold_credential", lambda text: True):
        return call(argument)


PIECES = ["pa_ss", "PASS", "to_ken", "tok-en", "Token", "api.key", "Api Key", "AUTH", "o_auth",
          "x-auth-token", "bearer", "Bearer x1y2z3w4", "sk-", "sk-" + "a" * 20, "AKIA" + "A" * 16,
          "ghp_" + "b" * 30, "github_pat_" + "c" * 30, "xoxb-" + "1" * 10, "AIza" + "d" * 30,
          "eyJ" + "e" * 8 + "." + "f" * 8 + ".", "kw_" + "g" * 40, "-----BEGIN EC PRIVATE KEY-----",
          "://u:p@h", "?password=x", "&token=y", " secret=z", "caf\u00e9", "\u212a", "\n", "\t",
          '"', "\\", "=", ":", "@", "_", "-", ".", " ", "max_tokens", "value", "name", "key",
          "\ud800"]  # fmt: skip
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=4), min_size=1, max_size=4).map("".join)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(texts | st.sampled_from(["name", "key", "value"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(values)
def test_the_screen_never_skips_what_the_walk_would_redact(value: object) -> None:
    assert DEFAULT.canonical_json(value) == exhaustively(WALKED.canonical_json, value)
    padded = {"padding": "." * 100, "value": value}  # past the short-text screen
    assert DEFAULT.canonical_json(padded) == exhaustively(WALKED.canonical_json, padded)


@settings(max_examples=500, deadline=None)
@given(texts)
def test_free_text_is_redacted_alike_with_or_without_the_screen(text: str) -> None:
    assert DEFAULT.redact_text(text) == exhaustively(DEFAULT.redact_text, text)
    padded = "." * 100 + text
    assert DEFAULT.redact_text(padded) == exhaustively(DEFAULT.redact_text, padded)


# -- options ------------------------------------------------------------------------------


def test_extra_keys_and_patterns() -> None:
    patterns = [r"\b[\w.]+@example\.com\b", re.compile("acct-[0-9]+")]
    redaction = Redaction(keys=["ssn", "Internal-ID"], patterns=patterns)
    value = {"customer_SSN": "123-45-6789", "internalId": 7, "password": "x",
             "note": "mail ada@example.com re acct-42",
             "url": "https://h/?internal_id=9"}  # fmt: skip
    assert json.loads(redaction.canonical_json(value)) == {
        "customer_SSN": REDACTED,
        "internalId": REDACTED,
        "note": f"mail {REDACTED} re {REDACTED}",
        "url": f"https://h/?internal_id={REDACTED}",
        "password": REDACTED,  # the built-in rules still apply
    }


def test_non_ascii_extra_keys_are_screened_as_the_text_escapes_them() -> None:
    redaction = Redaction(keys=["contraseña"])
    assert redaction.canonical_json({"Contraseña": "x"}) == '{"Contrase\\u00f1a": "[REDACTED]"}'


def test_a_callback_sees_plain_data_after_the_built_in_rules() -> None:
    seen = []

    def callback(value: object) -> object:
        seen.append(value)
        if isinstance(value, str):
            return value.upper()
        return {**value, "checked": True} if isinstance(value, dict) else value

    redaction = Redaction(callback=callback)
    text = redaction.canonical_json({"password": "x", "q": f"key {SK}"})
    assert seen == [{"password": REDACTED, "q": f"key {REDACTED}"}]
    assert text == '{"checked": true, "password": "[REDACTED]", "q": "key [REDACTED]"}'
    assert redaction.redact_text("token " + SK) == "TOKEN [REDACTED]"


def test_builtin_false_leaves_only_your_rules() -> None:
    redaction = Redaction(builtin=False, keys=["internal_id"])
    value = {"password": "x", "internal_id": 7, "url": "https://h/?internal_id=9&token=t"}
    assert json.loads(redaction.canonical_json(value)) == {
        "password": "x",
        "internal_id": REDACTED,
        "url": f"https://h/?internal_id={REDACTED}&token=t",
    }
    assert Redaction(builtin=False).redact_text(SK) == SK


def test_a_failing_callback_sends_redacted_and_says_so_once(caplog) -> None:
    def broken(value: object) -> object:
        raise RuntimeError("boom")

    redaction = Redaction(callback=broken)
    with caplog.at_level(logging.WARNING, logger="keelwave"):
        assert redaction.canonical_json({"a": 1}) == '"[REDACTED]"'
        assert redaction.redact_text("hello") == REDACTED
        assert redaction.canonical_json({"b": 2}) == '"[REDACTED]"'
    said = [r.getMessage() for r in caplog.records if "redaction failed" in r.getMessage()]
    assert said == ['keelwave: redaction failed (RuntimeError: boom); what it failed on is sent as '
                    '"[REDACTED]"']  # fmt: skip


def test_the_redact_option() -> None:
    assert Keelwave(**OFFLINE).redaction is DEFAULT
    assert Keelwave(**OFFLINE, redact=True).redaction is DEFAULT
    assert Keelwave(**OFFLINE, redact=False).redaction is None
    mine = Redaction(keys=["ssn"])
    assert Keelwave(**OFFLINE, redact=mine).redaction is mine
    assert Keelwave(api_key="", redact=False).redaction is None  # no key: the option still read
    for wrong in ("yes", 1, {"keys": ["ssn"]}):
        with pytest.raises(ValueError, match="redact must be"):
            Keelwave(**OFFLINE, redact=wrong)
    with pytest.raises(re.error):
        Redaction(patterns=["("])
    with pytest.raises(ValueError, match="lists"):
        Redaction(keys="ssn")
    with pytest.raises(ValueError, match="not a key name"):
        Redaction(keys=["-_"])


# -- what a run sends ---------------------------------------------------------------------


def sent(events: list[Event]) -> str:
    return "\n".join(event.text() for event in events)


def test_everything_a_run_sends_is_redacted() -> None:
    events: list[Event] = []
    run = Run(events.append, "agent", input={"token": "t0-secret"}, metadata={"api_key": "k-meta"},
              tags=["team", f"key:{SK}"])  # fmt: skip
    run.tool_call("search", input={"q": "a", "auth": {"token": "one-secret"}},
                  output={"cookie": "c-secret"}, error=f"401 for Bearer {JWT}")  # fmt: skip
    run.think("my password=hunter2")
    run.replan(f"rotate {AWS}")
    run.llm_call("openai", "gpt-4o", error=RuntimeError(f"Incorrect API key provided: {SK}"))
    run.finish("clean", output={"secret": "s-out"}, error=f"see {AWS}")
    text = sent(events)
    for secret in ("t0-secret", "k-meta", SK, "one-secret", "c-secret", JWT, "hunter2", AWS,
                   "s-out"):  # fmt: skip
        assert secret not in text
    start = json.loads(events[0].text())
    assert start["tags"] == ["team", f"key:{REDACTED}"]
    step = json.loads(events[1].text())
    assert step["tool_input"] == {"auth": REDACTED, "q": "a"}
    assert step["error"] == f"401 for Bearer {REDACTED}"


def test_a_run_with_redaction_off_sends_what_it_is_given() -> None:
    events: list[Event] = []
    run = Run(events.append, "agent", input={"password": "hunter2"}, redaction=None)
    run.tool_call("t", input={"token": "one"}, output=SK)
    assert "hunter2" in sent(events) and "one" in sent(events) and SK in sent(events)


def test_fingerprints_are_of_the_redacted_input() -> None:
    events: list[Event] = []
    run = Run(events.append, "agent")
    first = {"q": "revenue", "headers": {"Authorization": "Bearer aaaa1111bbbb"}}
    second = {"q": "revenue", "headers": {"Authorization": "Bearer cccc2222dddd"}}
    run.tool_call("search", input=first)
    assert run.check_fingerprint("search", first) is False
    run.tool_call("search", input=second)
    assert run.check_fingerprint("search", second) is True  # a rotating token: the same call
    assert run.loop_step_index == 1
    [step, _] = [json.loads(e.text()) for e in events if e.kind == "step"]
    sent_input = json.dumps(step["tool_input"], sort_keys=True)
    assert sent_input == DEFAULT.canonical_json(first) == DEFAULT.canonical_json(second)
    # Without redaction the two inputs are two calls.
    plain = Run(events.append, "agent", redaction=None)
    plain.tool_call("search", input=first)
    assert plain.check_fingerprint("search", first) is False
    plain.tool_call("search", input=second)
    assert plain.check_fingerprint("search", second) is False


def test_observed_tools_and_adapters_redact_what_they_record() -> None:
    client = Keelwave(**OFFLINE)
    events: list[Event] = []
    client._send = events.append  # type: ignore[method-assign]  # what would go to the server

    @client.observe(name="fetch")
    def fetch(url: str, headers: dict) -> dict:
        return {"status": 200, "set-cookie": "sid=abc"}

    class Completions:
        def create(self, **kwargs: object) -> object:
            raise PermissionError(f"Incorrect API key provided: {SK}")

    class Chat:
        completions = Completions()

    class FakeOpenAI:
        chat = Chat()

    openai = client.wrap_openai(FakeOpenAI())
    with client.run("agent") as run:
        fetch("https://h/?api_key=abc123", {"X-Api-Key": SK})
        fetch("https://h/?api_key=def456", {"X-Api-Key": "other"})
        with pytest.raises(PermissionError):
            openai.chat.completions.create(model="gpt-4o-mini", messages=[])
    assert run.loop_detected and run.loop_step_index == 1  # differing only in secrets
    text = sent(events)
    for secret in ("abc123", "def456", SK, "sid=abc", '"other"'):
        assert secret not in text
    [call] = [json.loads(e.text()) for e in events if e.kind == "ai"]
    assert call["error"] == f"PermissionError: Incorrect API key provided: {REDACTED}"
    client.shutdown(timeout=0)


def test_secrets_never_reach_the_spool_directory(tmp_path: Path) -> None:
    client = Keelwave(**OFFLINE, spool_dir=tmp_path)
    with client.run("offline", input={"password": "hunter2"}) as run:
        run.tool_call("t", input={"q": f"use {SK}"}, output={"token": "tok-out"})
    client.shutdown(timeout=0.2)
    [spooled] = [path for path in tmp_path.iterdir() if not path.name.startswith(".")]
    content = spooled.read_text()
    assert "hunter2" not in content and SK not in content and "tok-out" not in content
    assert REDACTED in content


# -- through a real server -------------------------------------------------------------------

PASSWORD = "hunter2-pw"
META_SECRET = "s3cr3t-in-metadata"
COOKIE = "sid=cookie-in-output"
REFRESH = "rt-in-finish-output"
TOKENS = ["tok-aaaaaaaaaaaa", "tok-bbbbbbbbbbbb", "tok-cccccccccccc"]
SECRETS = [PASSWORD, META_SECRET, COOKIE, REFRESH, SK, AWS, "db-pw-in-url", *TOKENS]


def stored_text(db_url: str, project_id: str, run_id: str) -> str:
    """Every stored column of the run's rows, as JSON text: where a secret would show."""
    rows = []
    for table, column in (("agent_runs", "id"), ("agent_steps", "run_id"), ("ai_traces", "run_id")):
        rows += query(db_url, f"SELECT row_to_json(t)::text FROM {table} t "  # noqa: S608
                      f"WHERE project_id = %s AND {column} = %s", (project_id, run_id))  # fmt: skip
    assert rows
    return "\n".join(row for (row,) in rows)


def run_with_secrets(client: Keelwave) -> str:
    @client.observe(name="search")
    def search(q: str, headers: dict, options: dict) -> dict:
        return {"hits": 2, "echo": {"cookie": COOKIE}, "note": f"used {SK}"}

    @client.observe(name="login")
    def login(user: str) -> None:
        raise PermissionError(f"login refused for {user}: password={PASSWORD}")

    run_input = {"question": "revenue?", "credentials": {"password": PASSWORD},
                 "db": "postgresql://app:db-pw-in-url@db:5432/prod"}  # fmt: skip
    with client.run("redacting-agent", input=run_input, tags=["team-a", f"key-{SK}"],
                    metadata={"client_secret": META_SECRET, "user_id": "u1"}) as run:  # fmt: skip
        for token in TOKENS:  # the same call, with a token that rotates
            search(q="revenue", headers={"Authorization": f"Bearer {token}", "X-Api-Key": SK},
                   options={"nested": [{"access_token": token}], "max_tokens": 256})  # fmt: skip
        with pytest.raises(PermissionError):
            login(user="bob")
        run.think(f"the AWS key {AWS} looks wrong")
        run.llm_call("openai", "gpt-4o-mini", input_tokens=10, error=f"Incorrect API key: {SK}")
        run.finish("clean", output={"answer": "42", "debug": {"refresh_token": REFRESH}})
    assert client.flush(timeout=30)
    return run.id


def test_no_secret_reaches_the_database_and_loops_still_group(server, db_url, project) -> None:
    client = Keelwave(api_key=project.keys["ingest"], endpoint=server.url, flush_at_exit=False)
    run_id = run_with_secrets(client)
    client.shutdown()

    stored = stored_text(db_url, project.id, run_id)
    for secret in SECRETS:
        assert secret not in stored, secret
    assert REDACTED in stored
    [(tags,)] = query(db_url, "SELECT tags FROM agent_runs WHERE id = %s", (run_id,))
    assert tags == ["team-a", f"key-{REDACTED}"]

    # The three calls differ only in their tokens: one loop group, from step 1.
    response = httpx.get(f"{server.url}/v1/projects/{project.id}/agent/runs/{run_id}/loops",
                         headers=project.auth("read"))  # fmt: skip
    response.raise_for_status()
    [group] = response.json()["data"]
    assert (group["tool_name"], group["hits"], group["step_indices"]) == ("search", 3, [1, 2, 3])
    [(loop_detected, loop_step_index)] = query(
        db_url, "SELECT loop_detected, loop_step_index FROM agent_runs WHERE id = %s", (run_id,)
    )
    assert (loop_detected, loop_step_index) == (True, 1)

    # The SDK's fingerprint of what it sent is the server's, for a step with secrets.
    headers = {"Authorization": f"Bearer {TOKENS[0]}", "X-Api-Key": SK}
    options = {"nested": [{"access_token": TOKENS[0]}], "max_tokens": 256}
    arguments = {"q": "revenue", "headers": headers, "options": options}
    ours = fingerprint("search", client.redaction.canonical_json(arguments))
    stored_fingerprints = query(
        db_url, "SELECT input_fingerprint FROM agent_steps WHERE run_id = %s AND tool_name = %s",
        (run_id, "search"),
    )  # fmt: skip
    assert [bytes(row[0]) for row in stored_fingerprints] == [ours] * 3
    assert base64.b64encode(ours).decode() == group["fingerprint"]
    [(tool_input,)] = query(
        db_url,
        "SELECT tool_input::text FROM agent_steps WHERE run_id = %s AND step_index = 1",
        (run_id,),
    )
    assert tool_input == client.redaction.canonical_json(arguments)  # the bytes, as sent


def test_with_redaction_off_calls_differing_in_a_secret_are_different_calls(
    server, db_url, project
) -> None:
    # The control: the server fingerprints the bytes it receives, so it is the SDK's
    # redaction that made the three calls one (whatever the server then stores).
    client = Keelwave(api_key=project.keys["ingest"], endpoint=server.url, flush_at_exit=False,
                      redact=False)  # fmt: skip
    run_id = run_with_secrets(client)
    client.shutdown()
    fingerprints = query(
        db_url, "SELECT input_fingerprint FROM agent_steps WHERE run_id = %s AND tool_name = %s",
        (run_id, "search"),
    )  # fmt: skip
    assert len({bytes(row[0]) for row in fingerprints}) == 3
    response = httpx.get(f"{server.url}/v1/projects/{project.id}/agent/runs/{run_id}/loops",
                         headers=project.auth("read"))  # fmt: skip
    assert response.json()["data"] == []


# -- the server's screen of a span's attributes -------------------------------------------

attribute_keys = texts | st.sampled_from(
    ["gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "input.value", "http.url",
     "gen_ai.usage.input_tokens", "db.statement", "api_key", "user.password"]
)  # fmt: skip
attribute_sets = st.dictionaries(
    attribute_keys, st.none() | st.booleans() | st.integers() | texts | values, max_size=6
)


@settings(max_examples=1500, deadline=None)
@given(attribute_sets)
def test_a_spans_attributes_screened_together_redact_as_one_by_one(attributes: dict) -> None:
    from keelwave.server.redaction import BUILTIN

    one_by_one = {key: BUILTIN._value(key, value) for key, value in attributes.items()}
    assert BUILTIN.attributes(attributes) == one_by_one
    padded = {**attributes, "padding": "." * 100}  # past the short-text screen
    assert BUILTIN.attributes(padded) == {**one_by_one, "padding": "." * 100}


# -- the server's one-pass screen (server/screen.py) ---------------------------------------


@functools.cache
def _one_pass_screen():
    from keelwave.server import screen

    if screen.hyperscan is None:
        pytest.skip("Hyperscan has no wheel on this platform: the server uses the re screen")
    return screen.builtin_screen()


@settings(max_examples=3000, deadline=None)
@given(texts | values.map(canonical_json))
def test_the_servers_one_pass_screen_finds_what_the_re_screen_finds(text: str) -> None:
    one_pass = _one_pass_screen()
    # Short texts have a screen of their own in both; long ones are scanned in their
    # compact form by the one-pass screen.
    for candidate in (text, "." * 100 + text, " " * SPREAD_UP_TO + text):
        data = candidate.encode("utf-8", "surrogatepass")
        assert one_pass(data) == DEFAULT._may_hold_secret(candidate), candidate


@settings(max_examples=800, deadline=None)
@given(values, attribute_sets)
def test_the_server_stores_the_same_with_either_screen(value: object, attributes: dict) -> None:
    from keelwave.server.redaction import BUILTIN, ServerRedaction

    _one_pass_screen()  # (BUILTIN has it)
    with_re = ServerRedaction(screen=None)
    for payload in (canonical_json(value), json.dumps(value), json.dumps(value, indent=1)):
        data = payload.encode("utf-8", "surrogatepass")
        assert BUILTIN.json_payload(data) == with_re.json_payload(data)
    assert BUILTIN.attributes(attributes) == with_re.attributes(attributes)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.none() | texts | values.map(canonical_json), max_size=12))
def test_a_requests_payloads_screened_together_are_cleared_as_one_by_one(payloads) -> None:
    """The one call for a whole request clears exactly the payloads that the screen of
    each alone clears, wherever their matches are and whatever is next to them."""
    one_pass = _one_pass_screen()
    data = [None if p is None else p.encode("utf-8", "surrogatepass") for p in payloads]
    one_by_one = {n for n, payload in enumerate(data) if payload and one_pass(payload)}
    assert one_by_one <= one_pass.suspects(data)
    from keelwave.server.redaction import BUILTIN, ServerRedaction

    with_re = ServerRedaction(screen=None)
    assert BUILTIN.json_payloads(data) == [with_re.json_payload(p) for p in data]


def test_a_hyperscan_that_refuses_the_machine_leaves_the_re_screen(monkeypatch, caplog) -> None:
    from keelwave.server import screen

    _one_pass_screen()

    def refuse(*args, **kwargs):
        raise screen.hyperscan.ArchitectureError("this CPU lacks SSSE3")

    monkeypatch.setattr(screen.hyperscan, "Database", refuse)
    with caplog.at_level(logging.INFO, logger="keelwave.redaction"):
        assert screen.builtin_screen() is None
    assert "Hyperscan refused" in caplog.text
