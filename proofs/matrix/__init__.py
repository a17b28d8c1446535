"""The fault matrix: seeded episodes of every fault against every contract kind.

:mod:`~proofs.matrix.run` plans and scores episodes,
:mod:`~proofs.matrix.episode` plays one,
:mod:`~effectguard.testkit._crash.kinds` builds the four contract kinds over
the fakes, and :mod:`~effectguard.testkit._crash.child` runs an episode's
effect in a real child process that a fault may SIGKILL.
"""

from proofs.matrix.run import CrashPoint, MatrixReport, Metrics, run_matrix

__all__ = ["CrashPoint", "MatrixReport", "Metrics", "run_matrix"]
