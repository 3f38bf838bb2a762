"""Compares main-text extractors on the saved pages (tests/data/pages/): the figures
in docs/tools.md, "Web fetch". Run: ``uv run python -m tests.supervisor.tools.compare_extractors``.

Each page lists phrases of its main text (``content``) and of its navigation, ads,
comments and footer (``boilerplate``) in expected.json. A candidate scores the share of
content phrases it kept (recall) and the share of boilerplate phrases it left out, and
is timed over 20 runs per page.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import lxml.html
import readability
import trafilatura

PAGES = Path(__file__).resolve().parents[2] / "data" / "pages"


def with_trafilatura(html: str) -> str:
    return trafilatura.extract(html, include_comments=False, include_tables=True, fast=False) or ""


def with_trafilatura_markdown(html: str) -> str:
    return (
        trafilatura.extract(
            html, include_comments=False, include_formatting=True, output_format="markdown"
        )
        or ""
    )


def with_readability(html: str) -> str:
    summary = readability.Document(html).summary(html_partial=True)
    return str(lxml.html.fromstring(summary).text_content())


def whole_page_text(html: str) -> str:
    """The baseline: every text node of the body (lxml, no extraction)."""
    root = lxml.html.fromstring(html)
    for bad in root.xpath("//script|//style"):
        bad.drop_tree()
    return str(root.body.text_content())


CANDIDATES: dict[str, Callable[[str], str]] = {
    "trafilatura": with_trafilatura,
    "trafilatura (markdown)": with_trafilatura_markdown,
    "readability-lxml + lxml text": with_readability,
    "lxml whole body (baseline)": whole_page_text,
}


def normalized(text: str) -> str:
    return " ".join(text.split())


def main() -> None:
    expected = json.loads((PAGES / "expected.json").read_text())
    for name, extract in CANDIDATES.items():
        kept = total_content = dropped = total_boiler = 0
        seconds = 0.0
        per_page = []
        for page, facts in expected.items():
            html = (PAGES / page).read_text()
            start = time.perf_counter()
            for _ in range(20):
                text = extract(html)
            seconds += (time.perf_counter() - start) / 20
            flat = normalized(text)
            k = sum(normalized(p) in flat for p in facts["content"])
            d = sum(normalized(p) not in flat for p in facts["boilerplate"])
            code_lines = "    response = session.get(" in text if page == "docs_page.html" else None
            per_page.append(
                f"{page}: {k}/{len(facts['content'])} kept, "
                f"{d}/{len(facts['boilerplate'])} dropped"
                + (
                    ""
                    if code_lines is None
                    else f", code indentation {'kept' if code_lines else 'lost'}"
                )
            )
            kept += k
            total_content += len(facts["content"])
            dropped += d
            total_boiler += len(facts["boilerplate"])
        print(
            f"{name}: content {kept}/{total_content}, boilerplate dropped "
            f"{dropped}/{total_boiler}, {seconds / len(expected) * 1000:.1f} ms a page"
        )
        for line in per_page:
            print("   ", line)


if __name__ == "__main__":
    main()
