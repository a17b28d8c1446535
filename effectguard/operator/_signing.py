"""Signed exports: a ledger's histories that anyone with the public key can check later.

The hash chains and the claims anchor prove order inside one ledger, but whoever
can rewrite the whole ledger file can rewrite its anchor too. A signed export
closes that gap from outside: ``agent-effect-ops export --sign-key KEY`` writes
the operations and their events as JSON lines, then one last ``signature`` line
holding the SHA-256 of every byte before it, their line count, the ledger's
anchor head at the time, and an Ed25519 signature over all of that.

:func:`check_signed` fails on any edited, deleted, reordered or appended line
and on a truncated file; :func:`compare_with_ledger` then finds what the ledger
no longer holds of what was signed (an event rewritten, an operation deleted
without a tombstone, an anchor that no longer extends the signed head).

What a signature does **not** prove: that the export was true when it was
signed. Whoever holds the private key can sign a forgery; keep the key where the
ledger's writers cannot reach it, and the public key with whoever checks.

Signing needs the ``cryptography`` package (the ``sign`` extra).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from effectguard._model import VerifyProblem
from effectguard.errors import ConfigurationError, InvalidRequestError
from effectguard.ledger._chain import AnchorHead

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from effectguard.ledger._protocol import EffectLedger

__all__ = [
    "FORMAT",
    "SignedExport",
    "Signer",
    "check_signed",
    "compare_with_ledger",
    "generate_key_pair",
    "key_id",
    "load_private_key",
    "load_public_key",
]

#: The ``format`` of a signed export's signature line.
FORMAT = "effectguard-signed-export/1"
_ALGORITHM = "ed25519"
_INSTALL = "signing needs the cryptography package: pip install 'effectguard[sign]'"


def _ed25519() -> Any:
    """The ``cryptography`` Ed25519 module, or a ConfigurationError saying how to install it."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415 - optional: the sign extra
    except ImportError as exc:
        raise ConfigurationError(_INSTALL) from exc
    return ed25519


def _serialization() -> Any:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - loaded on use

    return serialization


def generate_key_pair() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair: the private key as unencrypted PKCS#8 PEM, the public as PEM.

    The private key's file must be readable by its owner alone; whoever reads it
    can sign an export in this ledger's name.
    """
    key = _ed25519().Ed25519PrivateKey.generate()
    serialization = _serialization()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def load_private_key(data: bytes, source: str) -> Ed25519PrivateKey:
    """The Ed25519 private key in PEM ``data``; InvalidRequestError naming ``source`` if not."""
    ed25519 = _ed25519()
    try:
        key = _serialization().load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        msg = f"{source} is not an unencrypted PEM private key (agent-effect-ops keygen makes one)"
        raise InvalidRequestError(msg) from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        msg = f"{source} holds a {type(key).__name__}, not an Ed25519 private key"
        raise InvalidRequestError(msg)
    return key  # type: ignore[no-any-return]  # checked just above


def load_public_key(data: bytes, source: str) -> Ed25519PublicKey:
    """The Ed25519 public key in PEM ``data``; InvalidRequestError naming ``source`` if not."""
    ed25519 = _ed25519()
    try:
        key = _serialization().load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        msg = f"{source} is not a PEM public key (keygen writes one beside the private key)"
        raise InvalidRequestError(msg) from exc
    if not isinstance(key, ed25519.Ed25519PublicKey):
        msg = f"{source} holds a {type(key).__name__}, not an Ed25519 public key"
        raise InvalidRequestError(msg)
    return key  # type: ignore[no-any-return]  # checked just above


def key_id(public: Ed25519PublicKey) -> str:
    """A short name of ``public``: the first 16 hex digits of the SHA-256 of its raw bytes."""
    serialization = _serialization()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _payload(manifest: dict[str, Any]) -> bytes:
    """The bytes a signature covers: the signature line's fields but the signature, canonically."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


class Signer:
    """Hashes the lines of an export as they are written, then signs them in a last line."""

    __slots__ = ("_digest", "_key", "_lines", "key_id")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self._digest = hashlib.sha256()
        self._lines = 0
        self.key_id = key_id(key.public_key())

    def line(self, text: str) -> str:
        """Return ``text`` with its newline, counted into the signature."""
        out = text + "\n"
        self._digest.update(out.encode("utf-8"))
        self._lines += 1
        return out

    def signature_line(self, anchor: AnchorHead | None, exported_at: str) -> str:
        """The last line of the export: what was written, the ledger's anchor, the signature."""
        manifest: dict[str, Any] = {
            "kind": "signature",
            "format": FORMAT,
            "algorithm": _ALGORITHM,
            "key_id": self.key_id,
            "lines": self._lines,
            "sha256": self._digest.hexdigest(),
            "anchor": None if anchor is None else anchor.to_json(),
            "exported_at": exported_at,
        }
        signature = self._key.sign(_payload(manifest))
        manifest["signature"] = base64.b64encode(signature).decode("ascii")
        return json.dumps(manifest, sort_keys=True, ensure_ascii=True) + "\n"


