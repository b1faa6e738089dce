"""The batch API module's imports: the Runs page names its errors on every visit."""

from __future__ import annotations

import subprocess
import sys


def test_naming_batch_errors_loads_no_provider_sdk() -> None:
    """Importing ``pcf.judges.batch_api`` (as the Runs page does for ``BatchAPIError``) leaves
    the openai and anthropic SDKs unloaded: they cost seconds and a batch run loads them with
    its judge."""
    probe = (
        "import sys; import pcf.judges.batch_api, pcf.runs.batch_status; "
        "print(sorted({'openai', 'anthropic'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "[]"
