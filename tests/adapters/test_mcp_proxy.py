"""``agent-effect-mcp-proxy`` in front of a payments MCP server, through a real MCP client.

Every test starts the proxy as a process (the client talks to it over stdio,
as a host would), and the proxy starts the upstream (mcp_payments_upstream.py)
the same way. Payments are counted at the upstream's fake provider, in files
the test reads itself: the ground truth, whatever the proxy reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from effect_shop import confirm_with_cli
from extras_support import import_extra

from effectguard import open_ledger
from effectguard.testkit import FakePaymentProvider

mcp = import_extra("mcp", "mcp")

from mcp import Client, StdioServerParameters  # noqa: E402 - after the extra's check

pytestmark = pytest.mark.timeout(60)

UPSTREAM = Path(__file__).with_name("mcp_payments_upstream.py")
PROXY = str(Path(sys.executable).with_name("agent-effect-mcp-proxy"))
META_KEY = "io.effectguard/effect"
I1 = {"invoice_id": "INV-1", "amount_cents": 1999}

#: Keyed, deduplicated by the upstream, and looked up by key when an answer is lost.
GUARDED = """
[tools.create_payment]
operation_id = "payment:{invoice_id}"
idempotency_key_argument = "idempotency_key"
idempotency_key = "pay-{invoice_id}"
idempotency_guaranteed = %(guaranteed)s
timeout = %(timeout)s

[tools.create_payment.probe]
tool = "find_payment"
arguments = { reference = "{idempotency_key}" }
field = "status"
committed = ["succeeded"]
not_found = ["not_found"]
pending = ["processing"]
output = "payment"
provider_id = "payment.id"
"""

#: No key, no probe: a lost answer can only be settled by an operator.
UNPROBED = """
[tools.create_payment]
operation_id = "payment:{invoice_id}"
"""


def guarded(*, guaranteed: bool = True, timeout: float = 10) -> str:
    return GUARDED % {"guaranteed": str(guaranteed).lower(), "timeout": timeout}


def upstream_command(directory: Path, *flags: str) -> str:
    return shlex.join([sys.executable, str(UPSTREAM), str(directory), *flags])


def proxy(
    directory: Path,
    contracts: str,
    *flags: str,
    ledger: str | None = None,
    upstream: str | None = None,
) -> StdioServerParameters:
    """The proxy over the upstream in ``directory`` (with ``flags``), as a host starts it."""
    path = directory / "contracts.toml"
    path.write_text(contracts, encoding="utf-8")
    return StdioServerParameters(
        command=PROXY,
        args=[
            "--contracts",
            str(path),
            "--upstream",
            upstream or upstream_command(directory, *flags),
            "--db",
            ledger or str(directory / "ledger.db"),
        ],
        env=dict(os.environ),
    )


def payments(directory: Path) -> FakePaymentProvider:
    """The upstream's provider, read from its files: what really committed."""
    return FakePaymentProvider(path=directory / "payments.db")


def committed(directory: Path) -> int:
    provider = payments(directory)
    try:
        return provider.committed()
    finally:
        provider.close()


