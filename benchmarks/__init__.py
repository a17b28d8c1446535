"""Benchmarks: what effectguard costs, each number beside the durable work it adds to.

``agent-effect bench`` runs :func:`run_bench`; docs/benchmarks.md explains
what is measured, why, and the JSON report's shape.
"""

from benchmarks._config import BenchConfig, BenchError
from benchmarks._report import BenchReport
from benchmarks._run import run_bench

__all__ = ["BenchConfig", "BenchError", "BenchReport", "run_bench"]
