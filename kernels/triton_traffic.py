"""Bytes one call of a Triton family moves, found from its inputs' shapes without
importing torch in the calling process.

The tuner's parent process plans each key from
:meth:`~flyconfigs.kernels.plugin.TunableKernel.traffic` and never imports torch or
Triton.  A family that makes its own inputs and gives no ``traffic_bytes`` is sized by
making one call's inputs and outputs on torch's ``meta`` device (shapes and dtypes, no
memory): in this process when torch is already imported here (a measuring process, a
user's program), else in one child process kept for the life of this one, which imports
the family's ``inputs`` and ``outputs`` by name.  Imports torch nowhere itself.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from flyconfigs.errors import TuneError

__all__ = ["meta_traffic", "ref_name"]

_CHILD_CODE = r"""
import importlib, json, sys
import torch

def load(ref):
    module, _, attribute = ref.partition(":")
    found = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found

def size(values):
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))

for line in sys.stdin:
    request = json.loads(line)
    try:
        made = load(request["inputs"])(request["key"], "meta")
        inputs = tuple(made.values()) if isinstance(made, dict) else tuple(made)
        if request.get("outputs_in_inputs"):
            outputs = ()
        else:
            outputs = tuple(load(request["outputs"])(*inputs)) if request["outputs"] else (torch.empty_like(inputs[0]),)
        answer = {"bytes": size(inputs) + size(outputs)}
    except Exception as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)
"""

_LOCK = threading.Lock()
_CHILD: list[subprocess.Popen[str]] = []


def ref_name(ref: Callable[..., Any] | str) -> str | None:
    """``"module:attribute"`` another process can import ``ref`` by, or ``None`` (a
    lambda, a local function, a function of ``__main__``)."""
    if isinstance(ref, str):
        return ref
    module, qualname = getattr(ref, "__module__", None), getattr(ref, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _in_process(inputs: Callable[..., Any], outputs: Callable[..., Any] | None, key: Mapping[str, Any],
                outputs_in_inputs: bool = False) -> int:
    import torch

    given = inputs(dict(key), "meta")
    made = tuple(given.values()) if isinstance(given, Mapping) else tuple(given)
    if outputs_in_inputs:
        outs: tuple[Any, ...] = ()
    else:
        outs = tuple(outputs(*made)) if outputs is not None else (torch.empty_like(made[0]),)
    return sum(t.numel() * t.element_size() for t in (*made, *outs) if isinstance(t, torch.Tensor))


def _child() -> subprocess.Popen[str]:
    if _CHILD and _CHILD[0].poll() is None:
        return _CHILD[0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    child = subprocess.Popen([sys.executable, "-c", _CHILD_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    _CHILD[:] = [child]
    return child


def _stop_child() -> None:
    for child in _CHILD:
        if child.poll() is None and child.stdin is not None:
            child.stdin.close()  # it ends at the end of its input
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()


atexit.register(_stop_child)


def meta_traffic(what: str, inputs: Callable[..., Any] | str, outputs: Callable[..., Any] | str | None,
                 key: Mapping[str, Any], load: Callable[[Any, str], Callable[..., Any]],
                 outputs_in_inputs: bool = False) -> int:
    """Bytes of one call's inputs and outputs at ``key`` (``outputs(*inputs)``, or one
    tensor like the first input; none beside the inputs with ``outputs_in_inputs``, where
    ``inputs`` makes every argument, read or written), made on torch's meta device
    (``inputs`` may give them as a sequence or a mapping); :class:`TuneError` naming
    ``what`` when they cannot be made."""
    if "torch" in sys.modules:
        try:
            return _in_process(load(inputs, f"{what}: inputs"),
                               load(outputs, f"{what}: outputs") if outputs is not None else None, key,
                               outputs_in_inputs)
        except TuneError:
            raise
        except Exception as exc:  # noqa: BLE001 - the author's function: say whose it is
            raise TuneError(f"{what}: sizing a call on the meta device failed ({type(exc).__name__}: {exc}); "
                            f"give traffic_bytes=") from None
    names = {"inputs": ref_name(inputs), "outputs": ref_name(outputs) if outputs is not None else ""}
    for part, name in names.items():
        if name is None:
            raise TuneError(f"{what}: without traffic_bytes= a call is sized in a child process (this one does not "
                            f"import torch), which imports {part} by name, and this {part} has none (a lambda or a "
                            f"function of __main__): give {part} as 'module:attribute', or give traffic_bytes=")
    request = json.dumps({"inputs": names["inputs"], "outputs": names["outputs"] or None, "key": dict(key),
                          "outputs_in_inputs": outputs_in_inputs})
    with _LOCK:
        child = _child()
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write(request + "\n")
            child.stdin.flush()
            line = child.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            try:
                child.wait(timeout=5)
                err = child.stderr.read() if child.stderr is not None else ""
            except subprocess.TimeoutExpired:
                err = ""
            raise TuneError(f"{what}: the process sizing a call on the meta device ended "
                            f"({err.strip().splitlines()[-1] if err.strip() else 'no output'}); give traffic_bytes=")
    answer = json.loads(line)
    if "error" in answer:
        raise TuneError(f"{what}: sizing a call on the meta device failed ({answer['error']}); give traffic_bytes=")
    return int(answer["bytes"])