@dataclass(frozen=True)
class SignedExport:
    """What :func:`check_signed` read: the signature's claims, the operations, any problem.

    ``problems`` is empty exactly when every line is the one that was signed,
    in its place, and nothing is missing or added. ``operations`` maps each
    exported operation id to the hashes of its exported events, in order.
    """

    lines: int
    key_id: str | None
    exported_at: str | None
    anchor: AnchorHead | None
    operations: dict[str, list[str]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the export is exactly what the holder of the key signed."""
        return not self.problems


@dataclass
class _Read:
    """One pass over an export's lines: what the signature should cover, and what follows."""

    digest: Any = field(default_factory=hashlib.sha256)
    count: int = 0
    signature: bytes | None = None
    after: int = 0
    operations: dict[str, list[str]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)

    def take(self, number: int, raw: bytes) -> None:
        if self.signature is not None:
            self.after += 1
            return
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("kind") == "signature":
            self.signature = raw
            return
        self.digest.update(raw)
        self.count += 1
        operation_id = data.get("operation_id") if isinstance(data, dict) else None
        if not isinstance(data, dict):
            self.unreadable.append(f"line {number} is not a JSON object")
        elif isinstance(operation_id, str) and data.get("kind") == "operation":
            self.operations.setdefault(operation_id, [])
        elif isinstance(operation_id, str) and data.get("kind") == "event":
            self.operations.setdefault(operation_id, []).append(str(data.get("hash")))


def _problems(
    read: _Read,
    manifest: dict[str, Any],
    signature: bytes,
    public: Ed25519PublicKey,
    claimed: tuple[object, object],
) -> list[str]:
    """What is wrong with an export whose lines gave ``read`` and whose last line ``manifest``."""
    claimed_lines, claimed_sha = claimed
    problems: list[str] = []
    signer, given = manifest.get("key_id"), key_id(public)
    if manifest.get("format") != FORMAT or manifest.get("algorithm") != _ALGORITHM:
        problems.append(f"the signature line is not {FORMAT} with {_ALGORITHM}")
    try:
        public.verify(signature, _payload(manifest))
    except _invalid_signature():
        if signer != given:
            problems.append(f"signed by key {signer}, not by the public key given ({given})")
        else:
            problems.append("the signature line was edited: its signature does not match it")
    if claimed_lines != read.count:
        problems.append(
            f"the signature covers {claimed_lines} lines, the file has {read.count} before it"
            " (lines deleted or added)"
        )
    elif claimed_sha != read.digest.hexdigest():
        problems.append("the lines differ from the ones signed (a line edited or reordered)")
    if read.after:
        problems.append(f"{read.after} line(s) follow the signature: added after signing")
    problems.extend(read.unreadable)
    return problems


def check_signed(lines: Iterable[bytes], public: Ed25519PublicKey) -> SignedExport:
    """Check the export in ``lines`` (bytes, as read from its file) against ``public``.

    A file with no line at all raises InvalidRequestError; an export that does
    not match its signature is returned with its problems.
    """
    _ed25519()  # the package's absence is said before the file is read
    read = _Read()
    for number, raw in enumerate(lines, start=1):
        read.take(number, raw)
    if read.signature is None:
        if read.count == len(read.unreadable):
            msg = "not an export: no line of it is a JSON object"
            raise InvalidRequestError(msg)
        problem = "no signature line: the export was truncated, or was written without --sign-key"
        return SignedExport(read.count, None, None, None, read.operations, (problem,))
    manifest = json.loads(read.signature)
    try:
        signature = base64.b64decode(manifest.pop("signature"), validate=True)
        anchor = manifest.get("anchor")
        anchor = None if anchor is None else AnchorHead.from_json(anchor)
        claimed_lines, claimed_sha = manifest["lines"], manifest["sha256"]
    except (KeyError, TypeError, ValueError, InvalidRequestError) as exc:
        problem = f"the signature line is malformed ({exc})"
        return SignedExport(read.count, None, None, None, read.operations, (problem,))
    problems = _problems(read, manifest, signature, public, (claimed_lines, claimed_sha))
    signer = manifest.get("key_id")
    exported_at = manifest.get("exported_at")
    return SignedExport(
        read.count,
        signer if isinstance(signer, str) else None,
        exported_at if isinstance(exported_at, str) else None,
        anchor,
        read.operations,
        tuple(problems),
    )


def _invalid_signature() -> type[Exception]:
    _ed25519()
    from cryptography.exceptions import InvalidSignature  # noqa: PLC0415 - loaded on use

    return InvalidSignature


def compare_with_ledger(signed: SignedExport, ledger: EffectLedger) -> list[VerifyProblem]:
    """What ``ledger`` no longer holds of a checked export: one problem per operation.

    Each exported event must still be in the ledger with the hash it was
    exported with (later events may follow); an exported operation that is gone
    must have left a tombstone (a prune). Whether the ledger's claims anchor
    still extends the head the export signed is :meth:`EffectLedger.verify`'s
    check, given ``signed.anchor``.
    """
    problems: list[VerifyProblem] = []
    tombstone = getattr(ledger, "tombstone", None)
    for operation_id, hashes in signed.operations.items():
        held = [event.hash.hex() for event in ledger.events(operation_id)]
        if not held:
            if tombstone is None or tombstone(operation_id) is None:
                problems.append(
                    VerifyProblem(
                        operation_id, None, "in the signed export but gone from the ledger"
                    )
                )
            continue
        for seq, exported in enumerate(hashes, start=1):
            if seq > len(held):
                problem = f"the ledger holds {len(held)} events, the signed export {len(hashes)}"
                problems.append(VerifyProblem(operation_id, None, problem))
                break
            if held[seq - 1] != exported:
                problems.append(
                    VerifyProblem(operation_id, seq, "differs from the event the export signed")
                )
                break
    return problems
