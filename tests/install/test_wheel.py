"""The wheel, installed outside the repository: ``uv build --wheel`` from a copy of
the source tree, ``uv venv`` + ``uv pip install`` into fresh virtualenvs, and the
installed ``mlx-gateway`` command serving a real worker from there.

Installs come from uv's cache (the versions of uv.lock, as constraints), so the
whole module takes seconds once the cache holds the locked packages.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from mlx_gateway.protocol.kinds import KINDS
from tests.e2e.gateway import free_port
from tests.fixtures.tiny_flux2 import CONFIG_NAME as FLUX_CONFIG_NAME
from tests.fixtures.tiny_flux2 import MODEL_CONFIG as FLUX_MODEL_CONFIG

FOX_MP3 = Path(__file__).resolve().parents[1] / "data" / "fox.mp3"

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = ("protocol", "store", "supervisor", "workers")
PROBE = "supervisor/_packaging_probe/data.txt"
"""A non-Python file in a folder that is not a package, added to the copy that is
built: package data such as static files must reach the wheel."""


def uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.skip("uv is not on PATH (the README's test command runs under uv)")
    return found


def run(*args: str | Path, cwd: Path | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def source_files() -> list[str]:
    """Tracked files and untracked ones git does not ignore (a new module not yet
    added); outside a git checkout, every file but bytecode and build output."""
    git = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if git.returncode == 0:
        return [name for name in git.stdout.split("\0") if name and (ROOT / name).is_file()]
    skip = {".git", ".venv", "__pycache__", "build", "dist", ".mypy_cache", ".ruff_cache"}
    return [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*")
        if path.is_file()
        and not skip & set(path.relative_to(ROOT).parts)
        and not path.name.endswith((".pyc", ".egg-info"))
        and not any(part.endswith(".egg-info") for part in path.relative_to(ROOT).parts)
    ]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, a constraints file pinning uv.lock's versions)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in source_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    (src / PROBE).parent.mkdir(parents=True)
    (src / PROBE).write_text("package data\n")
    run(uv(), "build", "--wheel", "--quiet", "--out-dir", tmp / "dist", src, timeout=300)
    (wheel,) = (tmp / "dist").glob("mlx_gateway-*.whl")
    constraints = tmp / "constraints.txt"
    run(
        uv(), "export", "--project", ROOT, "--locked", "--all-extras", "--all-groups",
        "--no-hashes", "--no-emit-project", "--no-header", "--quiet", "--output-file", constraints,
    )  # fmt: skip
    return wheel, constraints


def make_venv(tmp: Path, build: tuple[Path, Path], extras: str = "") -> Path:
    wheel, constraints = build
    venv = tmp / "venv"
    run(uv(), "venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    requirement = f"mlx-gateway{extras} @ {wheel.as_uri()}"
    run(uv(), "pip", "install", "--quiet", "--python", python, "-c", constraints, requirement)
    return venv


@pytest.fixture(scope="module")
def gateway_venv(build: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel with the gateway's own dependencies only."""
    return make_venv(tmp_path_factory.mktemp("bare"), build)


