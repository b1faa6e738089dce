"""Start-up time of the `pcf` command: `pcf --help` and `pcf validate jsonl
data/demo/items.jsonl`, each run as a fresh process (median of 7 after one warm-up), and the
modules that `import pcf.cli` loads. Targets: 0.5 s and 1.0 s. Last line: JSON figures."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PCF = Path(sys.executable).with_name("pcf")
COMMANDS = {
    "help_s": [str(PCF), "--help"],
    "validate_s": [str(PCF), "validate", "jsonl", str(ROOT / "data" / "demo" / "items.jsonl")],
}
HEAVY = (
    "pandas",
    "scipy",
    "statsmodels",
    "sqlalchemy",
    "sqlmodel",
    "openai",
    "anthropic",
    "altair",
)
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


def heavy_modules_at_import() -> list[str]:
    """The heavy libraries that importing the CLI loads (none is the goal)."""
    probe = f"import sys, pcf.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.replace("'", '"'))


def main() -> None:
    figures: dict[str, object] = {name: round(seconds(cmd), 3) for name, cmd in COMMANDS.items()}
    figures["heavy_modules_at_import"] = heavy_modules_at_import()
    print(f"pcf --help: {figures['help_s']} s (target 0.5 s)")
    print(f"pcf validate jsonl data/demo/items.jsonl: {figures['validate_s']} s (target 1.0 s)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
