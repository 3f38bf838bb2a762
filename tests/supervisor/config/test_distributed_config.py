"""The ``distributed:`` block of a model entry, and the ``mlx.launch`` command it makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_gateway.protocol.spec import decode_spec
from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.config.schema import DistributedConfig
from mlx_gateway.supervisor.pool.memory import estimate
from mlx_gateway.supervisor.pool.worker_spec import default_command, spec_for


def write(tmp_path: Path, model: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("models:\n  - model_path: org/model\n" + model)
    return path


def test_a_distributed_entry_becomes_an_mlx_launch_command(tmp_path: Path) -> None:
    (tmp_path / "hosts.json").write_text("[]")
    config = load_config(
        write(
            tmp_path,
            "    distributed:\n"
            "      hosts: [mac-1.local, mac-2.local]\n"
            "      parallel: pipeline\n"
            "      starting_port: 5000\n"
            "      python: /opt/venv/bin/python\n"
            "    worker_env: {HF_HOME: /Volumes/models}\n",
        )
    )
    model = config.models[0]
    assert model.distributed is not None and model.distributed.backend == "ring"
    spec = spec_for(model, "w#1")
    assert spec.options["distributed"] == "pipeline"
    argv = list(default_command(model)(spec, "ipc:///tmp/gw.sock"))
    separator = argv.index("--")
    launch, worker = argv[:separator], argv[separator + 1 :]
    assert launch[1:3] == ["-m", "mlx_gateway.workers.runtime.launch"]
    assert launch[3:] == [
        "--backend",
        "ring",
        "--hosts",
        "mac-1.local,mac-2.local",
        "--starting-port",
        "5000",
        "--python",
        "/opt/venv/bin/python",
        "--env",
        "PYTHONUNBUFFERED=1",
        "--env",
        "HF_HOME=/Volumes/models",
    ]
    assert worker[1:3] == ["-m", "mlx_gateway.workers"]
    assert decode_spec(worker[worker.index("--spec") + 1]) == spec

    config = load_config(
        write(
            tmp_path,
            "    distributed:\n"
            "      hosts: [127.0.0.1]\n"
            "      ranks_per_host: 4\n"
            "      backend: jaccl\n"
            "      hostfile: hosts.json\n",
        )
    )
    argv = list(default_command(config.models[0])(spec, "ipc:///tmp/gw.sock"))
    launch = argv[: argv.index("--")]
    assert launch[3:] == [
        "--backend",
        "jaccl",
        "--hostfile",
        str(tmp_path / "hosts.json"),
        "--repeat-hosts",
        "4",
        "--env",
        "PYTHONUNBUFFERED=1",
    ]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "    model_type: embeddings\n    distributed: {hosts: [a, b]}\n",
            "distributed applies to language models",
        ),
        ("    distributed: {hosts: [a]}\n", "at least 2 ranks"),
        ("    distributed: {hosts: []}\n", "distributed.hosts"),
        ("    distributed: {hosts: [a, b], backend: mpi}\n", "distributed.backend"),
        ("    distributed: {hosts: [a, b], hostfile: nowhere.json}\n", "does not exist"),
    ],
)
def test_a_wrong_distributed_block_is_named(tmp_path: Path, model: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, model))


def test_only_this_machines_share_counts_against_its_budget(tiny_lm_path: Path) -> None:
    model = str(tiny_lm_path)
    whole = estimate(model_entry(model_path=model)).parts
    assert whole["weights"] > 0 and whole["runtime"] > 0

    def share(hosts: list[str], per_host: int = 1) -> dict[str, int]:
        spread = DistributedConfig(hosts=hosts, ranks_per_host=per_host)
        return estimate(model_entry(model_path=model, distributed=spread)).parts

    two = share(["mac-1", "mac-2"])
    assert two["weights"] == whole["weights"] // 2 and two["kv"] == whole["kv"] // 2
    assert two["runtime"] == whole["runtime"]  # one process here, with its own runtime
    four = share(["mac-1", "mac-2", "mac-3", "mac-4"])
    assert four["weights"] == whole["weights"] // 4
    local = share(["127.0.0.1"], per_host=2)  # both ranks on this machine
    assert local["weights"] == whole["weights"] and local["runtime"] == 2 * whole["runtime"]
