"""What an operator does, written once for the command line, the console and the API.

Re-probing an operation nobody is working on (:func:`reprobe`) and sweeping
every uncertain one (:func:`recover`); resolving one, checked and previewed
first (:func:`resolve`); reading operations with their histories for an
incident report (:func:`histories`); finding a framework adapter's runs by
the call scope their operation ids were made from (:func:`framework_runs`);
reading a duration an operator typed (:func:`parse_duration`, and
:func:`parse_approval_duration` for an approval's expiry) the same way everywhere.
Nothing here dispatches a handler: a re-probe writes what the provider
answers, a resolution what the operator found, each an audited, fenced write.
"""

from __future__ import annotations

from effectguard._decorator import ToolIndex, load_tools
from effectguard.operator._durations import parse_approval_duration, parse_duration
from effectguard.operator._export import histories
from effectguard.operator._recover import (
    REPROBED_STATUSES,
    ProbedOutput,
    Recoverer,
    RecoveryReport,
    ReprobeAction,
    ReprobeOutcome,
    Skipped,
    output_from_probe,
    recover,
    reprobe,
    reprobe_problem,
    start_recovery,
)
from effectguard.operator._resolve import (
    ACTIONS,
    UNCHECKED_OUTPUT,
    Resolution,
    check_output,
    output_problem,
    resolve,
)
from effectguard.operator._runs import ScopedOperation, ScopedRun, framework_run, framework_runs

__all__ = [
    "ACTIONS",
    "REPROBED_STATUSES",
    "UNCHECKED_OUTPUT",
    "ProbedOutput",
    "Recoverer",
    "RecoveryReport",
    "ReprobeAction",
    "ReprobeOutcome",
    "Resolution",
    "ScopedOperation",
    "ScopedRun",
    "Skipped",
    "ToolIndex",
    "check_output",
    "framework_run",
    "framework_runs",
    "histories",
    "load_tools",
    "output_from_probe",
    "output_problem",
    "parse_approval_duration",
    "parse_duration",
    "recover",
    "reprobe",
    "reprobe_problem",
    "resolve",
    "start_recovery",
]
