"""The console's web application: pages over the ledger, and resolutions through its audited API.

Built with Starlette (routing, forms, responses) and Jinja2 (templates that
escape everything they print). Every route requires the access token; every
write requires the CSRF token, a reason and an evidence reference; with
``read_only`` the write route does not exist at all. A request awaiting
approval is offered approve and deny, and nothing else; an uncertain
operation is offered confirm, reject and authorize-retry, and never approve.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

try:
    import jinja2
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
    from starlette.routing import Route
except ModuleNotFoundError as exc:  # pragma: no cover - exercised by a subprocess test
    msg = (
        f"the effectguard console needs the 'console' extra ({exc.name} is not installed): "
        "pip install 'effectguard[console]'"
    )
    raise ImportError(msg) from exc

from effectguard._configure import trace_resolution
from effectguard._fingerprint import REDACTED
from effectguard._model import EffectStatus
from effectguard.console.attention import (
    ATTENTION_STATUSES,
    approved_unsent,
    awaiting_approval,
    needs_attention,
)
from effectguard.console.guard import GuardMiddleware
from effectguard.console.resolve import (
    ACTIONS,
    APPROVAL_ACTIONS,
    ResolutionRefused,
    parse_resolution,
    probe_output,
    reprobe,
    resolve,
)
from effectguard.console.security import AccessGuard
from effectguard.errors import EffectGuardError
from effectguard.ledger._resolution import approval_expiry, os_user

if TYPE_CHECKING:
    from effectguard._decorator import ToolIndex
    from effectguard._model import OperationRecord
    from effectguard.ledger import EffectLedger
    from effectguard.operator import ProbedOutput
    from effectguard.runtime import RunView

__all__ = ["ConsoleSettings", "create_app"]

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """What one console serves, and as whom it writes.

    ``actor`` is recorded on every resolution (the ledger also records the OS
    account and host of the process). ``checkpoints`` is a runtime checkpoint
    file whose WAITING runs the console shows, or None. ``tools`` (the
    decorated tools, as ``agent-effect-ops --tools`` loads them) lets the
    console check a confirmation's output against the tool's return type and
    re-probe an operation; without them outputs are unchecked (with a warning)
    and there is no re-probe. ``hosts`` are the ``Host`` header values the
    console answers to (the address it bound and ``localhost``, with the port:
    a DNS-rebinding page is refused); empty answers any, for an application
    that mounts the console behind its own host check.
    """

    ledger: EffectLedger
    token: str
    actor: str
    read_only: bool = False
    checkpoints: str | None = None
    tools: ToolIndex | None = None
    page_size: int = 50
    hosts: frozenset[str] = frozenset()


class _Pages:
    """The route handlers, sharing one ledger, one template environment and one guard."""

    def __init__(self, settings: ConsoleSettings, guard: AccessGuard) -> None:
        self.settings = settings
        self.guard = guard
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["tojson_pretty"] = _pretty
        self.templates.filters["age"] = _age
        self.templates.globals["REDACTED"] = REDACTED

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        template = self.templates.get_template(name)
        page = template.render(
            read_only=self.settings.read_only,
            actor=self.settings.actor,
            csrf=self.guard.csrf,
            **context,
        )
        return HTMLResponse(page, status_code=status_code)

    def problem(self, message: str, status_code: int) -> HTMLResponse:
        return self.render("problem.html", status_code=status_code, message=message)

    def attention(self, request: Request) -> Response:
        query = request.query_params
        try:
            status = EffectStatus.parse(query["status"]) if query.get("status") else None
            page = int(query.get("page", "1"))
            found = needs_attention(
                self.settings.ledger,
                status=status,
                contract=query.get("contract") or None,
                page=page,
                page_size=self.settings.page_size,
            )
        except ValueError as exc:
            return self.problem(str(exc), 400)
        return self.render(
            "attention.html",
            found=found,
            statuses=[s.value for s in ATTENTION_STATUSES],
            status=status.value if status else "",
            contract=query.get("contract", ""),
            page_link=lambda n: (
                "/?" + urlencode({k: v for k, v in {**query, "page": str(n)}.items() if v})
            ),
        )

    def approvals(self, request: Request) -> Response:
        """The requests awaiting approval, longest waiting first, with what each would send."""
        query = request.query_params
        try:
            found = awaiting_approval(
                self.settings.ledger,
                contract=query.get("contract") or None,
                page=int(query.get("page", "1")),
                page_size=self.settings.page_size,
            )
            approved = approved_unsent(
                self.settings.ledger,
                contract=query.get("contract") or None,
                limit=self.settings.page_size,
            )
        except ValueError as exc:
            return self.problem(str(exc), 400)
        return self.render(
            "approvals.html",
            found=found,
            approved=[(record, approval_expiry(record)) for record in approved],
            contract=query.get("contract", ""),
            now=datetime.now(UTC),
            page_link=lambda n: (
                "/approvals?" + urlencode({k: v for k, v in {**query, "page": str(n)}.items() if v})
            ),
        )

    def operation(self, request: Request) -> Response:
        operation_id = request.query_params.get("id", "")
        try:
            record = self.settings.ledger.get(operation_id)
        except EffectGuardError as exc:
            return self.problem(str(exc), 400)
        if record is None:
            return self.problem(f"no operation {operation_id!r} in the ledger", 404)
        return self.operation_page(record, done=request.query_params.get("done", ""))

    def operation_page(
        self, record: OperationRecord, *, done: str = "", probed: ProbedOutput | None = None
    ) -> Response:
        """The operation's page as of ``record``; its resolve form decides on exactly that state.

        ``probed`` fills the confirm fields with what the probe found.
        """
        operation_id = record.operation_id
        ledger = self.settings.ledger
        try:
            events = ledger.events(operation_id)
        except EffectGuardError as exc:
            return self.problem(str(exc), 400)
        blocked = [
            run
            for run in self.waiting_runs()
            if any(op.operation_id == operation_id for op in run.operations)
        ]
        return self.render(
            "operation.html",
            record=record,
            events=events,
            chain=_chain_check(record, events),
            handler_error=_handler_error(record.evidence, record.reason or ""),
            blocked=blocked,
            actions=ACTIONS,
            awaiting=record.status is EffectStatus.AWAITING_APPROVAL,
            can_reprobe=self.settings.tools is not None,
            done=done,
            probed=probed,
            probed_output=None if probed is None else _pretty(probed.output),
        )

    def waiting_runs(self) -> list[RunView]:
        """The WAITING runs of the checkpoint file, with their operations' status now."""
        if self.settings.checkpoints is None:
            return []
        from effectguard.runtime import SQLiteCheckpointStore, list_runs  # noqa: PLC0415 - only with checkpoints

        with SQLiteCheckpointStore(self.settings.checkpoints) as store:
            return list_runs(store, self.settings.ledger)

    def runs(self, request: Request) -> Response:  # noqa: ARG002 - Starlette's handler signature
        if self.settings.checkpoints is None:
            return self.render("runs.html", runs=None)
        return self.render("runs.html", runs=self.waiting_runs())

    async def form(self, request: Request) -> dict[str, str] | Response:
        """The posted form's text fields, or the 403 page when its CSRF token is wrong."""
        form = await request.form()
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        if not self.guard.csrf_ok(fields.get("csrf")):
            return self.problem("the form's CSRF token is missing or wrong; reload the page", 403)
        return fields

    async def resolve(self, request: Request) -> Response:
        fields = await self.form(request)
        if isinstance(fields, Response):
            return fields
        preview = fields.get("submit") == "preview"
        try:
            resolution = parse_resolution(fields)
            done = resolve(
                self.settings.ledger,
                resolution,
                actor=self.settings.actor,
                tools=self.settings.tools,
                dry_run=preview,
            )
        except (ValueError, ResolutionRefused) as exc:
            return self.problem(str(exc), 400)
        if preview:
            return self.render(
                "preview.html",
                done=done,
                fields=fields,
                action="/resolve",
                approval=done.action in APPROVAL_ACTIONS,
            )
        trace_resolution(done.after, self.settings.ledger.events(done.after.operation_id)[-1])
        target = "/operation?" + urlencode({"id": done.after.operation_id, "done": done.action})
        return RedirectResponse(target, status_code=303)

    async def reprobe(self, request: Request) -> Response:
        fields = await self.form(request)
        if isinstance(fields, Response):
            return fields
        tools = self.settings.tools
        if tools is None:  # pragma: no cover - the route exists only with tools
            return self.problem("start the console with --tools to re-probe", 400)
        operation_id = fields.get("operation_id", "")
        preview = fields.get("submit") == "preview"
        actor = f"{self.settings.actor} (console, as {os_user()})"
        try:
            outcome = reprobe(
                self.settings.ledger, operation_id, tools, actor=actor, dry_run=preview
            )
        except ResolutionRefused as exc:
            return self.problem(str(exc), 400)
        if preview:
            return self.render("reprobed.html", outcome=outcome, fields=fields)
        target = "/operation?" + urlencode({"id": operation_id, "done": "re-probe"})
        return RedirectResponse(target, status_code=303)

    async def fill_from_probe(self, request: Request) -> Response:
        """Ask the probe and show the operation with the confirm form filled from its answer."""
        fields = await self.form(request)
        if isinstance(fields, Response):
            return fields
        tools = self.settings.tools
        if tools is None:  # pragma: no cover - the route exists only with tools
            return self.problem("start the console with --tools to ask the probe", 400)
        ledger = self.settings.ledger
        try:
            record, probed = probe_output(ledger, fields.get("operation_id", ""), tools)
            now = ledger.get(record.operation_id)  # the page shows the state it decides on
        except (ResolutionRefused, EffectGuardError) as exc:
            return self.problem(str(exc), 400)
        if now is None or not probed.seen.matches(now):
            msg = (
                f"operation {record.operation_id!r} changed while the probe answered: "
                "reload the page and ask again"
            )
            return self.problem(msg, 409)
        return self.operation_page(now, probed=probed)

    def stylesheet(self, request: Request) -> Response:  # noqa: ARG002 - Starlette's handler signature
        css = (_HERE / "templates" / "console.css").read_text(encoding="utf-8")
        return PlainTextResponse(css, media_type="text/css")


