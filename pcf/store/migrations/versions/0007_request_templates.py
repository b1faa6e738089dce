"""Requests stored once per content, answers compressed: about 1 KB per call instead of 9.

A call kept its whole request (system message, schema and the item's texts, 4 KB and more)
although the requests of a run differ only by the item's texts, which the item and candidate
tables hold already. Now the shared parts are a ``request_template`` row, its user message a
*frame* that refers to the item's question and to the candidate in each slot of the call's
order where their texts occur exactly; a call keeps the template's id and the SHA-256 of its
request as sent. ``response_text`` and ``response_raw`` are stored as a header byte and the
UTF-8 text, zlib-compressed where that is smaller.

Every call, and every replaced call's kept values, is converted in batches by id (a database
of any size upgrades in bounded memory). Each request rebuilt from its template must equal the
old one as JSON, or the upgrade stops with the call's id and the database stays as it was.

The frame, digest and packing code below is a frozen copy of ``pcf.store.requests`` and
``pcf.store.compressed`` as of this revision: this file must not change with them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BATCH = 500
"""Rows read, converted and written at a time."""
KNOWN_TEMPLATES = 10_000
"""Template ids remembered by digest during the upgrade; past this the memo starts again."""

template = sa.table(
    "request_template",
    sa.column("id", sa.Integer()),
    sa.column("digest", sa.String()),
    sa.column("backend", sa.String()),
    sa.column("model", sa.String()),
    sa.column("system", sa.String()),
    sa.column("output_schema", sa.JSON()),
    sa.column("sampling", sa.JSON()),
    sa.column("user_frame", sa.JSON()),
)
call = sa.table(
    "call",
    sa.column("id", sa.Integer()),
    sa.column("item_id", sa.Integer()),
    sa.column("order", sa.JSON()),
    sa.column("request", sa.JSON()),
    sa.column("response_text", sa.String()),
    sa.column("response_raw", sa.JSON()),
    sa.column("template_id", sa.Integer()),
    sa.column("request_digest", sa.String()),
    sa.column("packed_text", sa.LargeBinary()),
    sa.column("packed_raw", sa.LargeBinary()),
)
replaced_call = sa.table(
    "replaced_call", sa.column("id", sa.Integer()), sa.column("values", sa.JSON())
)
item = sa.table("item", sa.column("id", sa.Integer()), sa.column("prompt", sa.String()))
candidate = sa.table(
    "candidate",
    sa.column("item_id", sa.Integer()),
    sa.column("candidate_key", sa.String()),
    sa.column("text", sa.String()),
)


# ------------------------------------------------ frozen copy of the storage format (0007)


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":")).encode("utf-8")).hexdigest()


def _filled(frame: list[Any], prompt: str, slot_texts: Sequence[str]) -> str:
    return "".join(
        part if isinstance(part, str) else prompt if "prompt" in part else slot_texts[part["slot"]]
        for part in frame
    )


def _frame(user: str, prompt: str, slot_texts: Sequence[str]) -> list[Any]:
    frame: list[Any] = []
    at = 0
    references = [({"prompt": True}, prompt), *(({"slot": i}, t) for i, t in enumerate(slot_texts))]
    for reference, text in references:
        found = user.find(text, at) if text else -1
        if found < 0:
            continue
        if found > at:
            frame.append(user[at:found])
        frame.append(reference)
        at = found + len(text)
    if at < len(user):
        frame.append(user[at:])
    return frame if _filled(frame, prompt, slot_texts) == user else [user]


def _template_values(request: dict[str, Any], texts: tuple[str, list[str]] | None) -> dict:
    frame = [request["user"]] if texts is None else _frame(request["user"], *texts)
    values = {
        "backend": request["backend"],
        "model": request["model"],
        "system": request["system"],
        "output_schema": request["schema"],
        "sampling": {"temperature": request["temperature"], "max_tokens": request["max_tokens"]},
        "user_frame": frame,
    }
    return {"digest": _sha256(list(values.values())), **values}


def _rebuilt(values: dict[str, Any], prompt: str, slot_texts: Sequence[str]) -> dict[str, Any]:
    return {
        "backend": values["backend"],
        "model": values["model"],
        "system": values["system"],
        "user": _filled(values["user_frame"], prompt, slot_texts),
        "schema": values["output_schema"],
        **values["sampling"],
    }


def _pack(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) >= 64:
        compressed = zlib.compress(data)
        if len(compressed) < len(data):
            return b"\x01" + compressed
    return b"\x00" + data


def _unpack(stored: bytes) -> str:
    header, body = stored[:1], bytes(stored[1:])
    return (zlib.decompress(body) if header == b"\x01" else body).decode("utf-8")


# ------------------------------------------------ batches


def _batches(
    connection: sa.Connection, query: sa.Select, key: sa.ColumnElement
) -> Iterator[Sequence[sa.Row]]:
    """The rows of ``query`` in batches of :data:`BATCH`, by ascending ``key`` (no offsets)."""
    after = None
    while True:
        page = query if after is None else query.where(key > after)
        rows = connection.execute(page.order_by(key).limit(BATCH)).all()
        if not rows:
            return
        yield rows
        after = rows[-1][0]


class ItemTexts:
    """The prompts and candidate texts of a batch's items."""

    def __init__(self, connection: sa.Connection, item_ids: set[int]) -> None:
        prompts = sa.select(item.c.id, item.c.prompt).where(item.c.id.in_(item_ids))
        self.prompts: dict[int, str] = dict(connection.execute(prompts).all())
        self.texts: dict[int, dict[str, str]] = defaultdict(dict)
        rows = connection.execute(
            sa.select(candidate.c.item_id, candidate.c.candidate_key, candidate.c.text).where(
                candidate.c.item_id.in_(item_ids)
            )
        )
        for item_id, key, text in rows:
            self.texts[item_id][key] = text

    def of(self, item_id: int, order: list[str]) -> tuple[str, list[str]] | None:
        """The item's prompt and the texts of ``order``'s candidates, or None if one is missing."""
        texts = self.texts[item_id]
        if item_id not in self.prompts or not all(key in texts for key in order):
            return None
        return self.prompts[item_id], [texts[key] for key in order]


