"""A guarding proxy for an MCP server you did not write: its write tools go through the ledger.

``agent-effect-mcp-proxy --contracts FILE --upstream CMD|URL --db PATH|URL``
serves, over stdio, the tools of another MCP server (``upstream``: a command
it starts and talks to over stdio, or a streamable HTTP URL) with their names,
descriptions and schemas as the upstream lists them. A call of a tool the
contracts file does not name is forwarded and its answer returned untouched.
A call of a tool it names is a guarded effect: recorded in the ledger under an
operation id made from its arguments before it is forwarded, replayed (never
forwarded again) once confirmed, and reconciled with the probe the file
names when its answer is lost.

The contracts file (TOML), one table per write tool::

    [tools.create_payment]
    operation_id = "payment:{invoice_id}"          # str.format over the arguments
    idempotency_key_argument = "idempotency_key"   # the upstream takes a key in it
    idempotency_key = "pay-{invoice_id}"           # default: the operation id
    idempotency_guaranteed = true                  # its docs say a resent key is deduplicated
    timeout = 30                                   # seconds to wait for its answer
    requires_approval = true                       # a person approves each request first

    [tools.create_payment.probe]                   # another upstream tool that looks it up
    tool = "find_payment"
    arguments = { reference = "{idempotency_key}" }
    field = "status"                               # dotted path in the lookup's answer
    committed = ["succeeded"]
    not_found = ["not_found"]                      # only for a lookup that is never stale
    pending = ["processing"]
    output = "payment"                             # the write's answer inside the lookup's

What a client sees is what :mod:`effectguard.adapters.mcp` shows for tools
written here: a confirmed call answers with the upstream's result (a replay
with the first answer); an unconfirmed one is an ``isError`` result with the
pending payload (operation id, status, the ``agent-effect-ops`` command) as
structured content and in ``_meta`` under :data:`PENDING_META_KEY`; a
rejected or conflicting request is an ``isError`` result that says it is final.
With ``requires_approval = true``, a request is recorded and not sent until
a person approves exactly it in the ledger (``agent-effect-ops approve``, the
console or the ledger API): the call answers with an ``isError`` result whose
structured content and ``_meta`` hold the approval payload (``kind``
``effectguard.approval``, the arguments as the ledger holds them, the approve
and deny commands), and the same call after the approval sends it once.
The idempotency key argument is the proxy's to fill: it is left out of the
schema the client sees, and a client that sends it anyway is refused.

A file with mistakes (bad TOML, an unknown key, a tool or probe tool the
upstream does not list, a template naming an argument the tool does not
require) is refused before the proxy serves anything: :func:`load_contracts`
and :func:`check_contracts` return every problem, one line each, and nothing
is called upstream.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shlex
import string
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effectguard._contract import EffectContract
from effectguard._executor._machine import EffectExecutor
from effectguard._model import EffectResult, EffectStatus, OutcomeProbeResult
from effectguard.adapters._approval import ApprovalRequest, ledger_command
from effectguard.adapters._common import Confirmed, Pending, Refused, _refusal, classify
from effectguard.adapters._mcp_results import (
    PENDING_META_KEY,
    approval_result,
    pending_result,
    refused_result,
)
from effectguard.errors import (
    ConfigurationError,
    EffectRejected,
    LedgerError,
    OperationConflictError,
    OutputNotStored,
)
from effectguard.ledger import EffectLedger, open_ledger

try:
    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError
    from mcp_types import (
        CONNECTION_CLOSED,
        CallToolRequestParams,
        CallToolResult,
        ListToolsResult,
        PaginatedRequestParams,
        TextContent,
        Tool,
    )
    from pydantic import ValidationError
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.mcp_proxy needs the 'mcp' extra "
        f"({exc.name} is not installed): pip install 'effectguard[mcp]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "PENDING_META_KEY",
    "ContractsError",
    "GuardingProxy",
    "ProbeSpec",
    "ToolContract",
    "UpstreamClosedError",
    "check_contracts",
    "load_contracts",
    "serve",
    "upstream_client",
]

logger = logging.getLogger("effectguard.adapters.mcp_proxy")

#: How long a guarded call waits for the upstream's answer unless its table says ``timeout``.
DEFAULT_TIMEOUT = 30.0
#: How often the upstream is asked for its tools, so a closed connection stops the proxy soon.
WATCH_INTERVAL = 2.0

_TOOL_KEYS = frozenset(
    {
        "operation_id",
        "idempotency_key_argument",
        "idempotency_key",
        "idempotency_guaranteed",
        "timeout",
        "max_attempts",
        "redact",
        "version",
        "upstream_error",
        "requires_approval",
        "probe",
    }
)
_PROBE_KEYS = frozenset(
    {"tool", "arguments", "field", "committed", "not_found", "pending", "output", "provider_id"}
)
_UPSTREAM_ERRORS = ("unknown", "rejected")
#: A probe's template may also name these, besides the write tool's arguments.
_PROBE_EXTRA_NAMES = ("operation_id", "idempotency_key")

Scalar = str | int | float | bool


class ContractsError(ConfigurationError):
    """The contracts file cannot be used; :attr:`problems` holds one line for each mistake."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class UpstreamClosedError(ConnectionError):
    """The upstream cannot be reached, or its connection closed: the proxy stops (exit 1).

    Its host may start it again; the ledger holds every guarded call.
    """


