"""`lab notebook` (`make lab`): JupyterLab on the notebooks, local only, with a token and the raglab kernel; a thin
command over lab.workbench.notebook_server (which documents the conventions)."""
from __future__ import annotations

import os
import secrets

from lab.workbench.notebook_server import (DEFAULT_PORT, KERNEL_NAME, jupyterlab_command, lab_url, notebook_dir,
                                           port_free)


def cmd_notebook(args) -> int:
    import shlex
    import subprocess

    from lab.core.errors import ConfigError

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: give a TCP port between 1 and 65535")
    if not args.print and not port_free(args.host, args.port):
        raise ConfigError(f"--port {args.port}: something already listens on {args.host}:{args.port}; "
                          "pass another, e.g. --port 8890")
    token = args.token or secrets.token_hex(24)
    cmd = jupyterlab_command(notebook_dir(), args.host, args.port, token)
    if args.print:
        print(shlex.join(cmd))
        return 0
    print(f"JupyterLab on the notebooks (kernel {KERNEL_NAME!r}); open\n  {lab_url(args.host, args.port, token)}\n"
          "(Ctrl-C to stop)", flush=True)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 0


def add_parsers(sub) -> None:
    """Add the `notebook` subcommand to an argparse subparsers object."""
    n = sub.add_parser("notebook", help="start JupyterLab on notebooks/ (127.0.0.1, token, raglab kernel)")
    n.add_argument("--host", default="127.0.0.1")
    n.add_argument("--port", type=int, default=DEFAULT_PORT)
    n.add_argument("--token", help="the access token (default: a random one, printed in the URL)")
    n.add_argument("--print", action="store_true", help="only print the command")
    n.set_defaults(func=cmd_notebook)
