"""The webhook routes through `pcf.client.Client`: a URL off the operator's allow-list is
refused as problem+json naming ``url`` with nothing stored; the secret is shown once; a
delivery's attempts are listed and it is sent again; a deleted webhook is gone."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from standardwebhooks import Webhook as Verifier

from pcf.client import ApiError, Client
from pcf.connectors.webhook_sender import deliver_due
from pcf.store import get_engine
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.db


@pytest.fixture
def api(demo_engine, token):
    from pcf.api import standalone

    with TestClient(standalone(), base_url="http://127.0.0.1/api/v1") as served:
        yield Client(http=served, token=token("admin@example.org")["Authorization"][7:])


def test_webhooks_are_made_listed_redelivered_and_deleted_and_off_list_urls_refused(
    api, monkeypatch
):
    with pytest.raises(ApiError) as refused:
        api.create_webhook("http://127.0.0.1:9/hook", ["run.finished"])
    assert refused.value.status == 422
    assert refused.value.problem["errors"][0]["field"] == "url"
    assert "PCF_WEBHOOK_HOSTS" in refused.value.problem["errors"][0]["detail"]
    with pytest.raises(ApiError) as unknown:
        api.create_webhook("http://127.0.0.1:9/hook", ["run.started"])
    assert {e["field"] for e in unknown.value.problem["errors"]} >= {"events[0]"}
    assert api.webhooks() == []
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "127.0.0.1")
    with Receiver() as receiver:
        made = api.create_webhook(receiver.url, ["label.created", "label.created"])
        assert made["secret"].startswith("whsec_")
        assert made["events"] == ["label.created"]
        listed = api.webhooks()
        assert [w["id"] for w in listed] == [made["id"]]
        assert "secret" not in listed[0]
        assert "secret" not in api.webhook(made["id"])
        api.post_labels(
            "demo", [{"label_id": "l1", "item_id": "demo-010", "answer": "none_correct"}]
        )
        (delivery,) = api.deliveries(made["id"])
        assert (delivery["event"], delivery["state"]) == ("label.created", "pending")
        engine = get_engine()
        while deliver_due(engine):  # the server's own sender may take some: both log the attempt
            pass
        received = receiver.wait_for(1)
        for _ in range(10_000):
            (delivery,) = api.deliveries(made["id"])
            if delivery["state"] == "delivered":
                break
        assert delivery["attempts"][0]["status"] == 204
        again = api.redeliver(made["id"], delivery["id"])
        assert (again["state"], again["message_id"]) == ("pending", delivery["message_id"])
        deliver_due(engine)  # or the server's own sender: either sends it
        received = receiver.wait_for(2)
    told = Verifier(made["secret"]).verify(received[1].body, received[1].headers)
    assert told["data"] | {"item_id": "demo-010", "dataset": "demo"} == told["data"]
    with pytest.raises(ApiError) as missing:
        api.redeliver(made["id"], delivery["id"] + 1)
    assert missing.value.status == 404
    api.delete_webhook(made["id"])
    with pytest.raises(ApiError) as gone:
        api.webhook(made["id"])
    assert gone.value.status == 404
    assert api.webhooks() == []
