"""Print a fixture as a span tree with attributes, status and events (standard library only).

Run: python tests/otlp_fixtures/capture/summarize.py tests/otlp_fixtures/pydanticai_loop.json
     [--width N]   cut attribute values at N characters (default 160; 0 for no cut)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def value(v: dict):
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return v["doubleValue"]
    if "boolValue" in v:
        return v["boolValue"]
    if "arrayValue" in v:
        return [value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: value(kv["value"]) for kv in v["kvlistValue"].get("values", [])}
    return None


def attrs(obj: dict) -> dict:
    return {kv["key"]: value(kv.get("value", {})) for kv in obj.get("attributes", [])}


def show(scope: str, s: dict, depth: int, children: dict, width: int) -> None:
    pad = "  " * depth
    ms = (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])) / 1e6
    status = s.get("status", {})
    print(
        f"{pad}- {s['name']!r} kind={s.get('kind')} scope={scope} {ms:.1f}ms "
        f"status={status.get('code', 0)} {status.get('message', '')}"
    )
    for k, v in attrs(s).items():
        text = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else repr(v)
        if width and len(text) > width:
            text = text[:width] + f"…(+{len(text) - width})"
        print(f"{pad}    {k} = {text}")
    for e in s.get("events", []):
        ea = attrs(e)
        print(f"{pad}    [event {e['name']}] " + ", ".join(f"{k}={v!r}" for k, v in ea.items()))
    for c_scope, c in children.get(s["spanId"], []):
        show(c_scope, c, depth + 1, children, width)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--width", type=int, default=160)
    args = ap.parse_args()
    for path in args.files:
        body = json.loads(path.read_text())
        spans = []
        for rs in body["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    spans.append((ss["scope"].get("name", ""), s))
        print(f"### {path.name}: {len(spans)} spans")
        print("export order:", " | ".join(s["name"] for _, s in spans))
        ids = {s["spanId"] for _, s in spans}
        children: dict[str | None, list] = {}
        for scope, s in spans:
            parent = s.get("parentSpanId")
            children.setdefault(parent if parent in ids else None, []).append((scope, s))
        for lst in children.values():
            lst.sort(key=lambda x: int(x[1]["startTimeUnixNano"]))

        for scope, root in children.get(None, []):
            show(scope, root, 0, children, args.width)
        print()


if __name__ == "__main__":
    main()
