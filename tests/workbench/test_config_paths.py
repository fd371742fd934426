"""Paths a sweep spec writes: `publish.prometheus` climbing out of the repository is refused when the
spec is read (exit 2, one line naming the file, line and key) and nothing is written; a file raglab did not write
is never overwritten by a publish."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.workbench.config import load_spec
from lab.workbench.monitoring import PublishError, write_textfile

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "tests" / "fixtures" / "notebooks" / "tiny_experiment.ipynb"


def fake_repo(tmp_path: Path) -> Path:
    """A folder lab takes for a repository root (pyproject.toml and lab/), with params/."""
    repo = tmp_path / "clone"
    (repo / "lab").mkdir(parents=True)
    (repo / "params").mkdir()
    (repo / "pyproject.toml").write_text("")
    return repo


def spec_text(prometheus: str) -> str:
    return (f"notebook: {NOTEBOOK}\ndataset: {REPO / 'data' / 'ord-qa'}\nexperiment: paths\n"
            f"fixed: {{strategy: bm25}}\npublish:\n  prometheus: {prometheus}\n")


def test_a_publish_path_that_climbs_out_of_the_repo_is_refused_naming_file_line_and_key(tmp_path):
    repo = fake_repo(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    spec = repo / "params" / "evil.yaml"
    spec.write_text(spec_text("../../victim.txt"))
    with pytest.raises(ConfigError) as err:
        load_spec(spec)
    assert f"{spec}, line 6, key 'publish.prometheus'" in str(err.value) and "outside the repository" in str(err.value)
    spec.write_text(spec_text(str(victim)))  # an absolute path outside: refused as well
    with pytest.raises(ConfigError, match="outside the repository"):
        load_spec(spec)
    inside = repo / "params" / "fine.yaml"
    inside.write_text(spec_text("results/metrics/raglab.prom"))
    assert load_spec(inside).publish["prometheus"] == "results/metrics/raglab.prom"

    proc = subprocess.run([sys.executable, "-m", "lab", "sweep", str(spec), "--root", str(tmp_path / "mlruns")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {spec}, line 6, key 'publish.prometheus'"), proc.stderr
    assert victim.read_text() == "keep me" and not (tmp_path / "mlruns").exists()  # refused before any work


def test_a_symlink_inside_the_repo_pointing_out_is_refused(tmp_path):
    repo = fake_repo(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (repo / "results").symlink_to(tmp_path / "elsewhere")
    spec = repo / "params" / "link.yaml"
    spec.write_text(spec_text("results/raglab.prom"))
    with pytest.raises(ConfigError, match="outside the repository"):
        load_spec(spec)


def test_publishing_never_overwrites_a_file_raglab_did_not_write(tmp_path):
    foreign = tmp_path / "victim.txt"
    foreign.write_text("root:x:0:0\n")
    with pytest.raises(PublishError, match="a file raglab did not write is there"):
        write_textfile("# HELP raglab_x x\n# TYPE raglab_x gauge\nraglab_x 1\n", foreign)
    assert foreign.read_text() == "root:x:0:0\n"
    ours = tmp_path / "ours.prom"
    write_textfile("# HELP raglab_x x\n# TYPE raglab_x gauge\nraglab_x 1\n", ours)
    write_textfile("# HELP raglab_x x\n# TYPE raglab_x gauge\nraglab_x 2\n", ours)  # raglab's own: replaced
    assert ours.read_text().endswith("raglab_x 2\n")
    other_metrics = tmp_path / "node.prom"  # another exporter's textfile: not ours either
    other_metrics.write_text("# TYPE node_x gauge\nnode_x 1\n")
    with pytest.raises(PublishError):
        write_textfile("raglab_x 3\n", other_metrics)
