"""The batch API module's imports: the Runs page names its errors on every visit, and a batch
command loads its own provider's SDK alone."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys


def loaded_sdks(code: str) -> list[str]:
    """The provider SDKs loaded once ``code`` has run in a new interpreter."""
    probe = f"import sys\n{code}\nprint(sorted({{'openai', 'anthropic'}} & set(sys.modules)))"
    env = os.environ | {"OPENAI_API_KEY": "sk-dummy", "ANTHROPIC_API_KEY": "sk-ant-dummy"}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env=env,
    )
    return ast.literal_eval(out.stdout.strip())


def test_naming_batch_errors_loads_no_provider_sdk_and_a_batch_only_its_own() -> None:
    """Importing ``pcf.judges.batch_api`` (as the Runs page does for ``BatchAPIError``) leaves
    the openai and anthropic SDKs unloaded: they cost seconds and a batch run loads them with
    its judge. A batch of one provider, its call refused and reported, loads no other's SDK."""
    assert loaded_sdks("import pcf.judges.batch_api, pcf.runs.batch_status") == []
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    for backend in ("openai", "anthropic"):
        cancel = (
            "import asyncio\n"
            "from pcf.judges import make_judge\n"
            "from pcf.judges.batch_api import BatchAPIError, batch_client\n"
            f"client = batch_client(make_judge({backend!r}, 'm', base_url={refused!r}))\n"
            "try:\n"
            "    asyncio.run(client.cancel('batch-1'))\n"
            "except BatchAPIError as err:\n"
            "    assert 'batch API' in str(err), err\n"
            "else:\n"
            "    raise AssertionError('the refused call was not reported')"
        )
        assert loaded_sdks(cancel) == [backend]
