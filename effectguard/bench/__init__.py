"""Benchmarks: what effectguard costs, each number beside the durable work it adds to.

``agent-effect bench`` runs :func:`run_bench`; docs/benchmarks.md explains
what is measured, why, and the JSON report's shape.
"""

from effectguard.bench._config import BenchConfig, BenchError
from effectguard.bench._report import BenchReport
from effectguard.bench._run import run_bench

__all__ = ["BenchConfig", "BenchError", "BenchReport", "run_bench"]
