"""`lab notebook` (`make lab`): JupyterLab on the notebooks, local only, with a token and the raglab kernel; a thin
command over lab.workbench.notebook_server (which documents the conventions)."""
from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys

from lab.core.errors import ConfigError
from lab.core.net import exposure_warning
from lab.workbench.notebook_server import (
    DEFAULT_PORT,
    KERNEL_NAME,
    jupyterlab_command,
    jupyterlab_env,
    lab_url,
    notebook_dir,
    port_free,
)


def cmd_notebook(args) -> int:
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: give a TCP port between 1 and 65535")
    if not args.print and not port_free(args.host, args.port):
        raise ConfigError(f"--port {args.port}: something already listens on {args.host}:{args.port}; "
                          "pass another, e.g. --port 8890")
    token = args.token or os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
    cmd = jupyterlab_command(notebook_dir(), args.host, args.port)
    if args.print:
        print(f"JUPYTER_TOKEN={shlex.quote(token)} {shlex.join(cmd)}")
        return 0
    warning = exposure_warning(args.host, args.port, "JupyterLab (the notebooks/ folder and Python kernels that run "
                               "any code as this user, for whoever holds the token)")
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(f"JupyterLab on the notebooks (kernel {KERNEL_NAME!r}); open\n  {lab_url(args.host, args.port, token)}\n"
          "(Ctrl-C to stop)", flush=True)
    env = jupyterlab_env(token, {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1",
                                 "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 0


def add_parsers(sub) -> None:
    """Add the `notebook` subcommand to an argparse subparsers object."""
    n = sub.add_parser("notebook", help="start JupyterLab on notebooks/ (127.0.0.1, token, raglab kernel)")
    n.add_argument("--host", default="127.0.0.1")
    n.add_argument("--port", type=int, default=DEFAULT_PORT)
    n.add_argument("--token", help="the access token (default: $JUPYTER_TOKEN, else a random one, printed in the URL); "
                   "JupyterLab gets it by environment, not on its command line")
    n.add_argument("--print", action="store_true", help="only print the command")
    n.set_defaults(func=cmd_notebook)
