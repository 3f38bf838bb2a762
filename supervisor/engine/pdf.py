"""A PDF's pages as a model reads them: the text layer of each page (pypdf) and,
for vision models, each page rendered as a PNG (pypdfium2).

Synchronous and CPU-bound: :mod:`.documents` runs it in a thread, never on the
event loop. Failures are 400s naming the request part: an encrypted PDF (one
that needs a password to open), a file that is no PDF or is broken, more pages
than the model's ``max_document_pages``.
"""

from __future__ import annotations

import io
import logging
import struct
import zlib
from dataclasses import dataclass

from mlx_gateway.supervisor.errors import BadRequest

logger = logging.getLogger(__name__)

RENDER_LONG_SIDE = 1024
"""Pixels of a rendered page's longer side (a US Letter page: 791 x 1024)."""


@dataclass(frozen=True)
class Page:
    """One page: its text layer (may be empty) and, if rendered, its PNG."""

    text: str
    png: bytes | None = None


def read_pdf(data: bytes, *, render: bool, max_pages: int, param: str) -> list[Page]:
    """The pages of the PDF ``data``: text always, a PNG each when ``render``."""
    texts = _texts(data, max_pages, param)
    if not render:
        return [Page(text) for text in texts]
    return [Page(text, png) for text, png in zip(texts, _render(data, param), strict=True)]


def _broken(param: str, why: str) -> BadRequest:
    return BadRequest(
        f"The PDF in {param} cannot be read: {why}.", param=param, code="invalid_document"
    )


def _texts(data: bytes, max_pages: int, param: str) -> list[str]:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):  # 0: not decrypted
            raise BadRequest(
                f"The PDF in {param} is encrypted (it needs a password to open); send it "
                "decrypted.",
                param=param,
                code="encrypted_document",
            )
        pages = reader.pages
        count = len(pages)
    except BadRequest:
        raise
    except Exception as exc:  # pypdf raises many kinds for a broken file
        raise _broken(param, str(exc) or type(exc).__name__) from None
    if count == 0:
        raise _broken(param, "it has no pages")
    if count > max_pages:
        raise BadRequest(
            f"The PDF in {param} has {count} pages; this model reads at most {max_pages} "
            "(max_document_pages).",
            param=param,
            code="document_too_long",
        )
    texts = []
    for number, page in enumerate(pages, 1):
        try:
            texts.append((page.extract_text() or "").strip())
        except Exception as exc:
            raise _broken(param, f"page {number}: {exc or type(exc).__name__}") from None
    return texts


def _render(data: bytes, param: str) -> list[bytes]:
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(data)
    except Exception as exc:
        raise _broken(param, str(exc) or type(exc).__name__) from None
    try:
        images = []
        for index in range(len(document)):
            page = document[index]
            width, height = page.get_size()
            scale = min(2.0, RENDER_LONG_SIDE / max(width, height, 1.0))
            bitmap = page.render(scale=scale, rev_byteorder=True)
            images.append(_png(bitmap))
            page.close()
        return images
    finally:
        document.close()


def _png(bitmap: object) -> bytes:
    """A PNG of a pypdfium2 bitmap (RGB or RGBA rows), without Pillow."""
    width: int = getattr(bitmap, "width")  # noqa: B009 - pypdfium2 types are loose
    height: int = getattr(bitmap, "height")  # noqa: B009
    stride: int = getattr(bitmap, "stride")  # noqa: B009
    channels: int = getattr(bitmap, "n_channels")  # noqa: B009
    raw = bytes(getattr(bitmap, "buffer"))  # noqa: B009
    color = {1: 0, 3: 2, 4: 6}[channels]
    row = width * channels
    rows = b"".join(b"\0" + raw[y * stride : y * stride + row] for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    header = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 6))
        + chunk(b"IEND", b"")
    )
