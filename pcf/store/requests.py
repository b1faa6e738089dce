"""How a call's request is stored: once per content in a template, filled with the item's texts
(why: docs/costs.md). A :class:`~pcf.store.models.RequestTemplate` holds the user message as a
*frame*: literal strings and references, ``{"prompt": true}`` or ``{"slot": i}`` (the candidate
in slot ``i``), each only where its text occurs exactly, so the frame fills back to the message
exactly (an escaped text simply stays literal). Each call keeps the SHA-256 of its request as
sent (:func:`request_digest`) to verify the rebuilt one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pcf.store.models import RequestTemplate

Frame = list[str | dict[str, Any]]
PROMPT = {"prompt": True}
_json = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per call


def request_digest(request: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of a request dict's JSON, keys in their order."""
    return _hex_sha256(_json(request))


def _hex_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def user_frame(user: str, prompt: str, slot_texts: Sequence[str]) -> Frame:
    """The user message as a frame: the prompt, then each slot's text, replaced by a reference
    where it occurs exactly after the previous one; ``[user]`` if that ever failed to fill back."""
    frame: Frame = []
    at = 0
    references: list[tuple[dict[str, Any], str]] = [(PROMPT, prompt)]
    references += [({"slot": i}, text) for i, text in enumerate(slot_texts)]
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
    return frame if filled(frame, prompt, slot_texts) == user else [user]


def filled(frame: Frame, prompt: str, slot_texts: Sequence[str]) -> str:
    """The user message a frame stands for, given the item's prompt and slot texts."""
    return "".join(
        part if isinstance(part, str) else prompt if "prompt" in part else slot_texts[part["slot"]]
        for part in frame
    )


def stored_request(
    request: Mapping[str, Any], texts: tuple[str, Sequence[str]] | None
) -> tuple[dict[str, Any], str]:
    """A request as sent, as stored: its template's columns (digest included) and its own digest.
    ``texts`` (the item's prompt and slot texts; None: none) are left out. Each part is written as
    JSON once for both digests: this runs once per answer in the run engine's event loop.
    """
    frame = [request["user"]] if texts is None else user_frame(request["user"], *texts)
    values = {
        "backend": request["backend"],
        "model": request["model"],
        "system": request["system"],
        "output_schema": request["schema"],
        "sampling": {"temperature": request["temperature"], "max_tokens": request["max_tokens"]},
        "user_frame": frame,
    }
    part = {key: _json(value) for key, value in request.items()}
    sampling = f'{{"temperature":{part["temperature"]},"max_tokens":{part["max_tokens"]}}}'
    shared = [part["backend"], part["model"], part["system"], part["schema"], sampling]
    template_json = "[" + ",".join([*shared, _json(frame)]) + "]"
    request_json = "{" + ",".join(f"{_json(key)}:{text}" for key, text in part.items()) + "}"
    return {"digest": _hex_sha256(template_json), **values}, _hex_sha256(request_json)


def rebuilt_request(
    template: RequestTemplate, prompt: str, slot_texts: Sequence[str]
) -> dict[str, Any]:
    """The request a template stands for, filled with an item's texts, keys in sent order."""
    return {
        "backend": template.backend,
        "model": template.model,
        "system": template.system,
        "user": filled(template.user_frame, prompt, slot_texts),
        "schema": template.output_schema,
        **template.sampling,
    }
