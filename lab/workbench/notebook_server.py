"""`lab notebook` / `make lab`: JupyterLab on the notebooks, local only, with a token and the raglab kernel.

Conventions
- JupyterLab (pinned in requirements.txt, with jupytext so paired ``.py`` notebooks open as notebooks and
  ipywidgets so tqdm progress bars render as widgets) runs from the same environment as ``lab``.
- Its contents manager is jupytext's (``jupytext.AsyncTextFileContentsManager``, named on the command line so it
  does not depend on jupytext's server extension being enabled): ``notebooks/jupytext.toml`` pairs each
  ``.ipynb`` with a ``py:percent`` script, so saving either in JupyterLab rewrites the other, and opening a notebook
  takes its cells from the newer of the two (https://jupytext.readthedocs.io/en/latest/paired-notebooks.html).
- It listens on 127.0.0.1 only, asks for a token (random unless ``JUPYTER_TOKEN`` or ``--token`` gives one) and serves
  the ``notebooks/`` folder of the repository; the printed URL carries the token. The token reaches JupyterLab in
  its environment (``JUPYTER_TOKEN``, :func:`jupyterlab_env`), never on its command line, which any local user can
  read (``ps``). Another ``--host`` prints a warning: a kernel runs code for whoever holds the token.
- New notebooks start the ``raglab`` kernel (the one ``make setup`` installs into .venv); the four notebooks name
  it in their metadata already.
- Offline: no update check, no news feed or prompt about it (settings in ``resources/jupyterlab/overrides.json``)
  and a read-only extension manager (each would reach the internet).
- As root (containers, CI) it passes ``--allow-root``, which Jupyter otherwise refuses.
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from lab.core.paths import repo_root

#: The Jupyter kernel that runs this environment's Python (installed by `make setup`).
KERNEL_NAME = "raglab"
DEFAULT_PORT = 8888
#: jupytext's contents manager (async, as jupyter_server's default): keeps .ipynb / .py pairs in sync on save.
CONTENTS_MANAGER = "jupytext.AsyncTextFileContentsManager"
#: JupyterLab settings raglab ships (overrides.json: no news or update prompts, which would need the internet).
SETTINGS_DIR = Path(__file__).resolve().parents[1] / "resources" / "jupyterlab"


def notebook_dir() -> Path:
    """The repository's notebooks/ folder."""
    return repo_root() / "notebooks"


def jupyterlab_command(root: str | Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> list[str]:
    """The ``jupyter lab`` command line serving ``root`` (see the module docstring for what each part is for); no
    token in it: pass :func:`jupyterlab_env` as its environment."""
    exe = Path(sys.executable).with_name("jupyter-lab")
    return [str(exe) if exe.exists() else "jupyter-lab", "--no-browser", f"--ServerApp.ip={host}",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
            f"--MultiKernelManager.default_kernel_name={KERNEL_NAME}",
            f"--ServerApp.contents_manager_class={CONTENTS_MANAGER}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.news_url=None",
            "--LabApp.extension_manager=readonly", f"--LabApp.app_settings_dir={SETTINGS_DIR}"] + (
        ["--allow-root"] if os.geteuid() == 0 else [])


def jupyterlab_env(token: str, base: dict | None = None) -> dict[str, str]:
    """The environment JupyterLab starts with: ``base`` (default ``os.environ``) plus ``JUPYTER_TOKEN`` = ``token``
    (jupyter_server's IdentityProvider reads it; nothing else shows it, unlike argv)."""
    return {**(os.environ if base is None else base), "JUPYTER_TOKEN": token}


def lab_url(host: str, port: int, token: str, path: str = "") -> str:
    """URL of JupyterLab (optionally of one notebook, ``path`` relative to the served folder) with the token."""
    where = f"/lab/tree/{path}" if path else "/lab"
    return f"http://{host}:{port}{where}?token={token}"


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` (binding it succeeds)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
