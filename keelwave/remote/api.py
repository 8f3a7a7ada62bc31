"""A small synchronous client for the keelwave HTTP API (standard library only).

Every failure becomes an :class:`ApiError` with one line a person can act on:
the server is unreachable, the key is refused, the run does not exist.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from keelwave.remote.config import Credentials


class ApiError(Exception):
    """A request failed; ``str(error)`` is the one line to show."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Api:
    def __init__(self, credentials: Credentials, timeout: float = 15.0) -> None:
        if not credentials.api_key:
            raise ApiError(
                "no API key: run `keelwave login`, set KEELWAVE_API_KEY, or pass --api-key"
            )
        self.endpoint = credentials.endpoint
        self._key = credentials.api_key
        self._timeout = timeout
        self._project: str | None = None

    def get(self, path: str, **params: Any) -> Any:
        """GET ``path``; return the whole JSON answer (``{"data": …}``). A list value is
        the parameter repeated (``tag=a&tag=b``); None and empty lists are left out."""
        query = {key: value for key, value in params.items() if value not in (None, [], ())}
        encoded = urllib.parse.urlencode(query, doseq=True)
        url = self.endpoint + path + ("?" + encoded if encoded else "")
        request = urllib.request.Request(url, headers=self.authorization())
        return self._answer(request)

    def send(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        """POST, PATCH or DELETE ``path`` with a JSON ``body``; the whole JSON answer.
        ``timeout``: seconds to wait for it, if not the client's (a long deletion)."""
        headers = self.authorization()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.endpoint + path, data=data, headers=headers, method=method
        )
        return self._answer(request, timeout)

    def authorization(self) -> dict[str, str]:
        """The header that carries the key, for requests made another way (streamed)."""
        return {"Authorization": f"Bearer {self._key}"}

    def _answer(self, request: urllib.request.Request, timeout: float | None = None) -> Any:
        try:
            with urllib.request.urlopen(request, timeout=timeout or self._timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            raise ApiError(error_message(error), error.code) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ApiError(
                f"cannot reach keelwave at {self.endpoint}: {reason} "
                "(is `keelwave serve` running? is the endpoint right?)"
            ) from None
        except ValueError:
            raise ApiError(f"{self.endpoint} did not answer with JSON: is it keelwave?") from None

    def me(self) -> dict:
        return self.get("/v1/me")["data"]

    @property
    def project(self) -> str:
        if self._project is None:
            self._project = self.me()["project_id"]
        return self._project

    def agent(self, path: str, **params: Any) -> Any:
        """GET under ``/v1/projects/{project}/agent``; the whole answer."""
        return self.get(f"/v1/projects/{self.project}/agent{path}", **params)

    def all_steps(self, run_id: str) -> list[dict]:
        """Every step of a run, page after page."""
        steps: list[dict] = []
        cursor = None
        while True:
            answer = self.agent(f"/runs/{run_id}/steps", limit=5000, cursor=cursor)
            steps += answer["data"]
            cursor = answer.get("next_cursor")
            if not cursor:
                return steps

    def timeline(self, run_id: str) -> list[dict]:
        """A run's steps, model calls and child runs by start time, page after page."""
        items: list[dict] = []
        cursor = None
        while True:
            answer = self.agent(f"/runs/{run_id}/timeline", limit=5000, cursor=cursor)
            items += answer["data"]
            cursor = answer.get("next_cursor")
            if not cursor:
                return items

    def resolve_run(self, reference: str) -> str:
        """A full run id from an id or a unique start of one."""
        reference = reference.strip().lower()
        try:
            return str(uuid.UUID(reference))
        except ValueError:
            pass
        if not reference or any(ch not in "0123456789abcdef-" for ch in reference):
            raise ApiError(f"{reference!r} is not a run id")
        matches = [
            run["id"]
            for run in self.agent("/runs", q=reference, limit=500)["data"]
            if run["id"].startswith(reference)
        ]
        if not matches:
            raise ApiError(f"no run starts with {reference!r}", 404)
        if len(matches) > 1:
            raise ApiError(f"{reference!r} matches {len(matches)} runs; give more of the id")
        return matches[0]


def error_message(error: urllib.error.HTTPError) -> str:
    """The one line to show for an HTTP error answer (its JSON error's message)."""
    try:
        body = json.load(error)
        message = body["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = error.reason
    if error.code == 401:
        return f"the key was refused: {message} (run `keelwave login` or check KEELWAVE_API_KEY)"
    if error.code == 403:
        return f"not allowed: {message}"
    if error.code == 404:
        return message[0].upper() + message[1:] if message else "not found"
    if error.code == 503:
        return f"the server is up but its database is not: {message}"
    return f"HTTP {error.code}: {message}"
