"""The strategy study (``agent-effect study``): what each way of calling a tool costs.

Naive retry, verify then retry, a provider key alone and effectguard meet the
same seeded faults.

:mod:`~effectguard.testkit.study.destination` is the provider every strategy
meets, :mod:`~effectguard.testkit.study.strategies` the four ways of calling
it, and :mod:`~effectguard.testkit.study.run` plays the episodes and counts.
"""

from effectguard.testkit.study.run import Cost, StudyReport, run_study
from effectguard.testkit.study.strategies import Strategy

__all__ = ["Cost", "Strategy", "StudyReport", "run_study"]
