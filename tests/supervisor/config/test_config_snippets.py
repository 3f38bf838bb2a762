"""Every YAML the project shows loads: config.example.yaml and each ```yaml block of
the README and docs/ (a block with a ``server:`` section alone gets one model), with
each entry decoded as its ``model_type``'s Struct."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from mlx_gateway.supervisor.config import load_config
from mlx_gateway.supervisor.config.kinds import entry_type

REPO = Path(__file__).resolve().parents[3]
_BLOCK = re.compile(r"```ya?ml\n(.*?)```", re.DOTALL)


def _snippets() -> list[tuple[str, str]]:
    found = []
    for doc in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        text = doc.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            data = yaml.safe_load(match.group(1))
            if isinstance(data, dict) and ("models" in data or "server" in data):
                line = text[: match.start()].count("\n") + 2
                found.append((f"{doc.relative_to(REPO)}:{line}", match.group(1)))
    return found


SNIPPETS = _snippets()


def test_the_docs_show_model_entries() -> None:
    assert sum("models:" in body for _, body in SNIPPETS) >= 8


@pytest.mark.parametrize(("where", "body"), SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_a_yaml_snippet_of_the_docs_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, body: str
) -> None:
    data = yaml.safe_load(body)
    if "models" not in data:  # a server section: the models it names, as speech models
        wyoming = (data["server"] or {}).get("wyoming") or {}
        names = wyoming.get("models") or ["model"]
        body += "\nmodels:\n" + "".join(
            f"  - model_path: org/{name}\n    served_model_name: {name}\n    model_type: whisper\n"
            for name in names
        )
    folder = tmp_path / "here"  # the snippet's own files, relative to its folder
    for entry in data.get("models") or []:
        path = str(entry.get("model_path", ""))
        if path.startswith(("./", "../")):
            (folder / path).mkdir(parents=True, exist_ok=True)
        if template := entry.get("chat_template_file"):
            (folder / template).parent.mkdir(parents=True, exist_ok=True)
            (folder / template).write_text("{{ messages }}", encoding="utf-8")
        if "/" in (python := str(entry.get("python") or "")):
            (folder / python).parent.mkdir(parents=True, exist_ok=True)
            (folder / python).symlink_to(sys.executable)
    folder.mkdir(exist_ok=True)
    for app in (data.get("server") or {}).get("keys") or []:  # server.keys: their keys
        if "key_env" in app:
            monkeypatch.setenv(app["key_env"], f"sk-doc-{app['name']}")
        if "key_file" in app:
            (folder / app["key_file"]).parent.mkdir(parents=True, exist_ok=True)
            (folder / app["key_file"]).write_text(f"sk-doc-{app['name']}\n", encoding="utf-8")
    file = folder / "config.yaml"
    file.write_text(body, encoding="utf-8")
    config = load_config(file)
    for model in config.models:
        assert type(model) is entry_type(model.model_type), where


def test_the_example_config_gives_each_entry_its_kinds_struct() -> None:
    config = load_config(REPO / "config.example.yaml")
    for model in config.models:
        assert type(model) is entry_type(model.model_type)
    assert {model.worker_kind for model in config.models} >= {"lm", "vlm", "image", "tts"}
