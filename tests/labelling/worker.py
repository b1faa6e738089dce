"""One annotator labelling a dataset to the end of their queue, as the Adjudicate page does:
claim the next item, save a label, again. Run as a process of its own by the queue tests:

    python -m tests.labelling.worker URL DATASET ANNOTATOR LABELS_PER_ITEM START_FILE WORKERS

Once ready (connected, its queue read) it prints ``ready`` and waits until START_FILE exists, so
that the test starts every annotator at once. After its first label it waits until each of the
WORKERS annotators has saved one (a file ``first-ANNOTATOR`` beside START_FILE): on a loaded
machine two processes could otherwise label every item before the third is scheduled. Then it
prints one JSON line: the items it labelled and the saves refused as full.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pcf.access import Actor, Role
from pcf.labelling.labels import ItemFullError, save_label
from pcf.labelling.queue import claim_next
from pcf.store import get_dataset, get_engine, load_items, write_with_retry


def main(
    url: str, dataset: str, annotator: str, labels_per_item: int, start: Path, workers: int
) -> None:
    engine = get_engine(url)
    actor = Actor(annotator, Role.ANNOTATOR)

    def order(session):
        found = get_dataset(dataset, session=session)
        items = load_items(found.id, session=session)
        return found.id, [(i.item_id, i.metadata["db_id"]) for i in items], items

    dataset_id, queue, items = write_with_retry(engine, order)
    first_candidate = {i.metadata["db_id"]: i.candidate_ids[0] for i in items}
    wanted = {key: labels_per_item for key, _ in queue}
    print("ready", flush=True)
    while not start.exists():
        time.sleep(0.01)
    labelled, full = [], 0
    while True:
        claim = write_with_retry(
            engine,
            lambda s: claim_next(dataset_id, queue, session=s, actor=actor, wanted=wanted),
        )
        if claim is None:
            break
        try:
            write_with_retry(
                engine,
                lambda s, c=claim: save_label(
                    c.item_db_id,
                    session=s,
                    actor=actor,
                    choice=first_candidate[c.item_db_id],
                    seen=None,
                    wanted=labels_per_item,
                ),
            )
            labelled.append(claim.item_key)
            if len(labelled) == 1:
                (start.parent / f"first-{annotator}").touch()
                while len(list(start.parent.glob("first-*"))) < workers:
                    time.sleep(0.01)
        except ItemFullError:
            full += 1
    print(json.dumps({"annotator": annotator, "labelled": labelled, "full": full}))


if __name__ == "__main__":
    main(
        sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]), int(sys.argv[6])
    )
