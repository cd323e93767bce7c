"""The op's input checks, on CPU torch: each bad input is a clear TypeError or
ValueError raised before anything is launched (there is no GPU here to launch on)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from flyconfigs.kernels import rms_norm  # noqa: E402
from flyconfigs.schema.pack import folder_artifacts  # noqa: E402


def test_bad_inputs() -> None:
    x = torch.randn(4, 64)
    w = torch.rand(64)
    with pytest.raises(ValueError, match="runs on a GPU; x is on cpu"):
        rms_norm(x, w)
    with pytest.raises(TypeError, match="torch tensors"):
        rms_norm([[1.0] * 64], w)
    with pytest.raises(TypeError, match="not torch.int32"):
        rms_norm(x.to(torch.int32), w)
    with pytest.raises(TypeError, match="weight must be torch.bfloat16 or float32"):
        rms_norm(x.to(torch.bfloat16), w.to(torch.float16))
    with pytest.raises(ValueError, match="last dimension of x must be contiguous"):
        rms_norm(x.t(), torch.rand(4))
    with pytest.raises(ValueError, match=r"weight must have shape \(64,\)"):
        rms_norm(x, torch.rand(32))
    with pytest.raises(ValueError, match="non-empty"):
        rms_norm(torch.empty(0, 64), w)
    with pytest.raises(ValueError, match="out must match x"):
        rms_norm(x, w, out=torch.empty(4, 32))


def test_the_declaration_needs_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, flyconfigs.kernels.rmsnorm as r; print(r.SPEC.name, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.stdout.split() == ["rmsnorm", "False"], done.stderr


@pytest.mark.slow  # reads or compiles every recorded candidate: CI runs it with the slow tests
def test_the_shared_memory_rule_matches_what_the_compiler_refused_on_the_h200() -> None:
    """Every committed sm90 RMSNorm candidate that NVRTC refused for too much shared data
    is one the spec now refuses, and every one it compiled and timed is still accepted but
    those whose row it counts past their occupancy bound's register cap: a register budget
    that errs to refusing, so nearly every config it refuses spilled when it ran, and it
    refuses no tuned winner."""
    from pathlib import Path

    from flyconfigs.kernels.rmsnorm import SPEC
    from flyconfigs.registry.sources.device import DeviceQuery

    device = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
    refused = accepted = spilled = kept_in_registers = 0
    for found in folder_artifacts(Path(__file__).resolve().parents[1] / "artifacts" / "sm90", "rmsnorm"):
        artifact = found.model_dump(mode="json")
        assert SPEC.check_config(artifact["winner"]["config"], artifact["key"], device) is None, artifact["key"]
        for candidate in artifact["candidates"]:
            why = SPEC.check_config(candidate["config"], artifact["key"], device)
            if candidate["status"] == "compile_error" and "too much shared data" in candidate["message"]:
                assert why is not None and "shared memory" in why, (artifact["key"], candidate["config"])
                refused += 1
            elif candidate["status"] == "ok" and why is not None:
                # Timed, but its row counted past the occupancy bound's register cap: the
                # one rule that refuses configs that ran.
                assert "spills" in why, (artifact["key"], candidate, why)
                if candidate["resources"]["spill_bytes"] > 0:
                    spilled += 1
                else:  # the compiler fitted the row after all (15 of the H100's models keys' configs)
                    kept_in_registers += 1
            elif candidate["status"] == "ok":
                accepted += 1
    # Tunings made since the rule (2026.12.5 onwards) no longer try the configs NVRTC
    # refused, so refusals appear only in older artifacts; every one found must be refused.
    assert accepted >= 5000, (refused, accepted)
    assert kept_in_registers <= 0.01 * spilled, (kept_in_registers, spilled)