class UpstreamToolError(Exception):
    """The upstream answered a guarded call with an error: not proof that nothing happened."""


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """How to look a write up: an upstream tool, its arguments, the answer's meaning.

    ``arguments`` maps each of the lookup tool's arguments to a template over
    the write's arguments, ``operation_id`` and ``idempotency_key`` (a template
    that is one ``{name}`` alone passes the value with its JSON type). The
    value at ``answer_field`` (the file's ``field``: a dotted path into the
    lookup's structured answer) is
    COMMITTED when in ``committed``, NOT_COMMITTED when in ``not_found``,
    PENDING when in ``pending``, and UNKNOWN otherwise or when the lookup
    fails. ``output`` is the path of the write's own answer inside the
    lookup's (the whole answer when None); ``provider_id`` the path of the
    upstream's id for it.
    """

    tool: str
    answer_field: tuple[str, ...]
    committed: tuple[Scalar, ...]
    not_found: tuple[Scalar, ...] = ()
    pending: tuple[Scalar, ...] = ()
    arguments: Mapping[str, str] = field(default_factory=dict)
    output: tuple[str, ...] | None = None
    provider_id: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ToolContract:
    """One write tool's table in the contracts file, checked for form (not yet against the tools).

    ``upstream_error`` says what an ``isError`` answer of the upstream means:
    ``"unknown"`` (the default: an error is no proof that nothing happened, so
    it is reconciled like a lost answer) or ``"rejected"`` (the upstream
    documents that a failed call did nothing: the operation is REJECTED).
    """

    tool: str
    operation_id: str
    idempotency_key_argument: str | None = None
    idempotency_key: str | None = None
    idempotency_guaranteed: bool = False
    timeout: float = DEFAULT_TIMEOUT
    max_attempts: int = 3
    redact: tuple[str, ...] = ()
    version: int = 1
    upstream_error: str = "unknown"
    requires_approval: bool = False
    probe: ProbeSpec | None = None


# -- reading the contracts file --------------------------------------------------------


def _template_names(template: str) -> list[str] | str:
    """The argument names ``template`` formats, or one line saying why it cannot be used."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"is not a str.format template ({exc})"
    names = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            return f"names {{{name}}}: only plain argument names, like {{invoice_id}}, are allowed"
        names.append(name)
    return names


def _names(template: str) -> list[str]:
    """The argument names of a template already checked (none for one that is not)."""
    names = _template_names(template)
    return names if isinstance(names, list) else []


def _path(value: object) -> tuple[str, ...] | None:
    if isinstance(value, str) and value and all(part for part in value.split(".")):
        return tuple(value.split("."))
    return None


def _scalars(value: object) -> tuple[Scalar, ...] | None:
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return tuple(value)
    return None


class _Problems:
    """The problems found so far, each one line prefixed with the file and the key."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: list[str] = []

    def add(self, where: str, what: str) -> None:
        self.lines.append(f"{self.path}: {where}: {what}")


def _unknown_keys(
    problems: _Problems, where: str, table: Mapping[str, Any], known: frozenset[str]
) -> None:
    for key in sorted(set(table) - known):
        problems.add(f"{where}.{key}", f"unknown key (known: {', '.join(sorted(known))})")


