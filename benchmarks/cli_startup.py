"""Start-up time of the `pcf` command: `pcf --help` and `pcf validate jsonl
data/demo/items.jsonl`, each run as a fresh process (median of 7 after one warm-up), and the
heavy libraries (``tests.startup.HEAVY_MODULES``) each imports. Targets: 0.25 s and 1.0 s.
Last line: JSON figures."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.startup import heavy_modules_imported

ROOT = Path(__file__).resolve().parents[1]
PCF = Path(sys.executable).with_name("pcf")
COMMANDS = {
    "help_s": [str(PCF), "--help"],
    "validate_s": [str(PCF), "validate", "jsonl", str(ROOT / "data" / "demo" / "items.jsonl")],
}
RUNS = 7


def seconds(command: list[str]) -> float:
    """Median wall time of ``command`` as a fresh process."""
    subprocess.run(command, check=True, capture_output=True)  # warm the file cache
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    figures: dict[str, object] = {name: round(seconds(cmd), 3) for name, cmd in COMMANDS.items()}
    figures["heavy_modules_help"] = heavy_modules_imported(COMMANDS["help_s"])
    figures["heavy_modules_validate"] = heavy_modules_imported(COMMANDS["validate_s"])
    print(f"pcf --help: {figures['help_s']} s (target 0.25 s on an idle machine)")
    print(f"heavy modules it imports (none is the goal): {figures['heavy_modules_help']}")
    print(f"pcf validate jsonl data/demo/items.jsonl: {figures['validate_s']} s (target 1.0 s)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
