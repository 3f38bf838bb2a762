"""Claude Code reading a PDF and a PNG, end to end: the real client (the release the
agent tests pin) against the real gateway command, whose models are the fake worker
playing a script: Read the PDF, Read the PNG, then say what the model received.
Claude Code sends the PDF back as a ``document`` block and the PNG as an ``image``
block inside its ``tool_result``s; every request of the session is answered 200
(through a recording proxy). A text model reads the PDF's text, page by page, and a
note where the PNG was; a vision model's worker gets the PDF's pages and the PNG as
PNG frames in the tool turns."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.fixtures.pdfs import text_pdf

from ..supervisor.fakes import FAKE_WORKER
from .gateway import Gateway
from .test_claude_code_tool_search import call
from .test_coding_agents_anthropic import claude_code, run_claude

pytestmark = pytest.mark.slow
__all__ = ["claude_code"]  # fixtures

TEXT = "scripted-reader"
VISION = "scripted-viewer"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The gateway command with a text model and a vision model, both the fake
    worker (Hermes tool calls, parsed by the gateway as for a real model)."""
    tmp = tmp_path_factory.mktemp("cc-documents")
    shim = tmp / "worker.sh"
    shim.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{FAKE_WORKER}" "$@"\n')
    shim.chmod(0o755)
    models = []
    for name, kind in ((TEXT, "lm"), (VISION, "vlm")):
        (tmp / name / "fake" / "ok").mkdir(parents=True)
        models.append(
            {
                "model_path": str(tmp / name / "fake" / "ok"),
                "served_model_name": name,
                "model_type": kind,
                "python": str(shim),
                "tool_call_parser": "hermes",
                "idle_timeout": 0,
            }
        )
    gw = Gateway(tmp, models, log_level="debug")
    try:
        yield gw
    finally:
        gw.stop()


def files(project: Path) -> tuple[Path, Path]:
    project.mkdir(parents=True, exist_ok=True)
    pdf, png = project / "report.pdf", project / "screen.png"
    pdf.write_bytes(text_pdf("Quarterly numbers rose", "Costs fell sharply"))
    picture = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(picture, "PNG")
    png.write_bytes(picture.getvalue())
    return pdf, png


def session_of(claude: Path, gateway: Gateway, tmp: Path, model: str, last: str) -> Any:
    pdf, png = files(tmp / "project")
    script = " ;; ".join(
        [call("Read", {"file_path": str(pdf)}), call("Read", {"file_path": str(png)}), last]
    )
    return run_claude(
        claude, gateway, tmp, model, f"script {script}", flags=("--allowedTools", "Read")
    )


def sent_blocks(body: dict[str, Any]) -> list[str]:
    """The block types inside the tool results Claude Code sent."""
    return [
        inner.get("type")
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list)
        for inner in block["content"]
    ]


def said(exchange: Any) -> str:
    """The text the model streamed in one answer."""
    text = ""
    for line in exchange.answer.decode().splitlines():
        if line.startswith("data:"):
            delta = json.loads(line.removeprefix("data:")).get("delta", {})
            text += delta.get("text", "")
    return text


def test_claude_code_reads_a_pdf_and_a_png_with_a_text_model(
    claude_code: Path, scripted: Gateway, tmp_path: Path
) -> None:
    session = session_of(claude_code, scripted, tmp_path, TEXT, "results")
    statuses = [(e.path, e.status) for e in session.exchanges]
    assert len(session.messages) == 3, statuses
    last = session.messages[-1]
    assert "document" in sent_blocks(last.body) and "image" in sent_blocks(last.body), statuses
    words = said(last).split()
    # the PDF's text layer, page by page, and a note where the picture was
    pages = "--- Page 1 --- Quarterly numbers rose --- Page 2 --- Costs fell sharply"
    assert " ".join(words).find(pages) >= 0, words
    assert "[An image was left out here" in " ".join(words), words
    assert "tool-result image(s) left out" in scripted.log()


def test_claude_code_reads_a_pdf_and_a_png_with_a_vision_model(
    claude_code: Path, scripted: Gateway, tmp_path: Path
) -> None:
    session = session_of(claude_code, scripted, tmp_path, VISION, "media")
    statuses = [(e.path, e.status) for e in session.exchanges]
    assert len(session.messages) == 3, statuses
    words = said(session.messages[-1]).split()
    # two rendered pages and the screenshot, each a PNG frame of a tool turn
    assert words.count("tool:image") == 3 and words[-2:] == ["frames=3", "png=3"], words