@pytest.fixture(scope="module")
def lm_venv(build: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel with its [lm] extra."""
    return make_venv(tmp_path_factory.mktemp("lm"), build, "[lm]")


def installed(venv: Path) -> set[str]:
    out = run(uv(), "pip", "freeze", "--python", venv / "bin" / "python")
    return {line.split("==")[0].split(" @ ")[0].lower() for line in out.splitlines()}


def test_the_wheel_holds_every_module_and_data_file(build: tuple[Path, Path]) -> None:
    wheel, _ = build
    with zipfile.ZipFile(wheel) as archive:
        inside = set(archive.namelist())
        metadata = next(n for n in inside if n.endswith(".dist-info/METADATA"))
        requires = [
            line.removeprefix("Requires-Dist: ")
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist: ")
        ]
    expected = {
        f"mlx_gateway/{name}" for name in source_files() if name.startswith(PACKAGE_ROOTS)
    } | {f"mlx_gateway/{PROBE}"}
    assert expected - inside == set()
    assert any(n.startswith("mlx_gateway/supervisor/api/chat/") for n in inside)
    assert not [n for n in inside if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in inside if n.startswith(("tests/", "bench/", "mlx_gateway/tests"))]
    # The gateway's own requirements name no backend and no MLX.
    plain = [r for r in requires if "extra ==" not in r]
    assert plain and not [r for r in plain if r.startswith(("mlx", "torch", "numpy"))]


def test_the_bare_install_runs_the_cli_without_mlx(gateway_venv: Path, tmp_path: Path) -> None:
    packages = installed(gateway_venv)
    assert "mlx-gateway" in packages
    assert not packages & {"mlx", "mlx-lm", "torch", "numpy", "transformers"}
    help_text = run(gateway_venv / "bin" / "mlx-gateway", "--help", cwd=tmp_path)
    assert "launch" in help_text
    where = run(
        gateway_venv / "bin" / "python", "-c",
        "import mlx_gateway.supervisor.api.chat.routes as m; print(m.__file__)",
        cwd=tmp_path,
    )  # fmt: skip
    assert where.startswith(str(gateway_venv))


class Launched:
    """``mlx-gateway launch`` of a venv, on a free port, serving an lm model (and more)."""

    def __init__(
        self, venv: Path, tmp: Path, model_path: Path, more: list[dict[str, Any]] | None = None
    ) -> None:
        self.port = free_port()
        config = tmp / "config.yaml"
        server = {"port": self.port, "shutdown_grace": 1, "start_timeout": 120}
        models = [{"served_model_name": "tiny", "model_path": str(model_path)}, *(more or [])]
        config.write_text(yaml.safe_dump({"server": server, "models": models}))
        self.log_path = tmp / "gateway.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(venv / "bin" / "mlx-gateway"), "launch", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tmp,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
        self.base_url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while not self._healthy():
            assert self.proc.poll() is None, f"gateway exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"gateway not healthy:\n{self.log()}"
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key="unused", max_retries=0, timeout=120
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


Launch = Callable[..., Launched]


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    started: list[Launched] = []

    def start(venv: Path, model_path: Path, more: list[dict[str, Any]] | None = None) -> Launched:
        started.append(Launched(venv, tmp_path, model_path, more))
        return started[-1]

    yield start
    for gateway in started:
        gateway.stop()


def test_the_installed_gateway_serves_the_web_ui_files(
    gateway_venv: Path, tiny_lm_path: Path, launch: Launch
) -> None:
    """Package data: the UI's static files are read from the installed wheel."""
    gateway = launch(gateway_venv, tiny_lm_path)
    static = sorted((ROOT / "supervisor" / "api" / "ui" / "static").iterdir())
    assert static
    for path in static:
        url = "/ui" if path.name == "index.html" else f"/ui/static/{path.name}"
        response = httpx.get(gateway.base_url + url, timeout=5)
        assert response.status_code == 200, (url, response.text)
        assert response.content == path.read_bytes()


def test_a_missing_backend_fails_the_load_with_the_install_command(
    gateway_venv: Path, tiny_lm_path: Path, launch: Launch
) -> None:
    gateway = launch(gateway_venv, tiny_lm_path)
    hint = "backend mlx-lm is not installed: pip install 'mlx-gateway[lm]'"
    with pytest.raises(openai.APIStatusError) as caught:
        gateway.client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    assert caught.value.status_code == 503
    assert hint in caught.value.message, caught.value.message
    health = httpx.get(f"{gateway.base_url}/health", timeout=5).json()
    model = health["models"]["tiny"]
    assert model["state"] == "failed", model
    assert hint in str(model), model
    assert hint in gateway.log()


def test_the_lm_extra_serves_a_model_from_the_wheel(
    lm_venv: Path, tiny_lm_path: Path, launch: Launch
) -> None:
    packages = installed(lm_venv)
    assert {"mlx", "mlx-lm", "llguidance"} <= packages
    assert not packages & {"torch", "mlx-cuda-12", "mlx-cuda-13"}
    gateway = launch(lm_venv, tiny_lm_path)
    reply = gateway.client().chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.completion_tokens >= 1
    health = httpx.get(f"{gateway.base_url}/health", timeout=5).json()
    assert health["models"]["tiny"]["state"] == "ready", health


@pytest.fixture(scope="module")
def all_venv(build: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/install.md's pip recipe: the wheel with [all], then the two backends
    whose declared dependencies include torch, with --no-deps."""
    venv = make_venv(tmp_path_factory.mktemp("all"), build, "[all]")
    no_deps = [extra.no_deps for extra in (kind.extra for kind in KINDS.values()) if extra.no_deps]
    _, constraints = build
    python = venv / "bin" / "python"
    run(
        uv(),
        "pip",
        "install",
        "--quiet",
        "--python",
        python,
        "-c",
        constraints,
        "--no-deps",
        *no_deps,
    )
    return venv


def png(size: int = 32) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (size, size), (200, 30, 30)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_every_backend_serves_from_an_all_install(
    all_venv: Path,
    tiny_lm_path: Path,
    tiny_bert_path: Path,
    tiny_vlm_path: Path,
    tiny_whisper_path: Path,
    tiny_flux2_path: Path,
    launch: Launch,
) -> None:
    packages = installed(all_venv)
    assert {"mlx-lm", "mlx-vlm", "mlx-embeddings", "mlx-whisper", "mflux"} <= packages
    assert not packages & {"torch", "mlx-cuda-12", "mlx-cuda-13"}
    gateway = launch(
        all_venv,
        tiny_lm_path,
        [
            {
                "served_model_name": "bert",
                "model_path": str(tiny_bert_path),
                "model_type": "embeddings",
            },
            {"served_model_name": "vl", "model_path": str(tiny_vlm_path), "model_type": "vlm"},
            {
                "served_model_name": "whisper",
                "model_path": str(tiny_whisper_path),
                "model_type": "whisper",
            },
            {
                "served_model_name": "flux",
                "model_path": str(tiny_flux2_path),
                "model_type": "image-generation",
                "config_name": FLUX_CONFIG_NAME,
                "model_config": FLUX_MODEL_CONFIG,
                "size": "16x16",
            },
        ],
    )
    client = gateway.client()

    def embed() -> None:
        embedded = client.embeddings.create(model="bert", input=["a short text"])
        assert len(embedded.data[0].embedding) > 0

    def see() -> None:
        image = {"type": "image_url", "image_url": {"url": png()}}
        seen = client.chat.completions.create(
            model="vl",
            messages=[{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}],
            max_tokens=3,
        )
        assert seen.usage is not None and seen.usage.completion_tokens >= 1

    def hear() -> None:
        with FOX_MP3.open("rb") as audio:
            heard = client.audio.transcriptions.create(model="whisper", file=audio)
        assert isinstance(heard.text, str)  # a random model: words, not the fox

    def draw() -> None:
        drawn = client.images.generate(model="flux", prompt="a red cat", extra_body={"steps": 2})
        assert drawn.data and base64.b64decode(drawn.data[0].b64_json or "")[:4] == b"\x89PNG"

    # At once: the four workers load side by side.
    with ThreadPoolExecutor(4) as pool:
        for done in [pool.submit(task) for task in (embed, see, hear, draw)]:
            done.result()
