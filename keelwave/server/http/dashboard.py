"""The web dashboard on the API's origin: the built single-page app, and the
security headers every response carries.

The app is built from keelwave/web/app into keelwave/web/static (committed,
and shipped in the wheel, so installing keelwave needs no Node). Any path that
is not an API route gets index.html, so deep links such as /runs/<id>
survive a reload. No CORS headers are sent: the UI is same-origin.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC_DIR = Path(__file__).resolve().parents[2] / "web" / "static"

# The SPA loads only its own files and talks only to its own origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}

NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>keelwave</title>
<p>The dashboard has not been built in this checkout. Build it with
<code>cd keelwave/web/app &amp;&amp; npm ci &amp;&amp; npm run build</code>;
the API works meanwhile (see docs/api.md).</p>"""


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


async def index(request: web.Request) -> web.StreamResponse:
    page = STATIC_DIR / "index.html"
    if not page.is_file():
        return web.Response(text=NOT_BUILT, content_type="text/html")
    # The page names hashed asset files: it must never be cached for long.
    return web.FileResponse(page, headers={"Cache-Control": "no-cache"})


def setup(app: web.Application) -> None:
    """Add the dashboard's routes; call last, after every API route."""
    assets = STATIC_DIR / "assets"
    if assets.is_dir():
        app.router.add_static("/assets", assets, append_version=False)
    app.router.add_get("/", index)
    # Everything but the API: a wrong method on an API path stays a 405, an
    # unknown API path a JSON 404.
    app.router.add_get("/{path:(?!v1/|healthz$|readyz$).*}", index)
    app.on_response_prepare.append(add_security_headers)