def _probe_spec(problems: _Problems, where: str, table: object) -> ProbeSpec | None:
    if not isinstance(table, dict):
        problems.add(where, "must be a table")
        return None
    _unknown_keys(problems, where, table, _PROBE_KEYS)
    tool, path = table.get("tool"), _path(table.get("field"))
    committed = _scalars(table.get("committed"))
    not_found, pending = _scalars(table.get("not_found", [])), _scalars(table.get("pending", []))
    arguments = table.get("arguments", {})
    output = table.get("output")
    provider_id = table.get("provider_id")
    ok = True
    for key, good, wanted in (
        ("tool", isinstance(tool, str) and bool(tool), "the name of an upstream tool"),
        ("field", path is not None, 'a dotted path into the lookup\'s answer, like "status"'),
        ("committed", bool(committed), "a non-empty list of the values that mean committed"),
        ("not_found", not_found is not None, "a list of values"),
        ("pending", pending is not None, "a list of values"),
        (
            "arguments",
            isinstance(arguments, dict) and all(isinstance(v, str) for v in arguments.values()),
            'a table of templates, like { reference = "{idempotency_key}" }',
        ),
        ("output", output is None or _path(output) is not None, "a dotted path"),
        ("provider_id", provider_id is None or _path(provider_id) is not None, "a dotted path"),
    ):
        if not good:
            problems.add(f"{where}.{key}", f"must be {wanted}")
            ok = False
    if not ok:
        return None
    return ProbeSpec(
        tool=str(tool),
        answer_field=path or (),
        committed=committed or (),
        not_found=not_found or (),
        pending=pending or (),
        arguments=dict(arguments),
        output=None if output is None else _path(output),
        provider_id=None if provider_id is None else _path(provider_id),
    )


def _tool_contract(problems: _Problems, tool: str, table: object) -> ToolContract | None:  # noqa: C901, PLR0912 - one check per key of the table, in turn
    where = f"tools.{tool}"
    if not isinstance(table, dict):
        problems.add(where, "must be a table")
        return None
    before = len(problems.lines)
    _unknown_keys(problems, where, table, _TOOL_KEYS)
    operation_id = table.get("operation_id")
    if not isinstance(operation_id, str) or not operation_id:
        problems.add(f"{where}.operation_id", 'is required: a template like "payment:{invoice_id}"')
    key_argument = table.get("idempotency_key_argument")
    if key_argument is not None and not (isinstance(key_argument, str) and key_argument):
        problems.add(f"{where}.idempotency_key_argument", "must be an argument name")
    key = table.get("idempotency_key")
    if key is not None and not (isinstance(key, str) and key):
        problems.add(f"{where}.idempotency_key", "must be a template")
    if key is not None and key_argument is None:
        problems.add(
            f"{where}.idempotency_key",
            "needs idempotency_key_argument: the argument the upstream takes the key in",
        )
    guaranteed = table.get("idempotency_guaranteed", False)
    if not isinstance(guaranteed, bool):
        problems.add(f"{where}.idempotency_guaranteed", "must be true or false")
    elif guaranteed and key_argument is None:
        problems.add(
            f"{where}.idempotency_guaranteed",
            "needs idempotency_key_argument: a guarantee is about a key the upstream is sent",
        )
    timeout = table.get("timeout", DEFAULT_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not (timeout > 0 and math.isfinite(timeout))
    ):
        problems.add(f"{where}.timeout", "must be a positive number of seconds")
    attempts = table.get("max_attempts", 3)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        problems.add(f"{where}.max_attempts", "must be a whole number >= 1")
    version = table.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        problems.add(f"{where}.version", "must be a whole number >= 1")
    redact = table.get("redact", [])
    if not (isinstance(redact, list) and all(isinstance(name, str) for name in redact)):
        problems.add(f"{where}.redact", "must be a list of argument names")
    upstream_error = table.get("upstream_error", "unknown")
    if upstream_error not in _UPSTREAM_ERRORS:
        problems.add(f"{where}.upstream_error", 'must be "unknown" or "rejected"')
    approval = table.get("requires_approval", False)
    if not isinstance(approval, bool):
        problems.add(f"{where}.requires_approval", "must be true or false")
    probe = None
    if "probe" in table:
        probe = _probe_spec(problems, f"{where}.probe", table["probe"])
    if len(problems.lines) > before:
        return None
    return ToolContract(
        tool=tool,
        operation_id=str(operation_id),
        idempotency_key_argument=key_argument,
        idempotency_key=key,
        idempotency_guaranteed=bool(guaranteed),
        timeout=float(timeout),
        max_attempts=int(attempts),
        redact=tuple(redact),
        version=int(version),
        upstream_error=str(upstream_error),
        requires_approval=bool(approval),
        probe=probe,
    )