async def calls(server: Any, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each request in turn, in one client session."""
    async with Client(server) as client:
        return [await client.call_tool(name, arguments) for name, arguments in requests]


def kill_both(directory: Path) -> None:
    """SIGKILL the proxy (the upstream's parent) and the upstream it started."""
    pids = json.loads((directory / "upstream.json").read_text(encoding="utf-8"))
    for pid in (pids["ppid"], pids["pid"]):
        if pid == os.getpid():
            continue  # an upstream the test started itself
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    if (tmp_path / "upstream.json").exists():
        kill_both(tmp_path)  # nothing outlives a failed test


def test_tools_are_the_upstreams_and_reads_pass_through(directory):
    """The listing is the upstream's (minus the key the proxy fills); a read is forwarded as is."""

    async def both() -> tuple[Any, Any, Any, Any]:
        async with Client(proxy(directory, guarded())) as client:
            via = (await client.list_tools()).tools
            read = await client.call_tool("list_payments", {})
        alone = directory / "direct"
        alone.mkdir()
        upstream = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM), str(alone)])
        async with Client(upstream) as client:
            direct = (await client.list_tools()).tools
            direct_read = await client.call_tool("list_payments", {})
        return via, read, direct, direct_read

    via, read, direct, direct_read = asyncio.run(both())
    assert [tool.name for tool in via] == [tool.name for tool in direct]
    shown, original = {t.name: t for t in via}, {t.name: t for t in direct}
    for name in ("find_payment", "list_payments"):
        assert shown[name].model_dump() == original[name].model_dump()
    assert shown["create_payment"].description == original["create_payment"].description
    schema = dict(original["create_payment"].input_schema)
    schema["properties"] = dict(schema["properties"])
    del schema["properties"]["idempotency_key"]
    assert shown["create_payment"].input_schema == schema
    assert read.model_dump() == direct_read.model_dump()
    assert read.structured_content["count"] == 0
    assert not (directory / "ledger.db").exists() or committed(directory) == 0


def test_client_retries_make_one_payment(directory):
    """Three calls in one session and one in the next return the first answer; one payment."""
    server = proxy(directory, guarded())
    first = asyncio.run(calls(server, *[("create_payment", I1)] * 3))
    later = asyncio.run(calls(server, ("create_payment", I1)))
    results = [*first, *later]
    assert all(not result.is_error for result in results)
    answers = [result.structured_content for result in results]
    assert answers[0]["invoice_id"] == "INV-1"
    assert answers == [answers[0]] * 4
    provider = payments(directory)
    assert provider.committed() == 1
    assert provider.attempts() == 1  # replays never reached the upstream
    assert provider.effects()[0]["response"]["id"] == answers[0]["id"]
    provider.close()


def test_two_identical_calls_at_once_make_one_payment(directory):
    """Two identical calls in flight together share one dispatch."""

    async def at_once() -> list[Any]:
        async with Client(proxy(directory, guarded())) as client:
            return list(
                await asyncio.gather(
                    client.call_tool("create_payment", I1), client.call_tool("create_payment", I1)
                )
            )

    results = asyncio.run(at_once())
    assert [result.is_error for result in results] == [False, False]
    assert results[0].structured_content == results[1].structured_content
    assert committed(directory) == 1


def test_a_different_request_under_one_operation_is_refused(directory):
    """The same invoice with another amount is a final tool error; nothing more is sent."""
    server = proxy(directory, guarded())
    first, second = asyncio.run(
        calls(
            server,
            ("create_payment", I1),
            ("create_payment", {"invoice_id": "INV-1", "amount_cents": 5}),
        )
    )
    assert not first.is_error
    assert second.is_error
    assert "do not retry" in second.content[0].text
    assert "payment:INV-1" in second.content[0].text
    assert committed(directory) == 1


def test_a_client_sending_the_key_itself_is_refused(directory):
    """The idempotency key is the proxy's: a client's own is refused before anything is sent."""
    server = proxy(directory, guarded())
    (result,) = asyncio.run(calls(server, ("create_payment", {**I1, "idempotency_key": "mine"})))
    assert result.is_error
    assert "filled by the effect guard" in result.content[0].text
    assert committed(directory) == 0


def test_the_probe_reconciles_a_lost_answer(directory):
    """The upstream commits and the answer is lost; the lookup confirms it; one payment."""
    server = proxy(directory, guarded(guaranteed=False), "lose-ack", "no-dedupe")
    first, retry = asyncio.run(calls(server, ("create_payment", I1), ("create_payment", I1)))
    assert not first.is_error, first.content[0].text
    assert first.structured_content["invoice_id"] == "INV-1"
    assert retry.structured_content == first.structured_content
    provider = payments(directory)
    assert provider.committed() == 1
    assert provider.attempts() == 1
    provider.close()