def _pretty(value: Any) -> str:
    """JSON for a person to read: indented, keys sorted, non-ASCII kept."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _age(when: datetime, now: datetime) -> str:
    """How long ago ``when`` was, in its two largest units (``3d 4h``, ``25m``, ``8s``)."""
    seconds = max(0, int((now - when).total_seconds()))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:  # noqa: PLR2004 - two units say an age precisely enough
            break
    return " ".join(parts)


def _handler_error(evidence: Mapping[str, Any], reason: str) -> str | None:
    """The handler's error as one line, or None when there is none or the reason already says it.

    The executor writes the error into the operation's reason too; showing it
    twice makes an operator compare two texts to find out they are the same.
    """
    error = evidence.get("error")
    if not error:
        return None
    if isinstance(error, Mapping) and set(error) <= {"type", "message"}:
        text = ": ".join(str(error[key]) for key in ("type", "message") if error.get(key))
    else:
        text = _pretty(error)
    return None if text in reason else text


def _chain_check(record: Any, events: list[Any]) -> list[str]:
    """Problems with this operation's own hash chain (empty when whole)."""
    from effectguard.ledger._chain import check  # noqa: PLC0415 - the chain check of one operation

    problems = check(
        record.operation_id, record.event_count, record.event_head, events, record.status.value
    )
    return [p.problem if p.seq is None else f"event {p.seq}: {p.problem}" for p in problems]


def create_app(settings: ConsoleSettings) -> Starlette:
    """Return the console as an ASGI application over ``settings.ledger``.

    Every request needs the access token ``settings.token``; with
    ``settings.read_only`` no route writes to the ledger.
    """
    guard = AccessGuard(settings.token)
    pages = _Pages(settings, guard)
    routes = [
        Route("/", pages.attention, methods=["GET"]),
        Route("/approvals", pages.approvals, methods=["GET"]),
        Route("/operation", pages.operation, methods=["GET"]),
        Route("/runs", pages.runs, methods=["GET"]),
        Route("/console.css", pages.stylesheet, methods=["GET"]),
    ]
    if not settings.read_only:
        routes.append(Route("/resolve", pages.resolve, methods=["POST"]))
        if settings.tools is not None:
            routes.append(Route("/reprobe", pages.reprobe, methods=["POST"]))
            routes.append(Route("/fill-from-probe", pages.fill_from_probe, methods=["POST"]))
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(GuardMiddleware, guard=guard, forbidden=pages.problem, hosts=settings.hosts)
        ],
    )
