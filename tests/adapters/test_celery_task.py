"""EffectTask in one process (Celery's eager ``apply``): the scope and the retry of a held lease."""

from __future__ import annotations

import pytest
from extras_support import import_extra

celery = import_extra("celery", "celery")

from effectguard import CallScope, EffectStatus  # noqa: E402 - after the extra's check
from effectguard._model import EffectResult  # noqa: E402 - ditto
from effectguard.adapters.celery import EffectTask, EffectTaskError  # noqa: E402 - ditto
from effectguard.errors import (  # noqa: E402 - ditto
    EffectInProgress,
    EffectNotSent,
    EffectRejected,
    OperationConflictError,
)


@pytest.fixture
def app():
    app = celery.Celery("eager", broker="memory://", backend="cache+memory://")
    yield app
    app.close()


def test_the_body_runs_under_the_task_ids_scope(app):
    """The call scope is (celery:<task name>, <task id>), so call_scoped ids follow the task id."""

    @app.task(base=EffectTask, name="t.scope")
    def scope() -> list[str]:
        current = CallScope.current()
        assert current is not None
        return [current.run_id, current.call_id]

    done = scope.apply(task_id="task-1")
    assert done.get() == ["celery:t.scope", "task-1"]
    assert CallScope.current() is None


def test_a_direct_call_runs_the_body_without_a_scope(app):
    """task(...) is a plain function call: no message, no task id, so no call scope."""

    @app.task(base=EffectTask, name="t.direct")
    def direct() -> object:
        return CallScope.current()

    assert direct() is None


@pytest.mark.parametrize(
    ("error", "status"),
    [(EffectInProgress, EffectStatus.DISPATCHED), (EffectNotSent, EffectStatus.PREPARED)],
)
def test_a_held_lease_or_an_unsent_request_is_a_celery_retry(app, error, status):
    """EffectInProgress and EffectNotSent become self.retry(): the same task id runs again."""
    runs: list[tuple[str, int]] = []

    @app.task(base=EffectTask, bind=True, name="t.retry", effect_retry_initial=0)
    def held(self) -> str:
        runs.append((self.request.id, self.request.retries))
        if len(runs) < 3:
            result = EffectResult(status=status, operation_id="op-1", reason="held")
            if error is EffectNotSent:
                raise EffectNotSent("refused", result=result)
            raise EffectInProgress(result)
        return "done"

    done = held.apply(task_id="task-2")
    assert done.get() == "done"
    assert runs == [("task-2", 0), ("task-2", 1), ("task-2", 2)]


def test_retries_of_a_held_lease_stop_at_max_retries(app):
    """A lease held past max_retries fails the task with EffectInProgress; it never sends."""
    runs: list[int] = []

    @app.task(base=EffectTask, bind=True, name="t.held", max_retries=2, effect_retry_initial=0)
    def held(self) -> str:
        runs.append(self.request.retries)
        raise EffectInProgress(EffectResult(status=EffectStatus.DISPATCHED, operation_id="op-2"))

    done = held.apply(task_id="task-3")
    assert done.failed()
    assert isinstance(done.result, EffectTaskError)
    assert (done.result.operation_id, done.result.error) == ("op-2", "EffectInProgress")
    assert done.result.status == "DISPATCHED"
    assert "'op-2' is DISPATCHED. Another worker is handling it" in str(done.result)
    assert runs == [0, 1, 2]


@pytest.mark.parametrize(
    "error",
    [
        EffectInProgress(
            EffectResult(status=EffectStatus.DISPATCHED, operation_id="op-3"), ledger="/l.db"
        ),
        OperationConflictError("op-3", "a" * 64, "b" * 64, ["amount_cents: stored 1, now 2"]),
    ],
    ids=lambda error: type(error).__name__,
)
def test_an_effect_task_error_survives_a_result_backend(error):
    """Stored and rebuilt as a JSON result backend does, it keeps the operation and the message."""
    backend = celery.Celery("rebuild", backend="redis://127.0.0.1:6379/1").backend
    plain = backend.exception_to_python(backend.prepare_exception(error))
    # What a caller gets without it: effectguard's errors cannot be rebuilt from their args.
    assert type(plain) is Exception
    carried = EffectTaskError.from_error(error)
    rebuilt = backend.exception_to_python(backend.prepare_exception(carried))
    assert type(rebuilt) is EffectTaskError
    assert (rebuilt.operation_id, rebuilt.error) == ("op-3", type(error).__name__)
    assert str(rebuilt) == str(error)


def test_an_error_a_backend_rebuilds_is_raised_as_it_is(app):
    """EffectRejected survives a backend as itself, so the task raises it unchanged."""

    @app.task(base=EffectTask, name="t.rejected")
    def rejected() -> None:
        raise EffectRejected("card declined")

    done = rejected.apply(task_id="task-4")
    assert type(done.result) is EffectRejected
    assert str(done.result) == "card declined"