class Templates:
    """Template ids by digest: found, or inserted the first time a content is seen."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection
        self.known: dict[str, int] = {}

    def id_of(self, values: dict[str, Any]) -> int:
        digest = values["digest"]
        if digest not in self.known:
            if len(self.known) >= KNOWN_TEMPLATES:
                self.known.clear()
            found = self.connection.execute(
                sa.select(template.c.id).where(template.c.digest == digest)
            ).scalar()
            if found is None:
                insert = template.insert().values(**values).returning(template.c.id)
                found = self.connection.execute(insert).scalar_one()
            self.known[digest] = found
        return self.known[digest]


def _as_stored(
    where: str, request: dict[str, Any], texts: tuple[str, list[str]] | None, templates: Templates
) -> tuple[int, str]:
    """``(template id, request digest)`` of a request, checked to rebuild to the same JSON."""
    try:
        values = _template_values(request, texts)
    except (KeyError, TypeError) as exc:
        raise RuntimeError(f"{where}: its request is not a judge request ({exc!r})") from exc
    rebuilt = _rebuilt(values, *(texts or ("", [])))
    if json.dumps(rebuilt) != json.dumps(request):
        raise RuntimeError(f"{where}: its request cannot be rebuilt exactly; nothing was changed")
    return templates.id_of(values), _sha256(request)


# ------------------------------------------------ upgrade


def upgrade() -> None:
    connection = op.get_bind()
    op.create_table(
        "request_template",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("system", sa.String(), nullable=False),
        sa.Column("output_schema", sa.JSON(), nullable=False),
        sa.Column("sampling", sa.JSON(), nullable=False),
        sa.Column("user_frame", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    op.add_column("call", sa.Column("template_id", sa.Integer(), nullable=True))
    op.add_column("call", sa.Column("request_digest", sa.String(), nullable=True))
    op.add_column("call", sa.Column("packed_text", sa.LargeBinary(), nullable=True))
    op.add_column("call", sa.Column("packed_raw", sa.LargeBinary(), nullable=True))
    templates = Templates(connection)
    _convert_calls(connection, templates)
    _convert_replaced_calls(connection, templates)
    with op.batch_alter_table("call") as batch:
        batch.drop_column("request")
        batch.drop_column("response_text")
        batch.drop_column("response_raw")
        batch.alter_column("packed_text", new_column_name="response_text")
        batch.alter_column("packed_raw", new_column_name="response_raw")
        batch.alter_column("template_id", existing_type=sa.Integer(), nullable=False)
        batch.alter_column("request_digest", existing_type=sa.String(), nullable=False)
        batch.create_foreign_key(
            "call_template_id_fkey", "request_template", ["template_id"], ["id"]
        )


def _convert_calls(connection: sa.Connection, templates: Templates) -> None:
    """Each call's request as a template id and digest, its answer packed."""
    query = sa.select(
        call.c.id,
        call.c.item_id,
        sa.cast(call.c.order, sa.Text),
        sa.cast(call.c.request, sa.Text),
        call.c.response_text,
        sa.cast(call.c.response_raw, sa.Text),
    )
    update = (
        call.update()
        .where(call.c.id == sa.bindparam("call_id"))
        .values(
            template_id=sa.bindparam("template_id"),
            request_digest=sa.bindparam("request_digest"),
            packed_text=sa.bindparam("packed_text"),
            packed_raw=sa.bindparam("packed_raw"),
        )
    )
    for rows in _batches(connection, query, call.c.id):
        texts = ItemTexts(connection, {row[1] for row in rows})
        converted = []
        for call_id, item_id, order, request, response_text, response_raw in rows:
            template_id, digest = _as_stored(
                f"call {call_id}",
                json.loads(request),
                texts.of(item_id, json.loads(order)),
                templates,
            )
            converted.append(
                {
                    "call_id": call_id,
                    "template_id": template_id,
                    "request_digest": digest,
                    "packed_text": None if response_text is None else _pack(response_text),
                    "packed_raw": None if response_raw is None else _pack(response_raw),
                }
            )
        connection.execute(update, converted)


