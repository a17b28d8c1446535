"""The fault matrix: randomized, seeded episodes across contract kinds, faults and crash points.

:func:`run_matrix` draws the episodes from the seed, runs them on the chosen
backend with the chosen number of worker processes, and scores them into a
:class:`~proofs.matrix.report.MatrixReport` (whose docstring
defines every count).
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from effectguard._executor._machine import seeded_jitter
from effectguard.testkit._crash.child import ChildRunner
from effectguard.testkit._crash.kinds import ContractKind
from effectguard.testkit.clock import SharedClock
from proofs.matrix import episode as _episode
from proofs.matrix.contention import FenceCounter
from proofs.matrix.context import EpisodeContext
from proofs.matrix.episode import LEDGER_FAULTS, CrashPoint, EpisodeResult
from proofs.matrix.replaced import ReplacePoint
from proofs.matrix.report import MatrixReport, Metrics
from proofs.matrix.site import Backend, Site, open_site
from proofs.matrix.workers import WorkerPool

__all__ = ["CrashPoint", "MatrixReport", "Metrics", "run_matrix"]

#: Where every matrix clock starts (epoch seconds), so runs are identical.
_EPOCH = 1_800_000_000.0


def run_matrix(
    episodes: int,
    seed: int,
    *,
    broken_contract: bool = False,
    ignore_ledger_refusal: bool = False,
    progress: Callable[[int], None] | None = None,
    backend: str = Backend.SQLITE,
    db: str | None = None,
    workers: int = 1,
) -> MatrixReport:
    """Run ``episodes`` episodes drawn from ``seed`` and count what the providers committed.

    ``backend`` is ``"sqlite"`` (a ledger file in a temporary directory) or
    ``"postgres"`` (a schema of its own in the database ``db`` names, dropped
    at the end). ``workers`` processes make every call round together (this
    one and ``workers - 1`` started for the run), contending for the same
    operations. ``broken_contract`` makes the guaranteed-key contract send a
    new key on every request while still declaring the guarantee, which the
    matrix must catch as duplicate effects. ``ignore_ledger_refusal`` makes a
    process whose ledger file was moved away or replaced answer the refusal
    the wrong way, by opening the path again and executing there, which the
    matrix must catch at the provider. ``progress`` is called with 1 after
    each episode.
    """
    if episodes < 1:
        msg = f"episodes must be >= 1, not {episodes!r}"
        raise ValueError(msg)
    if workers < 1:
        msg = f"workers must be >= 1, not {workers!r}"
        raise ValueError(msg)
    rng, side = random.Random(seed), random.Random(f"ledger-faults:{seed}")
    specs = [
        _episode.draw(number, rng, backend=backend, side=side) for number in range(1, episodes + 1)
    ]
    with tempfile.TemporaryDirectory(prefix="effectguard-matrix-") as tmp:
        workdir = Path(tmp)
        site = open_site(backend, workdir, db)
        try:
            results, verified = _run(
                specs,
                site,
                workdir,
                seed,
                workers,
                broken_contract=broken_contract,
                ignore_ledger_refusal=ignore_ledger_refusal,
                progress=progress,
            )
        finally:
            site.close()
    return _score(
        results,
        seed=seed,
        verified=verified,
        backend=backend,
        workers=workers,
        broken_contract=broken_contract,
        ignore_ledger_refusal=ignore_ledger_refusal,
    )


def _run(
    specs: list[_episode.EpisodeSpec],
    site: Site,
    workdir: Path,
    seed: int,
    workers: int,
    *,
    broken_contract: bool,
    ignore_ledger_refusal: bool,
    progress: Callable[[int], None] | None,
) -> tuple[list[EpisodeResult], bool]:
    """Run every episode on ``site``; return their results and whether the chains verify."""
    clock = SharedClock.create(workdir / "clock", _EPOCH)
    ledger = site.open(clock)
    faulty = FenceCounter(site.open_faulty(clock))
    patient = FenceCounter(site.open_faulty(clock, patient=True))
    results: list[EpisodeResult] = []
    try:
        with (
            ChildRunner(preload=site.modules) as children,
            WorkerPool(
                workers - 1,
                target=site.target,
                clock_path=str(clock.path),
                seed=seed,
                options=site.options,
            ) as pool,
        ):
            context = EpisodeContext(
                site,
                ledger,
                clock,
                children,
                pool,
                workdir,
                faulty,
                patient,
                broken_contract,
                seeded_jitter(seed),
                ignore_ledger_refusal=ignore_ledger_refusal,
            )
            for spec in specs:
                results.append(_episode.run(spec, context))
                if progress is not None:
                    progress(1)
        verified = ledger.verify().ok
    finally:
        faulty.close()
        patient.close()
        ledger.close()
        clock.close()
    return results, verified


def _score(
    results: list[EpisodeResult],
    *,
    seed: int,
    verified: bool,
    backend: str,
    workers: int,
    broken_contract: bool,
    ignore_ledger_refusal: bool,
) -> MatrixReport:
    total = Metrics()
    kinds = {kind.value: Metrics() for kind in ContractKind}
    crash_points = {point.value: Metrics() for point in CrashPoint}
    faults = {fault.value: Metrics() for fault in LEDGER_FAULTS[backend]}
    unreachable, replaced = Metrics(), Metrics()
    for result in results:
        if result.spec.unreachable:
            unreachable.add(result)
        if result.spec.ledger_replaced is not ReplacePoint.NONE:
            replaced.add(result)
        if result.spec.ledger_fault.value in faults:
            faults[result.spec.ledger_fault.value].add(result)
        total.add(result)
        kinds[result.spec.kind.value].add(result)
        crash_points[result.spec.crash.value].add(result)
    return MatrixReport(
        seed=seed,
        broken_contract=broken_contract,
        total=total,
        kinds=kinds,
        crash_points=crash_points,
        results=tuple(results),
        ledger_verified=verified,
        unreachable=unreachable,
        ledger_replaced=replaced,
        ignore_ledger_refusal=ignore_ledger_refusal,
        ledger_faults=faults,
        backend=backend,
        workers=workers,
    )
