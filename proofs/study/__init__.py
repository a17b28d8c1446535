"""The strategy study (``agent-effect study``): what each way of calling a tool costs.

Naive retry, verify then retry, a provider key alone and effectguard meet the
same seeded faults.

:mod:`~proofs.study.destination` is the provider every strategy
meets, :mod:`~proofs.study.strategies` the four ways of calling
it, and :mod:`~proofs.study.run` plays the episodes and counts.
"""

from proofs.study.run import Cost, StudyReport, run_study
from proofs.study.strategies import Strategy

__all__ = ["Cost", "Strategy", "StudyReport", "run_study"]