def _convert_replaced_calls(connection: sa.Connection, templates: Templates) -> None:
    """Each replaced call's kept ``request`` as a template id and digest, in its place."""
    _convert_values(connection, lambda values, texts: _values_stored(values, texts, templates))


def _values_stored(
    values: dict[str, Any], texts: ItemTexts, templates: Templates
) -> dict[str, Any]:
    if "request" not in values:
        return values
    where = f"replaced call of call with item {values['item_id']}"
    template_id, digest = _as_stored(
        where, values["request"], texts.of(values["item_id"], values["order"]), templates
    )
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key == "request":
            out |= {"template_id": template_id, "request_digest": digest}
        else:
            out[key] = value
    return out


def _convert_values(
    connection: sa.Connection, convert: Callable[[dict[str, Any], ItemTexts], dict[str, Any]]
) -> None:
    """Rewrite every replaced call's values with ``convert(values, the batch's item texts)``."""
    query = sa.select(replaced_call.c.id, sa.cast(replaced_call.c["values"], sa.Text))
    update = (
        replaced_call.update()
        .where(replaced_call.c.id == sa.bindparam("replaced_id"))
        .values({"values": sa.bindparam("new_values", type_=sa.JSON())})
    )
    for rows in _batches(connection, query, replaced_call.c.id):
        kept = [(replaced_id, json.loads(values)) for replaced_id, values in rows]
        texts = ItemTexts(connection, {values["item_id"] for _, values in kept})
        converted = [
            {"replaced_id": replaced_id, "new_values": convert(values, texts)}
            for replaced_id, values in kept
        ]
        connection.execute(update, converted)


