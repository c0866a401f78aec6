"""The suite's time by test module, from pytest's JUnit XML (``.ci/run`` writes one per suite): where a suite
spends its time, setup and teardown included, summed over its workers.

Usage: python .ci/durations.py .ci/logs/test.xml [TOP]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def by_module(path: str) -> tuple[dict[str, float], Counter[str]]:
    """Seconds and test counts per module (``tests/x/test_y.py``) of one JUnit XML report."""
    seconds: dict[str, float] = {}
    tests: Counter[str] = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "?").split(".")  # tests.x.test_y, then a class name if any
        last = max((i for i, p in enumerate(parts) if p.startswith("test_")), default=len(parts) - 1)
        module = "/".join(parts[: last + 1]) + ".py"
        seconds[module] = seconds.get(module, 0.0) + float(case.get("time") or 0.0)
        tests[module] += 1
    return seconds, tests


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    top = int(argv[1]) if len(argv) > 1 else 20
    seconds, tests = by_module(argv[0])
    total = sum(seconds.values())
    print(f"{argv[0]}: {total:.0f} s of test time over {sum(tests.values())} tests (summed over workers)")
    for module, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{s:8.1f} s {100 * s / total:5.1f}% {tests[module]:5d} tests  {module}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