def test_a_guaranteed_key_resends_a_lost_answer_safely(directory):
    """Without a probe verdict, the same key is resent; the upstream deduplicates: one payment."""
    contracts = guarded().split("[tools.create_payment.probe]")[0]
    server = proxy(directory, contracts, "lose-ack")
    (result,) = asyncio.run(calls(server, ("create_payment", I1)))
    assert not result.is_error, result.content[0].text
    provider = payments(directory)
    assert provider.committed() == 1
    assert provider.attempts() == 2  # the resend reached the upstream, which deduplicated it
    provider.close()


def wait_for(condition: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting")
        time.sleep(0.05)


@pytest.mark.slow
def test_a_proxy_killed_while_the_answer_is_lost_settles_on_the_retry(directory):
    """Upstream commits, never answers, the proxy is SIGKILLed; a new proxy's retry confirms it."""
    contracts = guarded(guaranteed=False, timeout=25)

    async def first_call() -> None:
        async with Client(proxy(directory, contracts, "hang", "no-dedupe")) as client:
            call = asyncio.ensure_future(client.call_tool("create_payment", I1))
            await asyncio.to_thread(wait_for, lambda: committed(directory) == 1)
            await asyncio.to_thread(kill_both, directory)
            with suppress(Exception):
                await call

    with suppress(Exception, BaseExceptionGroup):
        asyncio.run(first_call())
    assert committed(directory) == 1
    (retry,) = asyncio.run(calls(proxy(directory, contracts, "no-dedupe"), ("create_payment", I1)))
    assert not retry.is_error, retry.content[0].text
    assert retry.structured_content["invoice_id"] == "INV-1"
    provider = payments(directory)
    assert provider.committed() == 1
    assert provider.attempts() == 1  # settled by the lookup, never resent
    provider.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_unsettled_payment_waits_for_the_operator_across_a_restart(directory, backend, request):
    """No key, no probe: a lost answer pauses; a killed and restarted proxy sends nothing more."""
    ledger = str(directory / "ledger.db")
    if backend == "postgres":
        ledger = request.getfixturevalue("postgres_target")
    server = proxy(directory, UNPROBED, "lose-ack", "no-dedupe", ledger=ledger)

    async def paused_then_killed() -> Any:
        async with Client(server) as client:
            result = await client.call_tool("create_payment", I1)
            await asyncio.to_thread(kill_both, directory)
            return result

    try:
        paused = asyncio.run(paused_then_killed())
    except BaseException as exc:
        pytest.fail(f"the first call did not return: {exc!r}")
    assert paused.is_error
    payload = paused.meta[META_KEY]
    assert payload["operation_id"] == "payment:INV-1"
    assert payload["status"] == "QUARANTINED"
    assert "agent-effect-ops --db" in payload["operator_command"]
    assert paused.structured_content == payload
    assert "Do not report it as done" in paused.content[0].text

    (again,) = asyncio.run(calls(server, ("create_payment", I1)))
    assert again.is_error
    assert again.meta[META_KEY]["status"] == "QUARANTINED"
    assert committed(directory) == 1

    provider = payments(directory)
    answer = provider.effects()[0]["response"]
    assert provider.attempts() == 1
    provider.close()
    confirm_with_cli(ledger, "payment:INV-1", answer)
    (confirmed,) = asyncio.run(calls(server, ("create_payment", I1)))
    assert not confirmed.is_error
    assert confirmed.structured_content == answer
    assert committed(directory) == 1


BAD_CONTRACTS = {
    "not TOML": ("[tools.create_payment\n", "is not TOML"),
    "unknown key": (
        '[tools.create_payment]\noperation_id = "payment:{invoice_id}"\nretries = 3\n',
        "tools.create_payment.retries: unknown key",
    ),
    "unknown tool": (
        '[tools.refund_payment]\noperation_id = "refund:{invoice_id}"\n',
        "the upstream has no tool 'refund_payment'",
    ),
    "missing argument": (
        '[tools.create_payment]\noperation_id = "payment:{order_id}"\n',
        "names {order_id}, which create_payment does not require",
    ),
    "unknown probe tool": (
        (
            '[tools.create_payment]\noperation_id = "payment:{invoice_id}"\n'
            '[tools.create_payment.probe]\ntool = "lookup_payment"\nfield = "status"\n'
            'committed = ["succeeded"]\n'
        ),
        "the upstream has no tool 'lookup_payment' to look create_payment up with",
    ),
}


@pytest.mark.parametrize("mistake", sorted(BAD_CONTRACTS))
def test_a_contracts_file_with_a_mistake_is_refused_with_one_line(directory, mistake):
    """Each mistake: one line on stderr naming it, exit 2, no ledger, nothing sent upstream."""
    text, expected = BAD_CONTRACTS[mistake]
    path = directory / "contracts.toml"
    path.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [
            PROXY,
            "--contracts",
            str(path),
            "--upstream",
            upstream_command(directory),
            "--db",
            str(directory / "ledger.db"),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert expected in lines[0]
    assert str(path) in lines[0]
    assert done.stdout == ""
    assert not (directory / "ledger.db").exists()
    assert committed(directory) == 0


def test_every_mistake_of_a_file_is_listed(directory):
    """A file with several mistakes gets one line for each of them."""
    path = directory / "contracts.toml"
    path.write_text(
        '[tools.create_payment]\noperation_id = "payment:{order_id}"\n'
        '[tools.refund_payment]\noperation_id = "refund:{invoice_id}"\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            *(PROXY, "--contracts", str(path), "--upstream", upstream_command(directory)),
            *("--db", str(directory / "ledger.db")),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert "order_id" in lines[0]
    assert "refund_payment" in lines[1]


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie its parent has not reaped yet counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.slow
def test_a_dead_upstream_records_nothing_and_stops_the_proxy(directory):
    """The upstream dies: a write is refused unsent and unrecorded, and the proxy exits."""
    seen: list[Any] = []

    async def scenario() -> None:
        async with Client(proxy(directory, guarded())) as client:
            await client.list_tools()
            pids = json.loads((directory / "upstream.json").read_text(encoding="utf-8"))
            os.kill(pids["pid"], signal.SIGKILL)
            seen.extend([pids["ppid"], await client.call_tool("create_payment", I1)])
            await asyncio.to_thread(wait_for, lambda: gone(pids["ppid"]))

    with suppress(Exception, BaseExceptionGroup):  # the session of a proxy that exited
        asyncio.run(scenario())
    proxy_pid, result = seen
    assert result.is_error
    assert "was not sent" in result.content[0].text
    assert gone(proxy_pid)
    ledger = open_ledger(str(directory / "ledger.db"))
    assert ledger.get("payment:INV-1") is None
    ledger.close()
    assert committed(directory) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_a_streamable_http_upstream_is_guarded_the_same(directory):
    """Over streamable HTTP: the lost answer is found by the probe; a retry replays; one payment."""
    port = free_port()
    command = [sys.executable, str(UPSTREAM), str(directory), "lose-ack", "no-dedupe"]
    server = subprocess.Popen(
        [*command, f"http={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: listening(port))
        url = f"http://127.0.0.1:{port}/mcp"
        contracts = guarded(guaranteed=False)
        first, retry = asyncio.run(
            calls(proxy(directory, contracts, upstream=url), *[("create_payment", I1)] * 2)
        )
    finally:
        server.kill()
        server.wait(timeout=10)
    assert not first.is_error, first.content[0].text
    assert retry.structured_content == first.structured_content
    provider = payments(directory)
    assert provider.committed() == 1
    assert provider.attempts() == 1
    provider.close()


@pytest.mark.parametrize("upstream", ["http", "command"])
def test_an_upstream_that_cannot_be_reached_is_one_line(directory, upstream):
    """No server at the URL, or a command that does not exist: one line, exit 1, no ledger."""
    target = f"http://127.0.0.1:{free_port()}/mcp" if upstream == "http" else "no-such-server-x"
    path = directory / "contracts.toml"
    path.write_text(UNPROBED, encoding="utf-8")
    done = subprocess.run(
        [PROXY, "--contracts", str(path), "--upstream", target, "--db", str(directory / "l.db")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"cannot reach the upstream ({target})" in lines[0]
    assert not (directory / "l.db").exists()
