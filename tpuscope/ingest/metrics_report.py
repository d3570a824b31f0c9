"""torch_xla metrics reports (`torch_xla.debug.metrics.metrics_report()` text) -> rows.

torch_xla ships `torch_xla.debug.metrics_compare_utils.parse_metrics_report`, but it
cannot be the parser here: it needs the `Accumulator:` label (the 2019 reports say
`Counter:` there, so their CompileTime is silently dropped), it drops a metric whose
percentile line wraps, and importing it imports torch and torch_xla (seconds, and
absent on the laptop where someone reads a TPU pod's logs). This parser reads all
of those and the XRT-era `Mean:`/`StdDev:` blocks; tests compare its values with
torch_xla's parser on the reports both read.

Values become the store's units: time accumulators ns, sizes bytes (torch_xla
prints sizes with 1024-based B/KB/MB/GB/TB/PB), plain numbers as they are. A file
holding several reports (printed every N steps) keeps each metric's last value:
reports are cumulative. Rows carry step -1 (whole-run totals). fallback counters
(`aten::*`, `torchvision::*`, any namespace but `xla::`) also become `fallbacks` rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tpuscope.ingest.registry import Imported, Importer, register
from tpuscope.parse.xla_counter_names import is_fallback_counter

_HEADER = re.compile(r"(?:^|[\s\]|>])(?P<kind>Metric|Counter): (?P<name>\S+)\s*$")
_FIELD = re.compile(
    r"^\s+(?P<key>TotalSamples|Accumulator|Counter|Value|Mean|StdDev|ValueRate|Rate|"
    r"Percentiles):\s*(?P<value>.*?)\s*$"
)
_WRAPPED_PERCENTILE = re.compile(r"^\s+\d+%=")
_TIME = re.compile(
    r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?(?:(?P<s>\d+)s)?"
    r"(?:(?P<ms>\d+)ms)?(?:(?P<us>[\d.]+)us)?(?:(?P<ns>[\d.]+)ns)?$"
)
_SIZE = re.compile(r"^(?P<n>[\d.]+|nan|inf)(?P<unit>PB|TB|GB|MB|KB|B)$")
_SIZE_POWERS = {"B": 0, "KB": 1, "MB": 2, "GB": 3, "TB": 4, "PB": 5}
_NS = {"d": 86400e9, "h": 3600e9, "m": 60e9, "s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
SNIFF = re.compile(rb"(Metric: \S+\s*\n\s+TotalSamples:|Counter: \S+\s*\n\s+Value:)")


def parse_quantity(text: str) -> tuple[float, str]:
    """'02m57s694ms418.595us' -> (177694418595.0, 'ns'); '5.72GB' -> (bytes, 'bytes'); '4.00' -> (4.0, '')."""
    text = text.strip()
    try:
        return float(text), ""
    except ValueError:
        pass
    size = _SIZE.match(text)
    if size:
        return float(size["n"]) * 1024 ** _SIZE_POWERS[size["unit"]], "bytes"
    match = _TIME.match(text)
    if match and any(match.groupdict().values()):
        return sum(float(v) * _NS[k] for k, v in match.groupdict().items() if v), "ns"
    raise ValueError(f"not a metrics-report quantity: {text!r}")


@dataclass
class Metric:
    """One `Metric:` block: samples, accumulator (store units) and percentiles as printed."""

    name: str
    samples: int = 0
    total: float = 0.0
    unit: str = ""
    percentiles: dict[str, str] = field(default_factory=dict)


@dataclass
class MetricsReport:
    metrics: dict[str, Metric] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)


def _percentiles(text: str) -> dict[str, str]:
    pairs = (p.strip().split("=", 1) for p in text.split(";") if "=" in p)
    return {k.strip(): v.strip() for k, v in pairs}


def parse_metrics_report(text: str) -> MetricsReport:
    """Every Metric and Counter block in the text (log lines around them are skipped)."""
    report = MetricsReport()
    metric: Metric | None = None
    counter: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        field_match = _FIELD.match(line)
        if field_match and (metric is not None or counter is not None):
            key, value = field_match["key"], field_match["value"]
            try:
                if counter is not None and key == "Value":
                    report.counters[counter] = _count(value, f"counter {counter}")
                    counter = None
                elif metric is not None:
                    _metric_field(metric, key, value)
            except ValueError as exc:  # a malformed number refuses the file, whichever field
                raise ValueError(f"line {number}: {exc}") from None
            continue
        if metric is not None and _WRAPPED_PERCENTILE.match(line):
            metric.percentiles.update(_percentiles(line))
            continue
        header = _HEADER.search(line)
        if header is None:
            metric, counter = None, None
        elif header["kind"] == "Metric":
            metric, counter = Metric(header["name"]), None
            report.metrics[metric.name] = metric
        else:
            metric, counter = None, header["name"]
    return report


def _count(value: str, what: str) -> int:
    """A count as printed (digits), else ValueError: never a silent 0 for `abc`."""
    if not value.isdigit():
        raise ValueError(f"{what}: {value!r} is not a count")
    return int(value)


def _metric_field(metric: Metric, key: str, value: str) -> None:
    if key == "TotalSamples":
        metric.samples = _count(value, f"{metric.name} TotalSamples")
    elif key in ("Accumulator", "Counter") and value:  # 'Counter:' is the 2019 label
        number, unit = parse_quantity(value)  # ValueError for a malformed quantity
        metric.total = 0.0 if number != number else number
        metric.unit = unit
    elif key == "Percentiles":
        metric.percentiles.update(_percentiles(value))


def evidence_from_report(report: MetricsReport) -> Imported:
    evidence = Imported()
    evidence.add(
        "metrics",
        [
            {"step": -1, "name": m.name, "kind": "metric", "count": m.samples, "total": m.total}
            for m in report.metrics.values()
        ],
    )
    evidence.add(
        "metrics",
        [
            {"step": -1, "name": name, "kind": "counter", "count": value, "total": 0.0}
            for name, value in report.counters.items()
        ],
    )
    evidence.add(
        "fallbacks",
        [
            {"step": -1, "op": name, "count": value, "location": None}
            for name, value in report.counters.items()
            if is_fallback_counter(name)
        ],
    )
    fallbacks = [n for n in report.counters if is_fallback_counter(n)]
    evidence.summary = (
        f"metrics report: {len(report.metrics)} metrics, {len(report.counters)} counters"
        + (f", fallbacks {', '.join(fallbacks)}" if fallbacks else "")
    )
    return evidence


def load(path: Path) -> Imported:
    report = parse_metrics_report(Path(path).read_text(errors="replace"))
    if not report.metrics and not report.counters:
        raise ValueError("no Metric or Counter block found")
    return evidence_from_report(report)


def sniff(path: Path, head: bytes) -> bool:
    """A Metric/TotalSamples or Counter/Value pair in the first 64 KB or the last 1 MB (reports
    are often printed at the end of a long log)."""
    if not path.is_file():
        return False
    if SNIFF.search(head):
        return True
    size = path.stat().st_size
    if size <= len(head):
        return False
    with open(path, "rb") as handle:
        handle.seek(max(size - (1 << 20), 0))
        return bool(SNIFF.search(handle.read()))


IMPORTER = register(
    Importer(
        name="metrics_report",
        description="torch_xla metrics report (metrics_report() text, PJRT or XRT era, alone or in a log)",
        sniff=sniff,
        load=load,
    )
)
