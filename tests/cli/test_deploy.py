"""Running past one machine: the compose profile, the Kubernetes example and the
Collector configurations are wired together (read, since no Docker engine or
Collector runs here), and shards take their index from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from app.runner.work import ShardSpecError, parse_shard, shard_from_env

ROOT = Path(__file__).resolve().parents[2]


def _load(path: str) -> Any:
    return yaml.safe_load((ROOT / path).read_text())


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_the_compose_scale_profile_is_wired() -> None:
    services = _load("docker-compose.yml")["services"]
    # the default `docker compose up` stays the app plus PostgreSQL
    assert sorted(n for n, s in services.items() if not s.get("profiles")) == ["app", "db"]
    scale = {n for n, s in services.items() if "scale" in (s.get("profiles") or [])}
    assert scale == {"migrate", "replica-1", "replica-2", "sidecar-1", "sidecar-2", "collector"}
    lb = yaml.safe_load((ROOT / "deploy/otel/loadbalancer.yaml").read_text())
    sidecar = yaml.safe_load((ROOT / "deploy/otel/sidecar.yaml").read_text())
    exporter = lb["exporters"]["loadbalancing"]
    assert exporter["routing_key"] == "traceID"  # every span of a trace reaches the same replica
    assert exporter["sending_queue"]["storage"] in lb["service"]["extensions"]
    assert exporter["sending_queue"]["storage"] in lb["extensions"]
    grpc_port = _port(sidecar["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])
    backends = exporter["resolver"]["static"]["hostnames"]
    assert backends == [f"sidecar-{i}:{grpc_port}" for i in (1, 2)]
    for i in (1, 2):
        replica, side = services[f"replica-{i}"], services[f"sidecar-{i}"]
        target = urlsplit(side["environment"]["TOOLLENS_OTLP_ENDPOINT"])
        assert target.hostname == f"replica-{i}"
        command = replica["command"]
        assert command[:2] == ["toollens", "serve"] and target.port == int(command[command.index("--port") + 1])
        # the replica accepts the Host name its sidecar sends
        assert f"replica-{i}" in replica["environment"]["TOOLLENS_ALLOWED_HOSTS"].split(",")
        database = services["app"]["environment"]["TOOLLENS_DATABASE_URL"]
        assert replica["environment"]["TOOLLENS_DATABASE_URL"] == database
        assert replica["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert "sidecar.yaml" in side["command"][0]
    assert "${env:TOOLLENS_OTLP_ENDPOINT}" in sidecar["exporters"]["otlphttp/toollens"]["endpoint"]
    assert sidecar["exporters"]["otlphttp/toollens"]["headers"]["X-ToolLens-Run"] == "${env:TOOLLENS_RUN}"
    for name in ("collector", "sidecar-1"):
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).is_file(), source
    assert set(services["collector"]["depends_on"]) == {"sidecar-1", "sidecar-2"}


def test_the_kubernetes_example_is_wired() -> None:
    docs = {
        (d["kind"], d["metadata"]["name"]): d
        for d in yaml.safe_load_all((ROOT / "deploy/kubernetes/toollens.yaml").read_text())
    }
    deployment = docs[("Deployment", "toollens")]
    pod = deployment["spec"]["template"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    sidecar_ports = {p["name"] for p in containers["otel-sidecar"]["ports"]}
    headless = docs[("Service", "toollens-otlp")]
    assert headless["spec"]["clusterIP"] == "None"  # the dns resolver sees every pod
    assert headless["spec"]["selector"] == pod["metadata"]["labels"]
    assert {p["targetPort"] for p in headless["spec"]["ports"]} <= sidecar_ports
    collector = yaml.safe_load(docs[("ConfigMap", "otel-collector")]["data"]["collector.yaml"])
    exporter = collector["exporters"]["loadbalancing"]
    assert exporter["routing_key"] == "traceID"
    dns = exporter["resolver"]["dns"]
    assert dns["hostname"].split(".")[0] == "toollens-otlp"
    assert dns["port"] == headless["spec"]["ports"][0]["port"]
    sidecar = yaml.safe_load(docs[("ConfigMap", "otel-sidecar")]["data"]["sidecar.yaml"])
    app_port = containers["toollens"]["ports"][0]["containerPort"]
    assert urlsplit(sidecar["exporters"]["otlphttp/toollens"]["endpoint"]).port == app_port
    assert _port(sidecar["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]) == dns["port"]
    assert "127.0.0.1" in next(
        e["value"] for e in containers["toollens"]["env"] if e["name"] == "TOOLLENS_ALLOWED_HOSTS"
    ).split(",")
    job = yaml.safe_load((ROOT / "deploy/kubernetes/run-shards.yaml").read_text())
    assert job["spec"]["completionMode"] == "Indexed"
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert int(env["TOOLLENS_SHARDS"]) == job["spec"]["completions"]


def test_the_shard_comes_from_the_environment() -> None:
    assert shard_from_env({}) is None
    assert shard_from_env({"TOOLLENS_SHARD": "2/4"}) == "2/4"
    assert shard_from_env({"JOB_COMPLETION_INDEX": "0", "TOOLLENS_SHARDS": "4"}) == "1/4"
    assert parse_shard(shard_from_env({"JOB_COMPLETION_INDEX": "3", "TOOLLENS_SHARDS": "4"}) or "") == (4, 4)
    for bad in ({"JOB_COMPLETION_INDEX": "0"}, {"JOB_COMPLETION_INDEX": "x", "TOOLLENS_SHARDS": "2"}):
        with pytest.raises(ShardSpecError, match="TOOLLENS_SHARDS"):
            shard_from_env(bad)
    with pytest.raises(ShardSpecError):  # index 4 of 4 shards (from 0): out of range
        parse_shard(shard_from_env({"JOB_COMPLETION_INDEX": "4", "TOOLLENS_SHARDS": "4"}) or "")


def test_one_command_serves_every_shard_of_an_indexed_job(tmp_path: Path) -> None:
    """Two processes with the same command line and only JOB_COMPLETION_INDEX
    different share one run and together run every case exactly once."""
    url = f"sqlite:///{tmp_path / 'shards.db'}"
    command = [
        sys.executable,
        "-m",
        "app.cli",
        "run",
        str(ROOT / "examples/suite_v1.yaml"),
        "--agent",
        "simulated",
        "--trials",
        "2",
        "--run",
        "nightly",
        "--db",
        url,
    ]
    for index in (0, 1):
        env = {**os.environ, "JOB_COMPLETION_INDEX": str(index), "TOOLLENS_SHARDS": "2"}
        env.pop("TOOLLENS_SHARD", None)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text("select case_id, trial from trajectories")).all()
        status = conn.execute(text("select status from runs where name = 'nightly'")).scalar_one()
    engine.dispose()
    suite = yaml.safe_load((ROOT / "examples/suite_v1.yaml").read_text())
    assert len(rows) == len(set(rows)) == 2 * len(suite["cases"])
    assert status == "finished"