def load_contracts(path: str | os.PathLike[str]) -> dict[str, ToolContract]:
    """Read and check the form of a contracts file; the write tools by name.

    Raises :class:`ContractsError` listing every mistake (one line each,
    naming the file and the key): a file that cannot be read or is not TOML,
    an unknown key, a value of the wrong kind, a file naming no tool.
    """
    shown = os.fspath(path)
    problems = _Problems(shown)
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ContractsError([f"{shown}: cannot be read ({exc.strerror or exc})"]) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ContractsError([f"{shown}: is not TOML ({exc})"]) from exc
    _unknown_keys(problems, "(top level)", document, frozenset({"tools"}))
    tools = document.get("tools")
    found: dict[str, ToolContract] = {}
    if not isinstance(tools, dict) or not tools:
        problems.add("tools", "no [tools.NAME] table: name at least one write tool to guard")
    else:
        for name, table in tools.items():
            contract = _tool_contract(problems, name, table)
            if contract is not None:
                found[name] = contract
    if problems.lines:
        raise ContractsError(problems.lines)
    return found


def _properties(tool: Tool) -> tuple[set[str], set[str]]:
    """The argument names ``tool``'s input schema declares, and those it requires."""
    schema = tool.input_schema
    properties = schema.get("properties")
    required = schema.get("required")
    names = set(properties) if isinstance(properties, dict) else set()
    return names, set(required) if isinstance(required, list) else set()


def _check_template(
    problems: _Problems,
    where: str,
    template: str,
    tool: str,
    required: set[str],
    extra: Sequence[str] = (),
) -> None:
    names = _template_names(template)
    if isinstance(names, str):
        problems.add(where, names)
        return
    for name in names:
        if name in extra:
            continue
        if name not in required:
            takes = ", ".join(sorted(required)) or "none"
            problems.add(
                where,
                f"names {{{name}}}, which {tool} does not require (its required arguments: "
                f"{takes}); every call must carry what its identity is made of",
            )


def _check_probe(
    problems: _Problems,
    probe: ProbeSpec,
    name: str,
    listed: Mapping[str, Tool],
    required: set[str],
    extra: Sequence[str],
) -> None:
    where = f"tools.{name}.probe"
    lookup = listed.get(probe.tool)
    if lookup is None:
        problems.add(
            f"{where}.tool",
            f"the upstream has no tool {probe.tool!r} to look {name} up with "
            f"(its tools: {', '.join(sorted(listed)) or 'none'})",
        )
        return
    lookup_names, _ = _properties(lookup)
    for argument, template in probe.arguments.items():
        if argument not in lookup_names:
            problems.add(
                f"{where}.arguments.{argument}",
                f"{probe.tool} takes no argument {argument!r} (its arguments: "
                f"{', '.join(sorted(lookup_names)) or 'none'})",
            )
        _check_template(problems, f"{where}.arguments.{argument}", template, name, required, extra)


def check_contracts(
    path: str | os.PathLike[str], contracts: Mapping[str, ToolContract], tools: Sequence[Tool]
) -> list[str]:
    """Check ``contracts`` against the upstream's ``tools``; one line per problem (none: usable).

    Each guarded tool and each probe tool must be listed; each template may
    name only arguments its tool requires (a probe's also ``operation_id`` and
    ``idempotency_key``); the key argument and the probe's arguments must be
    in the tools' schemas.
    """
    problems = _Problems(os.fspath(path))
    listed = {tool.name: tool for tool in tools}
    available = ", ".join(sorted(listed)) or "none"
    for name, contract in contracts.items():
        where = f"tools.{name}"
        tool = listed.get(name)
        if tool is None:
            problems.add(where, f"the upstream has no tool {name!r} (its tools: {available})")
            continue
        names, required = _properties(tool)
        key_argument = contract.idempotency_key_argument
        if key_argument is not None and key_argument not in names:
            problems.add(
                f"{where}.idempotency_key_argument",
                f"{name} takes no argument {key_argument!r} (its arguments: "
                f"{', '.join(sorted(names)) or 'none'})",
            )
        required.discard(key_argument or "")
        _check_template(problems, f"{where}.operation_id", contract.operation_id, name, required)
        if contract.idempotency_key is not None:
            _check_template(
                problems,
                f"{where}.idempotency_key",
                contract.idempotency_key,
                name,
                required,
                ("operation_id",),
            )
        for redacted in contract.redact:
            if redacted not in names:
                problems.add(f"{where}.redact", f"{name} takes no argument {redacted!r}")
        if contract.probe is not None:
            extra = _PROBE_EXTRA_NAMES if key_argument else ("operation_id",)
            _check_probe(problems, contract.probe, name, listed, required, extra)
    return problems.lines


