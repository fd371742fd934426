"""The `lab` command: a thin shell over the package. Each subcommand calls into `lab`, nothing more.

One module of lab.cli per command group (:data:`SUBCOMMAND_MODULES`, in the order `lab --help` lists them), each
with ``add_parsers(subparsers)``; options shared by several commands are in :mod:`lab.cli.options`. Nothing outside
lab.cli imports lab.cli (tests/test_layers.py checks it).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from lab.cli.options import Parser
from lab.core.errors import LabError
from lab.tracking.store import storage_fault

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: The command groups: evaluate / run / strategies, sweep / compare / ui, demo, train-*, report / gate, ingest,
#: testset, answers, robustness, notebook, server.
SUBCOMMAND_MODULES = ("lab.cli.run", "lab.cli.workbench", "lab.cli.demo", "lab.cli.train", "lab.cli.report",
                      "lab.cli.ingest", "lab.cli.testset", "lab.cli.answers", "lab.cli.robustness", "lab.cli.notebook",
                      "lab.cli.server")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="lab", description="raglab: measure and improve RAG retrieval.")
    sub = p.add_subparsers(dest="command", required=True)
    for module in SUBCOMMAND_MODULES:
        importlib.import_module(module).add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # MLflow logs every SQL error with its traceback before raising it; the error reaches here and is said once
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    try:
        return args.func(args)
    except LabError as exc:
        for line in str(exc).splitlines() or [""]:  # one line per problem (a sweep lists each bad config)
            print(f"error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        line = storage_fault(exc)  # a corrupt, read-only or full store: one line, not a traceback
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
