"""The study's chart: duplicates, lost work and tickets per strategy, for a design review.

Needs the ``study`` extra (``pip install 'effectguard[study]'``, which brings
matplotlib); nothing else in the study imports it. The format follows the
file's suffix (``.png`` or ``.svg``).
"""

from __future__ import annotations

from pathlib import Path

from effectguard import ConfigurationError
from proofs.study.run import StudyReport

__all__ = ["FORMATS", "plot"]

#: The chart formats ``--plot`` writes, by file suffix.
FORMATS = (".png", ".svg")
_MEASURES = (("duplicates", "duplicate effects"), ("lost", "lost work"), ("tickets", "tickets"))


def plot(report: StudyReport, path: Path) -> None:
    """Write ``report``'s chart to ``path``: one group of bars per fault kind, one per strategy.

    Raises ConfigurationError when the suffix is not one of :data:`FORMATS` or
    matplotlib is missing (naming the extra to install).
    """
    if path.suffix.lower() not in FORMATS:
        msg = f"--plot {path}: the chart is written as {' or '.join(FORMATS)}, by its suffix"
        raise ConfigurationError(msg)
    try:
        import matplotlib as mpl  # noqa: PLC0415 - an optional extra, loaded only to draw

        mpl.use("Agg")  # no display: the chart goes to a file
        import matplotlib.pyplot as plt  # noqa: PLC0415 - after choosing the backend
    except ModuleNotFoundError as exc:
        msg = f"--plot needs matplotlib: pip install 'effectguard[study]' ({exc})"
        raise ConfigurationError(msg) from exc
    strategies = list(report.costs)
    faults = [name for name in next(iter(report.costs.values())) if name != "total"]
    figure, axes = plt.subplots(1, len(_MEASURES), figsize=(15, 4.5), sharey=False)
    width = 0.8 / len(strategies)
    for ax, (measure, title) in zip(axes, _MEASURES, strict=True):
        for index, strategy in enumerate(strategies):
            values = [getattr(report.costs[strategy][fault], measure) for fault in faults]
            positions = [x + index * width for x in range(len(faults))]
            ax.bar(positions, values, width, label=strategy)
        ax.set_title(title)
        ax.set_xticks([x + width * (len(strategies) - 1) / 2 for x in range(len(faults))])
        ax.set_xticklabels(faults, rotation=30, ha="right")
    axes[0].set_ylabel(f"count over {report.episodes} episodes (seed {report.seed})")
    axes[-1].legend(loc="upper right")
    figure.suptitle("The same seeded faults through four ways of calling a tool")
    figure.tight_layout()
    figure.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    plt.close(figure)