# ------------------------------------------------ downgrade


def downgrade() -> None:
    connection = op.get_bind()
    op.add_column("call", sa.Column("request", sa.JSON(), nullable=True))
    op.add_column("call", sa.Column("plain_text", sa.String(), nullable=True))
    op.add_column("call", sa.Column("plain_raw", sa.JSON(none_as_null=True), nullable=True))
    packed = sa.table(
        "call",
        sa.column("id", sa.Integer()),
        sa.column("item_id", sa.Integer()),
        sa.column("order", sa.JSON()),
        sa.column("template_id", sa.Integer()),
        sa.column("response_text", sa.LargeBinary()),
        sa.column("response_raw", sa.LargeBinary()),
        sa.column("request", sa.JSON()),
        sa.column("plain_text", sa.String()),
        sa.column("plain_raw", sa.JSON(none_as_null=True)),
    )
    query = sa.select(
        packed.c.id,
        packed.c.item_id,
        sa.cast(packed.c.order, sa.Text),
        packed.c.template_id,
        packed.c.response_text,
        packed.c.response_raw,
    )
    update = (
        packed.update()
        .where(packed.c.id == sa.bindparam("call_id"))
        .values(
            request=sa.bindparam("old_request"),
            plain_text=sa.bindparam("old_text"),
            plain_raw=sa.bindparam("old_raw"),
        )
    )
    requests = Requests(connection)
    for rows in _batches(connection, query, packed.c.id):
        texts = ItemTexts(connection, {row[1] for row in rows})
        connection.execute(
            update,
            [
                {
                    "call_id": call_id,
                    "old_request": requests.of(template_id, texts, item_id, json.loads(order)),
                    "old_text": None if text is None else _unpack(text),
                    "old_raw": None if raw is None else json.loads(_unpack(raw)),
                }
                for call_id, item_id, order, template_id, text, raw in rows
            ],
        )
    _convert_values(connection, requests.values_before)
    with op.batch_alter_table("call") as batch:
        batch.drop_constraint("call_template_id_fkey", type_="foreignkey")
        batch.drop_column("template_id")
        batch.drop_column("request_digest")
        batch.drop_column("response_text")
        batch.drop_column("response_raw")
        batch.alter_column("plain_text", new_column_name="response_text")
        batch.alter_column("plain_raw", new_column_name="response_raw")
        batch.alter_column("request", existing_type=sa.JSON(), nullable=False)
    op.drop_table("request_template")


class Requests:
    """Requests rebuilt from their templates (each read once) and the items' texts."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection
        self.templates: dict[int, dict[str, Any]] = {}

    def of(self, template_id: int, texts: ItemTexts, item_id: int, order: list[str]) -> dict:
        """The request of a call with this template, item and order."""
        if template_id not in self.templates:
            if len(self.templates) >= KNOWN_TEMPLATES:
                self.templates.clear()
            row = self.connection.execute(
                sa.select(template).where(template.c.id == template_id)
            ).one()
            self.templates[template_id] = dict(row._mapping)
        return _rebuilt(self.templates[template_id], *(texts.of(item_id, order) or ("", [])))

    def values_before(self, values: dict[str, Any], texts: ItemTexts) -> dict[str, Any]:
        """Replaced call values with their ``request`` back in place of the template's id."""
        if "template_id" not in values:
            return values
        request = self.of(values["template_id"], texts, values["item_id"], values["order"])
        out: dict[str, Any] = {}
        for key, value in values.items():
            if key == "template_id":
                out["request"] = request
            elif key != "request_digest":
                out[key] = value
        return out
