"""Kernels started ahead of need, so a sweep does not pay a kernel start and the notebook's imports per config.

A Papermill execution starts a fresh Jupyter kernel, runs the notebook, and shuts the kernel down. On two cores
that is ~1 s to start the kernel and ~1.5-2 s to import what the sweep notebooks import (pandas, matplotlib, lab),
before any retrieval runs: seconds per config (``benchmarks/papermill_overhead.py`` measures it). :class:`WarmKernels`
starts the *next* config's kernel in a background thread while the current config runs, and in it executes the
notebook's own top-level import statements (nothing else: no parameter, no seed, no data), so the notebook finds
its modules already imported. Every config still gets its own fresh kernel process, used once and shut down, so no
state passes from one config to the next; only the time is overlapped.

If warming fails (the kernel dies, an import raises), :meth:`WarmKernels.take` returns None and the caller lets
Papermill start a kernel as usual (the config runs the same way, only without the head start).
"""
from __future__ import annotations

import ast
import asyncio
import json
import threading
from pathlib import Path

#: environment every preload sets first, as the notebooks' setup cells do (offline models, no telemetry)
PRELOAD_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
               "TOKENIZERS_PARALLELISM": "false"}


def notebook_imports(notebook: str | Path) -> str:
    """The top-level ``import`` / ``from ... import`` statements of a notebook's code cells, in order, as code.

    Cells with IPython magics are parsed line by line (magic lines skipped); statements inside functions, loops or
    conditionals are left out, as are ``from __future__`` imports (they only apply inside their own cell)."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    out: list[str] = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = "".join(cell.get("source", []))
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out.append(ast.unparse(node))
    return "\n".join(dict.fromkeys(out))


def preload_code(notebook: str | Path) -> str:
    env = "".join(f"os.environ.setdefault({k!r}, {v!r})\n" for k, v in PRELOAD_ENV.items())
    return f"import os\n{env}{notebook_imports(notebook)}\n"


async def _start(kernel_name: str, cwd: str, code: str, extra_arguments: list[str], timeout: float):
    from jupyter_client.manager import AsyncKernelManager

    km = AsyncKernelManager(kernel_name=kernel_name)
    await km.start_kernel(cwd=cwd, extra_arguments=list(extra_arguments))
    try:
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=timeout)
            reply = await kc.execute_interactive(code, store_history=False, silent=True, timeout=timeout,
                                                 output_hook=lambda msg: None)
            if reply["content"].get("status") != "ok":
                raise RuntimeError(f"preload failed: {reply['content'].get('ename')}: {reply['content'].get('evalue')}")
        finally:
            kc.stop_channels()
    except BaseException:
        await km.shutdown_kernel(now=True)
        raise
    return km


class WarmKernels:
    """One kernel kept started (and its notebook's imports done) ahead of the next :meth:`take`.

    ``kernel_name`` and ``cwd`` are those Papermill would use; ``notebook`` supplies the imports to preload. Use as a
    context manager (or call :meth:`close`) so a kernel nobody took is shut down. Not shared between processes."""

    def __init__(self, kernel_name: str, notebook: str | Path, cwd: str | Path | None = None,
                 extra_arguments: list[str] | None = None, timeout: float = 180.0):
        self.kernel_name = kernel_name
        self.cwd = str(cwd or Path(notebook).parent)
        self.code = preload_code(notebook)
        self.extra_arguments = list(extra_arguments or [])
        self.timeout = timeout
        self.failures: list[str] = []
        self._thread: threading.Thread | None = None
        self._km = None
        self._closed = False
        self._warm()

    def _warm(self) -> None:
        def work():
            try:
                self._km = asyncio.run(_start(self.kernel_name, self.cwd, self.code, self.extra_arguments,
                                              self.timeout))
            except Exception as exc:  # noqa: BLE001 - reported through take() returning None and `failures`
                self._km = None
                self.failures.append(f"{type(exc).__name__}: {exc}")

        self._km = None
        self._thread = threading.Thread(target=work, daemon=True, name="lab-warm-kernel")
        self._thread.start()

    def take(self, more: bool = True):
        """The warmed kernel manager (started, imports done), or None when warming failed; with ``more`` starts
        warming the next one. The caller owns the returned kernel: pass it to Papermill (``km=``) and shut it
        down after (:func:`shutdown`)."""
        if self._closed or self._thread is None:
            return None
        self._thread.join()
        km, self._km = self._km, None
        if km is not None and not km.has_kernel:
            km = None
        if more:
            self._warm()
        else:
            self._thread = None
        return km

    def close(self) -> None:
        self._closed = True
        if self._thread is not None:
            self._thread.join()
        if self._km is not None:
            shutdown(self._km)
            self._km = None

    def __enter__(self) -> "WarmKernels":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def shutdown(km) -> None:
    """Shut a kernel down now (a kernel handed to Papermill is not shut down by it: the caller owns it)."""
    if km is not None and km.has_kernel:
        asyncio.run(km.shutdown_kernel(now=True))
