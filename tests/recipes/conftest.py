"""Fixtures for the recipe tests: the recipes loaded from their files, and a lent executor."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from effectguard import EffectExecutor, use_executor

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _load(name: str) -> ModuleType:
    """Import ``recipes/<name>.py`` as the module ``recipes_<name>``."""
    spec = importlib.util.spec_from_file_location(f"recipes_{name}", RECIPES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def payments_recipe() -> ModuleType:
    """``recipes/payments.py``, as a user's code would import it."""
    return _load("payments")


@pytest.fixture(scope="session")
def email_recipe() -> ModuleType:
    """``recipes/email_smtp.py``, as a user's code would import it."""
    return _load("email_smtp")


@pytest.fixture
def executor(ledger) -> Iterator[EffectExecutor]:
    """An executor over this test's ledger, lent to every tool the test calls."""
    executor = EffectExecutor(ledger)
    with use_executor(executor):
        yield executor


@dataclasses.dataclass(frozen=True)
class Certificates:
    """A throwaway CA and a server certificate it signed for IP 127.0.0.1."""

    ca: Path
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        """A server-side TLS context presenting the server certificate."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert, self.server_key)
        return context


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A CA and a server certificate made with the openssl command for this test session."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make test certificates")
    directory = tmp_path_factory.mktemp("tls")
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, csr = directory / "server.pem", directory / "server.key", directory / "server.csr"
    extensions = directory / "server.ext"
    extensions.write_text(
        "subjectAltName = IP:127.0.0.1\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        "extendedKeyUsage = serverAuth\n"
        "authorityKeyIdentifier = keyid\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_extensions = [
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    ]
    commands = [
        [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=effectguard test CA", *ca_extensions],
        [openssl, "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        [openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", extensions],
    ]  # fmt: skip
    for command in commands:
        subprocess.run([str(part) for part in command], check=True, capture_output=True)
    return Certificates(ca, cert, key)
