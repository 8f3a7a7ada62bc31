"""The five kinds of agent in the findings corpus, and the tool calls each one makes.

Each domain makes calls with realistic inputs and outputs (a call is ``(tool,
args, output)``; outputs follow from inputs, as a deterministic tool's do) and
knows its own shapes of repetition: ordinary work (every call fresh within a
trajectory), a call to near-duplicate, calls that make no progress, pages,
batches, polls whose result changes, alternating tools, and look-alikes (calls
that differ only in a small number, a date, a minute-aligned slot or an entity
id: not the same call).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
from collections.abc import Callable
from typing import Any, TypeVar

Call = tuple[str, Any, Any]
T = TypeVar("T")


def choices(text: str) -> tuple[str, ...]:
    """A pool of values written as one "|"-separated string."""
    return tuple(text.split("|"))


def digest(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:6], "big")


def token(rng: random.Random, length: int = 16) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


class Domain:
    name = ""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[Any] = set()
        self.counter = 0

    def fresh(self, make: Callable[[], T]) -> T:
        """A value not used before in this trajectory."""
        for _ in range(1000):
            value = make()
            if value not in self.used:
                self.used.add(value)
                return value
        raise RuntimeError(f"{self.name}: ran out of fresh values")

    def tick(self) -> int:
        self.counter += 1
        return self.counter


class Research(Domain):
    name = "research"
    SUBJECTS = choices(
        "solid-state batteries|CRISPR off-target effects|RISC-V adoption|coral bleaching|"
        "LLM quantization|perovskite solar cells|urban heat islands|mRNA vaccine stability|"
        "Rust async runtimes|PostgreSQL partitioning|carbon capture costs|"
        "quantum error correction|lithium supply chain|microplastics in rivers|WebAssembly GC|"
        "heat pump efficiency|tokamak confinement records|antibiotic resistance|"
        "satellite internet latency|vertical farming yields"
    )
    ASPECTS = choices(
        "review|benchmarks|market size|open problems|history|critiques|latest results|policy|"
        "comparison|explained"
    )

    def topic(self) -> tuple[str, str]:
        return self.fresh(lambda: (self.rng.choice(self.SUBJECTS), self.rng.choice(self.ASPECTS)))

    @staticmethod
    def url(query: str, rank: int) -> str:
        slug = "-".join(query.lower().split())[:48]
        host = ("en.wikipedia.org/wiki", "arxiv.org/abs", "news.example.com")[rank % 3]
        return f"https://{host}/{slug}-{rank}"

    def search(self, query: str, **extra: Any) -> Call:
        results = [
            {
                "title": f"{query.title()} ({i + 1})",
                "url": self.url(query, i),
                "snippet": f"An overview of {query}, part {i + 1}.",
            }
            for i in range(3)
        ]
        return "web_search", {"query": query, "num_results": 10, **extra}, {"results": results}

    def fetch(self, url: str) -> Call:
        words = url.split("://", 1)[-1].replace("-", " ").replace("/", " ")
        return "fetch_url", {"url": url}, {"status": 200, "content": f"{words}. " * 3}

    def work(self, fixed: bool = True) -> Call:
        subject, aspect = self.topic()
        if self.rng.random() < 0.5:
            return self.search(f"{subject} {aspect}")
        return self.fetch(self.url(f"{subject} {aspect}", self.rng.randint(0, 2)))

    def near_call(self) -> tuple[str, Any, Any, str | None]:
        return (*self.search(" ".join(self.topic())), "query")

    def stuck_calls(self, n: int) -> list[Call]:
        subject, aspect = self.topic()
        if self.rng.random() < 0.6:
            forms = [
                f"{subject} {aspect}",
                f"{aspect} of {subject}",
                f'"{subject}" {aspect} pdf',
                f"{subject} {aspect} site:arxiv.org",
                f"what is known about {subject}",
                f"{subject} survey paper",
            ]
            return [
                ("web_search", {"query": q, "num_results": 10}, {"results": [], "total": 0})
                for q in forms[:n]
            ]
        slug = "-".join(subject.split())
        hosts = choices(
            "www.nature.com|www.science.org|ieeexplore.ieee.org|dl.acm.org|link.springer.com|"
            "onlinelibrary.wiley.com"
        )
        paywall = {"status": 403, "content": "Access denied: subscription required"}
        return [("fetch_url", {"url": f"https://{h}/articles/{slug}"}, paywall) for h in hosts[:n]]

    def pages(self, n: int) -> list[Call]:
        query = " ".join(self.topic())
        key = self.rng.choice(("page", "offset"))
        calls = []
        for i in range(n):
            _, args, output = self.search(query, **{key: i + 1 if key == "page" else 10 * i})
            output = {"results": [{**r, "title": f"{r['title']} p{i}"} for r in output["results"]]}
            calls.append(("web_search", args, output))
        return calls

    def batch(self, n: int) -> list[Call]:
        ids = [self.fresh(lambda: f"{self.rng.getrandbits(64):016x}") for _ in range(n)]
        return [self.fetch(f"https://docs.example.org/d/{i}/{self.rng.choice('abc')}") for i in ids]

    def poll(self, n: int) -> list[Call]:
        job = {"job_id": f"crawl-{self.rng.randint(100, 999)}"}
        outs = [{"status": "running", "pages": 40 * (i + 1)} for i in range(n - 1)]
        return [("check_crawl", job, o) for o in [*outs, {"status": "done", "pages": 40 * n}]]

    def alternate(self, n: int) -> list[Call]:
        calls = []
        for _ in range(n):
            query = " ".join(self.topic())
            calls += [self.search(query), self.fetch(self.url(query, 0))]
        return calls

    def look_alikes(self, n: int) -> list[Call]:
        subject = self.rng.choice(self.SUBJECTS)
        return [self.search(f"{subject} {2016 + i} annual report") for i in range(n)]


class Coding(Domain):
    name = "coding"
    PKGS = ("api", "core", "auth", "billing", "search", "storage", "jobs", "cli", "utils", "models")
    MODS = choices(
        "handlers|service|schema|client|cache|config|errors|routes|queue|parser|retry|metrics|"
        "tokens|session|views"
    )

    def path(self) -> str:
        return self.fresh(
            lambda: f"src/{self.rng.choice(self.PKGS)}/{self.rng.choice(self.MODS)}.py"
        )

    @staticmethod
    def code(path: str) -> str:
        module = path.rsplit("/", 1)[-1][:-3]
        return f'"""The {module} module."""\n\nimport logging\n\n\ndef {module}_main():\n    ...\n'

    @staticmethod
    def test_path(path: str) -> str:
        _, package, module = path.split("/")
        return f"tests/{package}/test_{module}"

    def read(self, path: str) -> Call:
        return "read_file", {"path": path}, {"content": self.code(path)}

    def write(self, path: str) -> Call:
        return "write_file", {"path": path, "content": self.code(path) + "# edited\n"}, {"ok": True}

    def tests(self, path: str, *args: str) -> Call:
        passed = digest(path, args) % 40 + 1
        output = {
            "passed": passed,
            "failed": 0,
            "output": f"{path}: {passed} passed in 0.{passed}s",
        }
        return "run_tests", {"path": self.test_path(path), "args": ["-q", *args]}, output

    def work(self, fixed: bool = True) -> Call:
        if fixed and self.rng.random() < 0.15:
            passed = 100 + self.tick()
            return "run_tests", {}, {"passed": passed, "failed": 0, "output": f"{passed} passed"}
        return self.rng.choice((self.read, self.write, self.tests))(self.path())

    def near_call(self) -> tuple[str, Any, Any, str | None]:
        path = self.path()
        failure = {
            "passed": 3,
            "failed": 1,
            "output": f"FAILED {self.test_path(path)}::test_roundtrip - AssertionError",
        }
        return "run_tests", {"path": self.test_path(path), "args": ["-x", "-q"]}, failure, None

    def stuck_calls(self, n: int) -> list[Call]:
        path = self.path()
        module = path.rsplit("/", 1)[-1][:-3]
        error = {
            "passed": 0,
            "failed": 0,
            "errors": 1,
            "output": f"ImportError: cannot import name 'parse' from 'src.{module}'",
        }
        if self.rng.random() < 0.3:  # a read-only checkout: every write fails the same way
            denied = {"ok": False, "error": "EROFS: read-only file system"}
            return [(*self.write(self.path())[:2], denied) for _ in range(n)]
        names = ("roundtrip", "empty", "unicode", "large", "invalid", "defaults")
        return [
            ("run_tests", {"path": self.test_path(path), "args": ["-k", f"test_{k}"]}, error)
            for k in names[:n]
        ]

    def pages(self, n: int) -> list[Call]:
        files = sorted(f"src/{p}/{m}.py" for p in self.PKGS for m in self.MODS)
        return [
            (
                "list_files",
                {"dir": "src", "offset": 25 * i, "limit": 25},
                {"files": files[25 * i : 25 * i + 25]},
            )
            for i in range(n)
        ]

    def batch(self, n: int) -> list[Call]:
        paths = [self.path() for _ in range(n)]
        if self.rng.random() < 0.4:  # eighteen writes: eighteen times the same receipt
            receipt = self.rng.choice(({"ok": True}, {"bytes_written": 96}, {"status": "saved"}))
            return [(*self.write(p)[:2], receipt) for p in paths]
        calls = [self.read(p) for p in paths]
        inits = [f"src/{p}/__init__.py" for p in self.rng.sample(self.PKGS, 3)]
        return calls[:2] + [("read_file", {"path": p}, {"content": ""}) for p in inits] + calls[2:]

    def poll(self, n: int) -> list[Call]:
        pipeline = {"pipeline_id": self.rng.randint(1000, 9999)}
        outs = [{"state": "running", "finished_jobs": i, "total_jobs": n} for i in range(n - 1)]
        return [("ci_status", pipeline, o) for o in [*outs, {"state": "success", "total_jobs": n}]]

    def alternate(self, n: int) -> list[Call]:
        calls = []
        for _ in range(n):
            path = self.path()
            calls += (
                [self.read(path), self.write(path)]
                if n % 2
                else [self.write(path), self.tests(path)]
            )
        return calls

    def look_alikes(self, n: int) -> list[Call]:
        calls = []
        for _ in range(n):
            sha = self.fresh(lambda: f"{self.rng.getrandbits(160):040x}")
            calls.append(
                ("git_show", {"sha": sha}, {"commit": sha, "message": f"fix #{digest(sha) % 900}"})
            )
        return calls


class Support(Domain):
    name = "support"
    ISSUES = choices(
        "reset password|refund for annual plan|change billing email|export invoices|"
        "cancel subscription|two-factor setup|API rate limits|SSO configuration|delete account|"
        "upgrade plan|failed payment|invite teammates"
    )
    PRODUCTS = ("mobile app", "web dashboard", "Pro plan", "Team plan", "API", "desktop client")
    PLANS = ("free", "pro", "team", "enterprise")

    def customer(self) -> str:
        if self.rng.random() < 0.3:
            return self.fresh(
                lambda: "-".join(
                    f"{self.rng.getrandbits(b):0{b // 4}x}" for b in (32, 16, 16, 16, 48)
                )
            )
        return self.fresh(lambda: "cus_" + token(self.rng, 14))

    def lookup(self, customer: str) -> Call:
        h = digest(customer)
        profile = {
            "id": customer,
            "name": f"Customer {h % 10_000}",
            "plan": self.PLANS[h % 4],
            "open_tickets": h % 3,
        }
        return "lookup_customer", {"customer_id": customer}, profile

    def kb(self, query: str) -> Call:
        articles = [
            {
                "id": f"kb-{digest(query, i) % 9000 + 1000}",
                "title": f"{query.capitalize()}: step {i + 1}",
            }
            for i in range(2)
        ]
        return "search_kb", {"query": query, "top_k": 5}, {"articles": articles}

    def reply(self, ticket: str) -> Call:
        body = f"Hi, following up on {ticket}: this should now be fixed."
        return "send_reply", {"ticket_id": ticket, "body": body}, {"status": "sent"}

    def question(self) -> str:
        return self.fresh(
            lambda: f"{self.rng.choice(self.ISSUES)} {self.rng.choice(self.PRODUCTS)}"
        )

    def work(self, fixed: bool = True) -> Call:
        pick = self.rng.random()
        if pick < 0.4:
            return self.lookup(self.customer())
        if pick < 0.8:
            return self.kb(self.question())
        return self.reply(self.fresh(lambda: f"T-{self.rng.randint(1000, 99999)}"))

    def near_call(self) -> tuple[str, Any, Any, str | None]:
        return (*self.kb(self.question()), "query")

    def stuck_calls(self, n: int) -> list[Call]:
        issue = self.rng.choice(self.ISSUES)
        if self.rng.random() < 0.5:
            forms = [
                issue,
                f"how do I {issue}",
                f"{issue} not working",
                f"{issue} help",
                f"{issue} error",
                f"cannot {issue}",
            ]
            empty = {"articles": [], "message": "No matching articles"}
            return [("search_kb", {"query": q, "top_k": 5}, empty) for q in forms[:n]]
        emails = choices(
            "jdoe@acme.io|john.doe@acme.io|j.doe@acme.com|johnd@acme.io|doe.john@acme.io|"
            "john@acme-corp.io"
        )
        missing = {"error": "customer not found"}
        return [("lookup_customer", {"email": e}, missing) for e in emails[:n]]

    def pages(self, n: int) -> list[Call]:
        calls, after = [], None
        for i in range(n):
            ids = [f"tkt_{token(self.rng, 12)}" for _ in range(3)]
            args = {"status": "open", "limit": 3} | ({"starting_after": after} if after else {})
            if self.rng.random() < 0.3:
                args = {"status": "open", "page": i + 1, "per_page": 3}
            calls.append(("list_tickets", args, {"tickets": ids, "has_more": i < n - 1}))
            after = ids[-1]
        return calls

    def batch(self, n: int) -> list[Call]:
        return [self.lookup(self.customer()) for _ in range(n)]

    def poll(self, n: int) -> list[Call]:
        ticket = f"T-{self.rng.randint(1000, 9999)}"
        if self.rng.random() < 0.5:
            states = ["open"] * (n - 2) + ["pending", "solved"]
            return [
                ("get_ticket", {"ticket_id": ticket}, {"status": s, "updates": i})
                for i, s in enumerate(states)
            ]
        calls, since = [], "2024-05-01T09:12:44Z"
        for i in range(n):
            event = f"2024-05-01T{10 + i:02d}:{17 + i:02d}:{31 + i:02d}Z"
            calls.append(
                (
                    "get_ticket_events",
                    {"ticket_id": ticket, "since": since},
                    {"events": [{"at": event, "kind": "comment", "n": i}]},
                )
            )
            since = event
        return calls

    def alternate(self, n: int) -> list[Call]:
        calls = []
        for _ in range(n):
            calls += [
                self.lookup(self.customer()),
                self.reply(self.fresh(lambda: f"T-{self.rng.randint(1000, 99999)}")),
            ]
        return calls

    def look_alikes(self, n: int) -> list[Call]:
        issue = self.rng.choice(self.ISSUES)
        products = self.rng.sample(self.PRODUCTS, min(n, len(self.PRODUCTS)))
        calls = [self.kb(f"{issue} {p}") for p in products]
        base = self.rng.randint(100_000, 900_000)
        return calls + [
            ("get_order", {"order_number": base + i}, {"order": base + i, "total": i * 7})
            for i in range(n - len(calls))
        ]


class Sql(Domain):
    name = "sql"
    TABLES = choices(
        "orders|customers|payments|invoices|events|sessions|subscriptions|refunds|products|"
        "shipments|users|sign_ups|churn_scores|page_views|experiments|coupons|reviews|carts|"
        "returns|tickets"
    )
    COLUMNS = ("status", "country", "plan", "channel", "device", "currency", "source", "tier")

    def describe(self, table: str) -> Call:
        columns = [{"name": c, "type": "text"} for c in self.COLUMNS[: digest(table) % 5 + 3]]
        return "describe_table", {"table": table}, {"table": table, "columns": columns}

    def query(self, sql: str, **extra: Any) -> Call:
        h = digest(sql, extra)
        rows = [[f"v{(h >> i) % 97}", (h >> (2 * i)) % 5000] for i in range(3)]
        return (
            "run_query",
            {"sql": sql, "database": "analytics", **extra},
            {"columns": ["k", "n"], "rows": rows, "row_count": 3},
        )

    def fresh_sql(self) -> str:
        return self.fresh(
            lambda: (
                f"SELECT {self.rng.choice(self.COLUMNS)}, count(*) AS n FROM "
                f"{self.rng.choice(self.TABLES)} GROUP BY 1 ORDER BY n DESC LIMIT "
                f"{self.rng.choice((10, 20, 50))}"
            )
        )

    def work(self, fixed: bool = True) -> Call:
        if self.rng.random() < 0.35:
            return self.describe(self.fresh(lambda: self.rng.choice(self.TABLES)))
        return self.query(self.fresh_sql())

    def near_call(self) -> tuple[str, Any, Any, str | None]:
        return (*self.query(self.fresh_sql()), "sql")

    def stuck_calls(self, n: int) -> list[Call]:
        if self.rng.random() < 0.5:
            denied = {"error": 'permission denied for table "payments"'}
            columns = self.rng.sample(self.COLUMNS, n)
            return [
                self.query(f"SELECT {c}, sum(amount) FROM payments GROUP BY 1")[:2] + (denied,)
                for c in columns
            ]
        export = f"exp_{self.rng.randint(100, 999)}"
        return [
            ("check_export", {"export_id": export, "attempt": i + 1}, {"status": "pending"})
            for i in range(n)
        ]

    def pages(self, n: int) -> list[Call]:
        sql = self.fresh_sql().rsplit(" LIMIT", 1)[0]
        if self.rng.random() < 0.5:
            return [self.query(f"{sql} LIMIT 100 OFFSET {100 * i}") for i in range(n)]
        cursors = [
            base64.b64encode(json.dumps({"offset": 100 * i}).encode()).decode() for i in range(n)
        ]
        return [self.query(sql, cursor=c) for c in cursors]

    def batch(self, n: int) -> list[Call]:
        return [self.describe(t) for t in self.rng.sample(self.TABLES, min(n, len(self.TABLES)))]

    def poll(self, n: int) -> list[Call]:
        export = {"export_id": f"exp_{self.rng.randint(100, 999)}"}
        outs = [{"status": "running", "progress": 15 * (i + 1)} for i in range(n - 1)]
        return [("check_export", export, o) for o in [*outs, {"status": "done", "progress": 100}]]

    def alternate(self, n: int) -> list[Call]:
        calls = []
        for table in self.rng.sample(self.TABLES, n):
            column = self.rng.choice(self.COLUMNS)
            calls += [
                self.describe(table),
                self.query(f"SELECT {column}, count(*) FROM {table} GROUP BY 1"),
            ]
        return calls

    def look_alikes(self, n: int) -> list[Call]:
        table, month = self.rng.choice(("orders", "payments", "sessions")), self.rng.randint(1, 9)
        if self.rng.random() < 0.5:
            sql = f"SELECT count(*) FROM {table} WHERE created_at::date = '2024-{month:02d}-%02d'"
            return [self.query(sql % (d + 1)) for d in range(n)]
        return [
            self.query(
                f"SELECT count(*) FROM {table} WHERE ts >= '2024-{month:02d}-03 {h:02d}:00:00' "
                f"AND ts < '2024-{month:02d}-03 {h + 1:02d}:00:00'"
            )
            for h in range(n)
        ]


class Browsing(Domain):
    name = "browsing"
    PRODUCTS = choices(
        "trail-runner-2|rain-shell|wool-beanie|camp-stove|headlamp-x|dry-bag-20l|merino-tee|"
        "gaiters|trek-poles|bivy-sack|water-filter|sleeping-pad|down-vest|compass|first-aid-kit"
    )
    SELECTORS = choices(
        "#add-to-cart|button.checkout|a.next|#size-m|#color-blue|#qty-plus|.reviews-tab|"
        "#apply-coupon|nav .account|#accept-cookies|#shipping-fast|.gallery img:nth-child(2)|"
        "#wishlist|a.size-guide"
    )
    SITE = "https://shop.example.com"

    def navigate(self, url: str) -> Call:
        title = url.rsplit("/", 1)[-1].replace("-", " ").title() or "Home"
        return "navigate", {"url": url}, {"url": url, "title": title, "status": 200}

    def click(self, selector: str) -> Call:
        return "click", {"selector": selector}, {"clicked": selector, "url": f"{self.SITE}/cart"}

    def screenshot(self) -> Call:
        shot = {
            "image_sha256": hashlib.sha256(f"{self.tick()}".encode()).hexdigest(),
            "width": 1280,
        }
        return "screenshot", {}, shot

    def work(self, fixed: bool = True) -> Call:
        pick = self.rng.random()
        if fixed and pick < 0.15:
            return self.screenshot()
        if pick < 0.55:
            return self.navigate(
                f"{self.SITE}/products/{self.fresh(lambda: self.rng.choice(self.PRODUCTS))}"
            )
        if pick < 0.85:
            return self.click(self.fresh(lambda: self.rng.choice(self.SELECTORS)))
        text = self.fresh(
            lambda: (
                f"{self.rng.choice(self.PRODUCTS).replace('-', ' ')} size {self.rng.randint(6, 13)}"
            )
        )
        return "type_text", {"selector": "#search", "text": text}, {"ok": True}

    def near_call(self) -> tuple[str, Any, Any, str | None]:
        url = f"{self.SITE}/products/{self.fresh(lambda: self.rng.choice(self.PRODUCTS))}"
        tool, args, output = self.navigate(url)
        return tool, {**args, "wait_until": "networkidle"}, output, None

    def stuck_calls(self, n: int) -> list[Call]:
        same = {
            "url": f"{self.SITE}/checkout",
            "title": "Checkout",
            "error": "element not interactable",
        }
        selectors = choices(
            "#place-order|button[type=submit]|.btn-primary|text=Place order|form button|"
            "#checkout-submit"
        )
        return [("click", {"selector": s}, same) for s in selectors[:n]]

    def pages(self, n: int) -> list[Call]:
        query = self.rng.choice(("boots", "tents", "jackets", "stoves"))
        return [self.navigate(f"{self.SITE}/search?q={query}&page={i + 1}") for i in range(n)]

    def batch(self, n: int) -> list[Call]:
        ids = [self.fresh(lambda: f"{self.rng.getrandbits(64):016x}") for _ in range(n)]
        return [self.navigate(f"{self.SITE}/p/{i}") for i in ids]

    def poll(self, n: int) -> list[Call]:
        states = ("Processing", "Packed", "Shipped", "Out for delivery", "Delivered")
        args = {"selector": "#order-status"}
        return [("get_text", args, {"text": states[min(i, 4)], "checked": i}) for i in range(n)]

    def alternate(self, n: int) -> list[Call]:
        calls = []
        for _ in range(n):
            product = self.fresh(lambda: self.rng.choice(self.PRODUCTS))
            calls += [self.navigate(f"{self.SITE}/products/{product}"), self.screenshot()]
        return calls

    def look_alikes(self, n: int) -> list[Call]:
        day = self.rng.randint(1, 28)
        slots = [f"2024-06-{day:02d}T{9 + i // 2:02d}:{30 * (i % 2):02d}:00" for i in range(n)]
        return [
            (
                "check_availability",
                {"slot": s, "party_size": 2},
                {"slot": s, "available": i % 3 != 0},
            )
            for i, s in enumerate(slots)
        ]


DOMAINS: tuple[type[Domain], ...] = (Research, Coding, Support, Sql, Browsing)
