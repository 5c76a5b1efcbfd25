"""The comparison's figures: what a section measured, round by round, and the line printed for
it, `figure  replog  kafka  ratio`, with medians over rounds and ratio = replog / Kafka."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

FIGURE_WIDTH = 66
VALUE_WIDTH = 12


@dataclass
class Row:
    """One figure: its name, its unit ("MB/s", "ms", "s", "MiB" ...) and the value of each
    round on each side; NaN for a round that failed."""

    figure: str
    unit: str
    replog: list[float] = field(default_factory=list)
    kafka: list[float] = field(default_factory=list)

    def add(self, kind: str, value: float) -> None:
        getattr(self, kind).append(value)

    def line(self) -> str:
        replog, kafka = median(self.replog), median(self.kafka)
        ratio = replog / kafka if kafka and not math.isnan(kafka) else math.nan
        return (f"{self.figure:<{FIGURE_WIDTH}} {_value(replog, self.unit):>{VALUE_WIDTH}} {_value(kafka, self.unit):>{VALUE_WIDTH}} "
                f"{'-' if math.isnan(ratio) else f'{ratio:.2f}':>6}")


class Rows:
    """A section's rows in the order it first measured them."""

    def __init__(self):
        self.by_figure: dict[str, Row] = {}

    def add(self, figure: str, unit: str, kind: str, value: float) -> None:
        self.by_figure.setdefault(figure, Row(figure, unit)).add(kind, value)

    def rows(self) -> list[Row]:
        return list(self.by_figure.values())


def header() -> str:
    return f"{'figure':<{FIGURE_WIDTH}} {'replog':>{VALUE_WIDTH}} {'kafka':>{VALUE_WIDTH}} {'ratio':>6}"


def median(values: list[float]) -> float:
    """The median of the rounds that succeeded; NaN if none did."""
    measured = [value for value in values if not math.isnan(value)]
    return statistics.median(measured) if measured else math.nan


def _value(value: float, unit: str) -> str:
    return "failed" if math.isnan(value) else f"{value:.{0 if value >= 1000 else 1}f} {unit}"
