"""Document parts of chat messages: PDFs and plain text, as the model can read them.

Every surface turns its document shape into one part, ``{"type": "file", "file":
{…}}`` (chat completions' own: ``file_data`` a ``data:`` URL or bare base64,
``filename``; the gateway's keys beside them: ``file_url`` fetched under the image
URL rules, ``text`` for a document sent as text, ``title`` and ``context`` kept
from Anthropic's ``document`` blocks, ``media_type``; ``file_id`` is a 400: the
gateway has no Files API). Before the turn, each such part becomes what the model
reads, in its place:

* plain text: its text;
* a PDF for a text-only model: its text layer page by page, each page after a
  ``--- Page n ---`` marker (a PDF with no text layer at all is a 400 naming the
  vision models served);
* a PDF for a vision model: each page rendered as an image, its text beside it.

A title or filename comes first (``Document: …``), then the context. The PDF work
(:mod:`.pdf`) runs in a thread, off the event loop. Caps of the model entry, each
a 400 naming its key: ``max_document_mb`` (the file's bytes) and
``max_document_pages``. The text the model reads is what its tokens count, in
usage, token counts and the context check alike.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from mlx_gateway.supervisor.engine.media_policy import MediaPolicy
from mlx_gateway.supervisor.engine.media_table import DOCUMENT, Found, modality_of
from mlx_gateway.supervisor.engine.pdf import Page, read_pdf
from mlx_gateway.supervisor.engine.url_reader import (
    TooLarge,
    UrlRules,
    decode_base64,
    fetch,
    read_data_url,
    shown,
)
from mlx_gateway.supervisor.errors import BadRequest

PDF = "application/pdf"


async def expand_documents(
    messages: list[dict[str, Any]], found: list[Found], policy: MediaPolicy
) -> list[dict[str, Any]]:
    """``messages`` with each document part (``found``) replaced by the parts the model
    reads (all documents read concurrently). A message that is all text then has its
    text as a string. Raises the first failure (a :class:`~..errors.BadRequest`)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(read_document(part, where, policy)) for where, part in found]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    expansions = iter([task.result() for task in tasks])
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(modality_of(p) == DOCUMENT for p in content):
            parts: list[Any] = []
            for part in content:
                is_document = modality_of(part) == DOCUMENT
                parts += _after(parts, next(expansions)) if is_document else [part]
            message = {**message, "content": as_text_if_all_text(parts)}
        out.append(message)
    return out


def _after(before: list[Any], parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A document's ``parts`` on a line of their own after the text ``before`` them."""
    last = before[-1] if before else None
    if not isinstance(last, dict) or last.get("type") != "text" or not parts:
        return parts
    if str(last.get("text", "")).endswith("\n") or parts[0].get("type") != "text":
        return parts
    return [{**parts[0], "text": "\n" + str(parts[0]["text"])}, *parts[1:]]


def as_text_if_all_text(parts: list[Any]) -> str | list[Any]:
    """``parts`` joined into one string when they are all text parts."""
    if all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
        return "".join(str(p.get("text", "")) for p in parts)
    return parts


async def read_document(
    part: dict[str, Any], where: str, policy: MediaPolicy
) -> list[dict[str, Any]]:
    """The parts the model reads for one document part."""
    rules = policy.of(DOCUMENT)
    file = part.get("file")
    if not isinstance(file, dict):
        raise BadRequest(
            f"The file part {where} needs a 'file' object: "
            '{"type": "file", "file": {"filename": …, '
            '"file_data": "data:application/pdf;base64,…"}}.',
            param=where,
            code="invalid_document",
        )
    head = _heading(file)
    text = file.get("text")
    if isinstance(text, str):
        if len(text.encode()) > rules.max_bytes:
            raise TooLarge(rules, f"in {where}", where)
        return [_text(head + _ended(text))]
    raw, media_type, param = await _bytes(file, where, rules)
    name = str(file.get("filename") or "")
    if media_type == PDF or raw.startswith(b"%PDF-") or name.lower().endswith(".pdf"):
        pages = await asyncio.to_thread(
            read_pdf, raw, render=policy.render, max_pages=policy.max_pages, param=param
        )
        return _pdf_parts(head, pages, param, policy)
    if media_type.startswith("text/") or (not media_type and _is_text(raw)):
        return [_text(head + _ended(raw.decode("utf-8", errors="replace")))]
    raise BadRequest(
        f"The document in {param} is of type '{media_type or 'unknown'}': the gateway reads "
        "PDF (application/pdf) and plain text (text/…) documents.",
        param=param,
        code="unsupported_document_type",
    )


def _heading(file: dict[str, Any]) -> str:
    name = file.get("title") or file.get("filename")
    head = f"Document: {name}\n" if isinstance(name, str) and name else ""
    context = file.get("context")
    if isinstance(context, str) and context:
        head += _ended(context)
    return head


def _ended(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _is_text(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _pdf_parts(
    head: str, pages: list[Page], param: str, policy: MediaPolicy
) -> list[dict[str, Any]]:
    if not policy.render and not any(page.text for page in pages):
        served = ", ".join(policy.vision_models) or "none is served now"
        raise BadRequest(
            f"The PDF in {param} has no text layer (scanned pages or images only), and the "
            f"model '{policy.model}' reads text only: send it to a vision model (model_type "
            f"vlm; served: {served}).",
            param=param,
            code="document_has_no_text",
        )
    parts: list[dict[str, Any]] = [_text(head)] if head else []
    for number, page in enumerate(pages, 1):
        if page.png is not None:
            url = f"data:image/png;base64,{base64.b64encode(page.png).decode()}"
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": "auto"}})
        parts.append(_text(f"--- Page {number} ---\n{_ended(page.text)}"))
    return parts


async def _bytes(file: dict[str, Any], where: str, rules: UrlRules) -> tuple[bytes, str, str]:
    """The document's bytes, its declared media type ('' if none) and its field."""
    data, url = file.get("file_data"), file.get("file_url")
    declared = str(file.get("media_type") or "").lower()
    if isinstance(data, str) and data:
        param = f"{where}.file.file_data"
        if data.startswith("data:"):
            raw, media_type = await asyncio.to_thread(read_data_url, data, rules, param)
            return raw, media_type or declared, param
        raw = await asyncio.to_thread(decode_base64, data, rules, param, f"in {param}")
        return raw, declared, param
    if isinstance(url, str) and url:
        param = f"{where}.file.file_url"
        if url.startswith("data:"):
            return await _bytes({**file, "file_data": url, "file_url": None}, where, rules)
        if not url.lower().startswith(("http://", "https://")):
            raise BadRequest(
                f"The document URL '{shown(url)}' is not supported: use an http(s) URL or send "
                "the file in 'file_data'.",
                param=param,
                code="invalid_document",
            )
        return await fetch(url, rules, param), declared, param
    if file.get("file_id"):
        raise BadRequest(
            f"The file part {where} names a file_id, but the gateway has no Files API: send "
            "the file itself in 'file_data' (a data: URL or base64).",
            param=f"{where}.file.file_id",
            code="file_id_not_supported",
        )
    raise BadRequest(
        f"The file part {where} holds no file: send it in 'file_data' (a data: URL or base64).",
        param=where,
        code="invalid_document",
    )