# -- the proxy -------------------------------------------------------------------------


def _dump(result: CallToolResult) -> dict[str, Any]:
    """A result as the ledger stores it (plain JSON), for a replay to rebuild exactly."""
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def _result_of(output: Any) -> CallToolResult:
    """The answer of a confirmed call, from what the ledger holds.

    What the proxy stored is a whole result; what an operator confirmed with
    (``agent-effect-ops confirm --output-json``) is usually the upstream's
    structured answer alone, which becomes the result's structured content.
    """
    if isinstance(output, Mapping) and isinstance(output.get("content"), list):
        try:
            return CallToolResult.model_validate(output)
        except ValidationError:
            pass
    text = TextContent(type="text", text=json.dumps(output, sort_keys=True, ensure_ascii=False))
    structured = dict(output) if isinstance(output, Mapping) else None
    return CallToolResult(content=[text], structured_content=structured)


def _text(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


def _answer(result: CallToolResult) -> Any:
    """The structured answer of a result: its structured content, else its text as JSON."""
    if result.structured_content is not None:
        return result.structured_content
    try:
        return json.loads(_text(result))
    except ValueError:
        return None


def _dig(data: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for part in path:
        if not isinstance(data, Mapping) or part not in data:
            return False, None
        data = data[part]
    return True, data


def _among(value: Any, values: tuple[Scalar, ...]) -> bool:
    # True == 1 in Python; in a lookup's answer they are different words.
    return any(type(value) is type(candidate) and value == candidate for candidate in values)


def _render(template: str, values: Mapping[str, Any]) -> Any:
    """A template over ``values``; one ``{name}`` alone keeps the value's JSON type."""
    names = _names(template)
    if len(names) == 1 and template == f"{{{names[0]}}}":
        return values[names[0]]
    return template.format_map(values)


def _refused_early(guarded: _Guarded, arguments: Mapping[str, Any]) -> Refused | None:
    """Refuse, before anything is recorded, a call the contract cannot make an operation of."""
    spec = guarded.spec
    if spec.idempotency_key_argument in arguments:
        message = (
            f"{spec.tool} was not sent: its {spec.idempotency_key_argument!r} argument is "
            "filled by the effect guard (the same key on every retry of one operation); "
            "call it again without that argument"
        )
        return Refused(message, None, retry_safe=True)
    missing = sorted(guarded.required - set(arguments))
    if missing:
        message = (
            f"{spec.tool} was not sent: it needs {', '.join(missing)}; "
            "call it again with every required argument"
        )
        return Refused(message, None, retry_safe=True)
    return None


@dataclass(frozen=True, slots=True)
class _Guarded:
    """A write tool as the proxy runs it: its contract for the executor, and what it sends."""

    spec: ToolContract
    contract: EffectContract
    required: frozenset[str]


class GuardingProxy:
    """The tools of one upstream session, the write tools among them guarded by ``executor``.

    :meth:`list_tools` is the upstream's listing (a guarded tool without its
    idempotency key argument); :meth:`call_tool` forwards a read untouched and
    runs a write through the ledger. The contracts must have passed
    :func:`check_contracts` against ``tools``.
    """

    def __init__(
        self,
        upstream: Client,
        tools: Sequence[Tool],
        contracts: Mapping[str, ToolContract],
        executor: EffectExecutor,
    ) -> None:
        self._upstream = upstream
        self._executor = executor
        #: Set once the upstream's connection is seen closed: nothing is recorded or sent after.
        self.upstream_closed = False
        self._guarded: dict[str, _Guarded] = {}
        listed = {tool.name: tool for tool in tools}
        for name, spec in contracts.items():
            _, required = _properties(listed[name])
            required.discard(spec.idempotency_key_argument or "")
            self._guarded[name] = _Guarded(spec, self._contract(spec), frozenset(required))
        self._tools = [self._presented(tool) for tool in tools]

    def _presented(self, tool: Tool) -> Tool:
        guarded = self._guarded.get(tool.name)
        key_argument = None if guarded is None else guarded.spec.idempotency_key_argument
        if key_argument is None:
            return tool
        schema = dict(tool.input_schema)
        properties = dict(schema.get("properties") or {})
        properties.pop(key_argument, None)
        schema["properties"] = properties
        if isinstance(schema.get("required"), list):
            schema["required"] = [name for name in schema["required"] if name != key_argument]
        return tool.model_copy(update={"input_schema": schema})

    def _contract(self, spec: ToolContract) -> EffectContract:
        operation_template = spec.operation_id

        def operation_id(arguments: Mapping[str, Any]) -> str:
            return operation_template.format_map(arguments)

        key: Callable[[Mapping[str, Any]], str] | None = None
        if spec.idempotency_key_argument is not None:
            key_template = spec.idempotency_key

            def provider_key(arguments: Mapping[str, Any]) -> str:
                if key_template is None:
                    return operation_id(arguments)
                values = {**arguments, "operation_id": operation_id(arguments)}
                return key_template.format_map(values)

            key = provider_key
        probe: Callable[..., Any] | None = None
        if spec.probe is not None:
            lookup = spec.probe

            async def look_up(
                arguments: Mapping[str, Any], *, idempotency_key: str | None
            ) -> OutcomeProbeResult:
                found = operation_id(arguments)
                # A lookup that never answers is a probe that raised: UNKNOWN, with the reason.
                with anyio.fail_after(spec.timeout):
                    return await self._probe(lookup, found, arguments, idempotency_key)

            probe = look_up
        return EffectContract(
            name=spec.tool,
            version=spec.version,
            operation_id=operation_id,
            provider_idempotency_key=key,
            provider_idempotency_guaranteed=spec.idempotency_guaranteed,
            outcome_probe=probe,
            handler_timeout=spec.timeout,
            max_attempts=spec.max_attempts,
            redact=frozenset(spec.redact),
            wait_for_peer=spec.timeout,
            requires_approval=spec.requires_approval,
        )

    async def _probe(
        self,
        lookup: ProbeSpec,
        operation_id: str,
        arguments: Mapping[str, Any],
        idempotency_key: str | None,
    ) -> OutcomeProbeResult:
        values = {**arguments, "operation_id": operation_id, "idempotency_key": idempotency_key}
        sent = {name: _render(template, values) for name, template in lookup.arguments.items()}
        result = await self._upstream.call_tool(lookup.tool, sent)
        # Stored as evidence; the executor masks the values of redacted arguments in it.
        evidence: dict[str, Any] = {"probe": lookup.tool, "arguments": sent}
        if result.is_error:
            return OutcomeProbeResult.unknown({**evidence, "error": _text(result)})
        answer = _answer(result)
        found, value = _dig(answer, lookup.answer_field)
        evidence["field"] = ".".join(lookup.answer_field)
        evidence["value"] = value if found else None
        if found and _among(value, lookup.committed):
            output = result
            if lookup.output is not None:
                has, part = _dig(answer, lookup.output)
                if not has:
                    return OutcomeProbeResult.unknown(
                        {**evidence, "error": f"no {'.'.join(lookup.output)} in the answer"}
                    )
                text = TextContent(type="text", text=json.dumps(part, sort_keys=True))
                output = CallToolResult(content=[text], structured_content=part)
            provider_id = None
            if lookup.provider_id is not None:
                has, ident = _dig(answer, lookup.provider_id)
                provider_id = str(ident) if has and ident is not None else None
            return OutcomeProbeResult.committed(
                _dump(output), provider_operation_id=provider_id, evidence=evidence
            )
        if found and _among(value, lookup.not_found):
            return OutcomeProbeResult.not_committed(evidence)
        if found and _among(value, lookup.pending):
            return OutcomeProbeResult.pending(evidence)
        return OutcomeProbeResult.unknown(evidence)

    async def check_upstream(self) -> bool:
        """Ask the upstream for its tools; False (and :attr:`upstream_closed`) once it is gone.

        Only a closed connection counts: any other failure of the question
        leaves the upstream presumed alive.
        """
        try:
            await self._upstream.list_tools(cache_mode="bypass")
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self.upstream_closed = True
            else:
                logger.debug("MCP proxy: the upstream's tools/list failed: %s", exc)
        return not self.upstream_closed

    async def list_tools(self) -> list[Tool]:
        """The upstream's tools as the client sees them."""
        return list(self._tools)

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, request_id: str
    ) -> CallToolResult:
        """Forward a read as it is; run a write tool's call through the ledger."""
        guarded = self._guarded.get(name)
        given = dict(arguments or {})
        if guarded is not None and not self.upstream_closed:
            # A request first: an error answer to a call that could never have been sent looks
            # like one to a call in flight (CONNECTION_CLOSED both), and only the second is a
            # write whose outcome is unknown.
            await self.check_upstream()
        if self.upstream_closed:
            message = (
                f"{name} was not sent: the connection to the upstream server is closed and "
                "this proxy is stopping; call it again once the host has restarted it"
            )
            return refused_result(Refused(message, None, retry_safe=True))
        if guarded is None:
            try:
                return await self._upstream.call_tool(name, given)
            except MCPError as exc:
                if exc.code != CONNECTION_CLOSED:
                    raise
                self.upstream_closed = True
                message = f"{name}: the connection to the upstream server closed; call it again"
                return refused_result(Refused(message, None, retry_safe=True))
        return await self._guarded_call(guarded, given, request_id)

    async def _guarded_call(
        self, guarded: _Guarded, arguments: dict[str, Any], request_id: str
    ) -> CallToolResult:
        spec = guarded.spec
        early = _refused_early(guarded, arguments)
        if early is not None:
            return refused_result(early)

        handler = self._handler(spec)
        try:
            result: EffectResult[Any] = await self._executor.execute_async(
                guarded.contract, arguments, handler
            )
        except (OperationConflictError, OutputNotStored) as exc:
            return refused_result(_refusal(exc, spec.tool))
        except LedgerError as exc:
            logger.exception("MCP proxy: %s could not be run: the effect ledger failed", spec.tool)
            message = (
                f"{spec.tool}: the effect ledger failed ({exc}). Do not report it as done; "
                "retry this call later with the same arguments: the ledger settles it first"
            )
            return refused_result(Refused(message, None, retry_safe=False, error=exc))
        return await self._answer(spec, result, request_id)

    async def _answer(
        self, spec: ToolContract, result: EffectResult[Any], request_id: str
    ) -> CallToolResult:
        """What the client sees of ``result``: the output, a pause, or a refusal."""
        if result.status is EffectStatus.AWAITING_APPROVAL:
            return await self._awaiting_approval(spec, result, request_id)
        outcome = classify(
            None, result, tool=spec.tool, tool_call_id=request_id, ledger=self._executor.ledger
        )
        if isinstance(outcome, Confirmed):
            return _result_of(outcome.output)
        if isinstance(outcome, Pending):
            logger.warning(
                "MCP proxy: %s: operation %s is %s; the client was told to retry later",
                spec.tool,
                outcome.effect.operation_id,
                outcome.effect.status.value,
            )
            return pending_result(outcome)
        return refused_result(outcome)

    async def _awaiting_approval(
        self, spec: ToolContract, result: EffectResult[Any], request_id: str
    ) -> CallToolResult:
        """The approval payload of a request nothing was sent for: as the ledger holds it."""
        ledger = self._executor.ledger
        try:
            record = await anyio.to_thread.run_sync(ledger.get, result.operation_id)
        except LedgerError as exc:
            logger.exception("MCP proxy: %s: the approval request could not be read", spec.tool)
            message = (
                f"{spec.tool} was not sent: operation {result.operation_id} awaits a person's "
                f"approval, and the effect ledger failed while it was read ({exc}); retry this "
                "call later with the same arguments"
            )
            return refused_result(Refused(message, None, retry_safe=False, error=exc))
        if record is None or record.status is not EffectStatus.AWAITING_APPROVAL:
            # Approved or denied between the call and this read: the next call finds which.
            message = (
                f"{spec.tool}: operation {result.operation_id} was approved or denied while "
                "this call returned; call it again with the same arguments to learn which"
            )
            return refused_result(Refused(message, None, retry_safe=True))
        count = record.event_count
        approval = ApprovalRequest(
            tool=spec.tool,
            tool_call_id=request_id,
            operation_id=record.operation_id,
            arguments=dict(record.arguments),
            event_count=count,
            approve_command=ledger_command(ledger, "approve", record.operation_id, count),
            deny_command=ledger_command(ledger, "deny", record.operation_id, count),
            reason=result.reason,
            fingerprint=record.fingerprint,
        )
        logger.warning(
            "MCP proxy: %s: operation %s awaits a person's approval; nothing was sent",
            spec.tool,
            record.operation_id,
        )
        return approval_result(approval)

    def _handler(self, spec: ToolContract) -> Callable[..., Any]:
        """The executor's handler of ``spec``'s tool: the call upstream, the key filled in."""

        async def handler(sent: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
            request = dict(sent)
            if spec.idempotency_key_argument is not None:
                request[spec.idempotency_key_argument] = idempotency_key
            try:
                result = await self._upstream.call_tool(spec.tool, request)
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED:
                    self.upstream_closed = True
                raise
            if result.is_error:
                text = _text(result) or "no message"
                if spec.upstream_error == "rejected":
                    raise EffectRejected(f"the upstream refused it: {text}")
                msg = f"the upstream answered with an error, which is no proof of no effect: {text}"
                raise UpstreamToolError(msg)
            return _dump(result)

        return handler

    def server(self, name: str = "effectguard-mcp-proxy") -> Server[Any]:
        """A low-level MCP server answering ``tools/list`` and ``tools/call`` with this proxy."""

        async def on_list_tools(
            _ctx: Any, _params: PaginatedRequestParams | None
        ) -> ListToolsResult:
            return ListToolsResult(tools=await self.list_tools())

        async def on_call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
            return await self.call_tool(params.name, params.arguments, str(ctx.request_id))

        return Server(name, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def upstream_client(upstream: str, *, cwd: str | None = None) -> Client:
    """A client of ``upstream``: an ``http(s)://`` URL (streamable HTTP), else a command line.

    The command is split like a shell would (``shlex``) and started with this
    process's environment, so what the host gave the proxy reaches the server.
    """
    if upstream.startswith(("http://", "https://")):
        return Client(upstream)
    command = shlex.split(upstream)
    if not command:
        msg = "--upstream is empty: give a command line or an http(s):// URL"
        raise ConfigurationError(msg)
    parameters = StdioServerParameters(
        command=command[0], args=command[1:], env=dict(os.environ), cwd=cwd
    )
    return Client(parameters)


async def _all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def serve(
    contracts_path: str | os.PathLike[str],
    upstream: str,
    ledger: str | EffectLedger,
    *,
    contracts: Mapping[str, ToolContract] | None = None,
) -> None:
    """Check the contracts against the upstream's tools, then serve the proxy over stdio.

    Raises :class:`ContractsError` (every problem, one line each) before the
    ledger is opened or anything is served when the contracts do not fit the
    upstream's tools; only ``tools/list`` was sent upstream by then. Raises
    :class:`UpstreamClosedError` when the upstream's connection closes (its
    process exited): from then on every call was refused unsent, and a host
    that restarts the proxy gets a fresh connection.
    """
    checked = load_contracts(contracts_path) if contracts is None else contracts
    closed = False
    async with contextlib.AsyncExitStack() as stack:
        client = upstream_client(upstream)
        try:
            await stack.enter_async_context(client)
            tools = await _all_tools(client)
        except Exception as exc:
            msg = f"cannot reach the upstream ({upstream}): {_innermost(exc)}"
            raise UpstreamClosedError(msg) from exc
        problems = check_contracts(contracts_path, checked, tools)
        if not problems:
            closed = await _serve_checked(client, tools, checked, ledger)
    # Raised out here: inside, the client's task group would wrap it in an exception group.
    if problems:
        raise ContractsError(problems)
    if closed:
        msg = (
            f"the upstream ({upstream}) closed its connection; nothing more was sent. "
            "Start the proxy again: the ledger holds every guarded call"
        )
        raise UpstreamClosedError(msg)


def _innermost(error: BaseException) -> BaseException:
    """The first error an exception group holds (anyio's task groups wrap what they raise)."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def _watch(proxy: GuardingProxy, scope: anyio.CancelScope) -> None:
    """Ask after the upstream; once its connection is closed, refuse every call and stop serving.

    Without this, a proxy whose upstream died would go on recording writes it
    can no longer send, each an unknown outcome for an operator to settle.
    """
    while await proxy.check_upstream():  # noqa: ASYNC110 - the closed connection has no event to await
        await anyio.sleep(WATCH_INTERVAL)
    logger.error("MCP proxy: the upstream closed its connection; stopping")
    scope.cancel()


async def _serve_checked(
    client: Client,
    tools: Sequence[Tool],
    contracts: Mapping[str, ToolContract],
    ledger: str | EffectLedger,
) -> bool:
    """Serve until the client ends the session (False) or the upstream's connection closes."""
    opened = open_ledger(ledger)
    try:
        proxy = GuardingProxy(client, tools, contracts, EffectExecutor(opened))
        server = proxy.server()
        logger.info("MCP proxy: %d tools, guarding %s", len(tools), ", ".join(sorted(contracts)))
        async with anyio.create_task_group() as group:
            group.start_soon(_watch, proxy, group.cancel_scope)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            group.cancel_scope.cancel()  # the client ended the session
    finally:
        if opened is not ledger:
            opened.close()
    return proxy.upstream_closed
