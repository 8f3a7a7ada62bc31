"""Where the CLI and the TUI find the server and the key.

Flags beat the environment (``KEELWAVE_ENDPOINT``, ``KEELWAVE_API_KEY``),
which beats what ``keelwave login`` stored in the user's config directory
(``~/.config/keelwave/config.json`` on Linux, readable by the user only).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

DEFAULT_ENDPOINT = "http://localhost:8080"


def config_path() -> Path:
    override = os.environ.get("KEELWAVE_CONFIG")
    if override:
        return Path(override)
    return Path(platformdirs.user_config_dir("keelwave", appauthor=False)) / "config.json"


@dataclass(frozen=True)
class Credentials:
    endpoint: str
    api_key: str | None
    source: str  # where the key came from: flag, environment, config file, or nowhere


def load_saved() -> dict:
    try:
        data = json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(endpoint: str, api_key: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created with 0600 from the start: the key is never readable by others, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"endpoint": endpoint, "api_key": api_key}, handle)
    os.chmod(path, 0o600)
    return path


def normalize_endpoint(text: str) -> str:
    """``localhost:8080`` means ``http://localhost:8080``: what people type (and what
    ``keelwave serve`` prints without its scheme) works; no trailing slash."""
    text = text.strip().rstrip("/")
    return text if "://" in text else f"http://{text}"


def resolve(endpoint: str | None = None, api_key: str | None = None) -> Credentials:
    saved = load_saved()
    resolved_endpoint = normalize_endpoint(
        endpoint or os.environ.get("KEELWAVE_ENDPOINT") or saved.get("endpoint") or DEFAULT_ENDPOINT
    )
    if api_key:
        return Credentials(resolved_endpoint, api_key, "flag")
    if os.environ.get("KEELWAVE_API_KEY"):
        return Credentials(resolved_endpoint, os.environ["KEELWAVE_API_KEY"], "environment")
    if saved.get("api_key"):
        return Credentials(resolved_endpoint, saved["api_key"], "config file")
    return Credentials(resolved_endpoint, None, "nowhere")
