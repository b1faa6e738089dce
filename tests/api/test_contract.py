"""The OpenAPI contract, checked by schemathesis on SQLite with bounded examples: no request it
makes gives a 5xx, and every response conforms to its documented schema (problem+json for
errors too). The schema is read from the app when the module loads; each example's requests
reach the test's own database (``PCF_DATABASE_URL``, read per request), a copy of the demo whose
dataset and run the schema's path examples name (``demo``, ``demo-pcf``), so every route is
also called on data that exists."""

from __future__ import annotations

import tempfile

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.config import SchemathesisConfig  # noqa: E402
from schemathesis.specs.openapi.checks import negative_data_rejection  # noqa: E402

from pcf.api import standalone  # noqa: E402

EXAMPLES = 25
# Schemathesis's expected statuses, and: a request valid by the schema may be refused by the data
# it names (422: no such item, a member who may not label, no human gold to check on, a webhook
# URL off the operator's PCF_WEBHOOK_HOSTS) or find
# the plan changed since the ETag it sends (412); a PUT of the plan without If-Match is 428
# (RFC 6585).
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "412", "422", "429", "5xx"]
MISSING_HEADER = ["400", "401", "403", "406", "415", "422", "428"]
CHECKS = {
    "positive_data_acceptance": {"expected-statuses": ACCEPTED},
    "missing_required_header": {"expected-statuses": MISSING_HEADER},
}
pytestmark = [pytest.mark.db, pytest.mark.sqlite_only(reason="generated data, once is enough")]
# Loading the schema starts the app's lifespan, which opens the database: a throwaway one here,
# never the user's (each example then reaches its test's own database).
with tempfile.TemporaryDirectory() as _folder, pytest.MonkeyPatch.context() as _patch:
    _patch.setenv("PCF_DATABASE_URL", f"sqlite:///{_folder}/schema.db")
    _patch.setenv("PCF_WEBHOOK_POLL_S", "0")  # no webhook sender on the throwaway database
    schema = schemathesis.openapi.from_asgi(
        "/api/v1/openapi.json",
        standalone(),
        config=SchemathesisConfig.from_dict({"checks": CHECKS}),
    )


@pytest.fixture
def headers(demo_engine, token) -> dict[str, str]:
    """An admin's token on a copy of the demo."""
    return token("contract@example.org", "admin", "admin")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_5xx_and_every_response_conforms(case, headers):
    # Unknown query parameters are ignored by design, which this check counts as accepting
    # invalid data; unknown body fields are refused (tests/api/test_bad_input.py).
    case.call_and_validate(headers=headers, excluded_checks=[negative_data_rejection])
