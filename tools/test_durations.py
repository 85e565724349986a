"""Refresh ``tests/module_seconds.json`` (the seconds each test module took, which the suite's conftest
uses to start the longest modules first) from a run's JUnit XML:

    python -m pytest -m "" --junitxml=/tmp/run.xml
    python -m schedlab.tools.test_durations /tmp/run.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "tests" / "module_seconds.json"


def module_seconds(junit_xml: Path) -> dict[str, float]:
    """Test module file name -> the sum of its test cases' times (set-up and tear-down included)."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = next((f"{part}.py" for part in module if part.startswith("test_")), None)
        if name is not None:
            seconds[name] += float(case.get("time", 0))
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    found = module_seconds(Path(sys.argv[1]))
    TARGET.write_text(json.dumps({k: round(v, 1) for k, v in found.items()}, indent=1) + "\n")
    print(f"{TARGET}: {len(found)} modules, {sum(found.values()):.0f} s in all; longest: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in list(found.items())[:5]))


if __name__ == "__main__":
    main()
