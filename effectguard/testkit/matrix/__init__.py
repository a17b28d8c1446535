"""The fault matrix: seeded episodes of every fault against every contract kind.

:mod:`~effectguard.testkit.matrix.run` plans and scores episodes,
:mod:`~effectguard.testkit.matrix.episode` plays one,
:mod:`~effectguard.testkit.matrix.kinds` builds the four contract kinds over
the fakes, and :mod:`~effectguard.testkit.matrix.child` runs an episode's
effect in a real child process that a fault may SIGKILL.
"""

from effectguard.testkit.matrix.run import CrashPoint, MatrixReport, Metrics, run_matrix

__all__ = ["CrashPoint", "MatrixReport", "Metrics", "run_matrix"]
