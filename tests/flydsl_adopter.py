"""FlyDSL's RMSNorm adopter, as ROCm/FlyDSL pull request #786 writes it, for the tests.

Origin: ``kernels/norm/rmsnorm_autotune.py`` and ``rmsnorm_direct`` of
``kernels/norm/rmsnorm_kernel.py`` in https://github.com/ROCm/FlyDSL at commit
09dd1105fb2e667628bf15c6887bea4e8a0652d3 ("autotune: add opt-in offline config artifacts",
the first commit of PR #786; Apache-2.0), merged as 9d80c1336b3761f2a5511af3e06b4c748702f118,
where the key gains ``weight_dtype_str``.  Restated here (FlyDSL's wheel does not ship its
``kernels/`` folder): the same ``@flyc.jit`` signature with FlyDSL's own annotation types,
the same seven candidates, default, search rule, key and ``artifact_name``.

The kernel body is not FlyDSL's (it needs a GPU): a test replaces the launch
(:func:`stub_launch`), so each launch is recorded instead of compiled.
"""

from __future__ import annotations

from typing import Any

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.autotune import Config, autotune

BLOCK_THREADS = 256
"""FlyDSL's ``kernels/norm/rmsnorm_common.py``: the untuned block size."""
SMALL_N_THRESHOLD = 2048
"""FlyDSL's ``kernels/norm/rmsnorm_kernel.py``: rows this short are never searched."""

SEARCH_CONFIGS = (
    Config(BLOCK_THREADS=128),
    Config(BLOCK_THREADS=128, waves_per_eu=1),
    Config(BLOCK_THREADS=128, waves_per_eu=2),
    Config(BLOCK_THREADS=256),
    Config(BLOCK_THREADS=256, waves_per_eu=1),
    Config(BLOCK_THREADS=512),
    Config(BLOCK_THREADS=512, waves_per_eu=2),
)


@flyc.jit
def rmsnorm_direct(
    Input: fx.Tensor,
    Gamma: fx.Tensor,
    Output: fx.Tensor,
    m_in: fx.Int32,
    N: fx.Constexpr[int],
    dtype_str: fx.Constexpr[str],
    BLOCK_THREADS: fx.Constexpr[int],
    stream: fx.Stream = fx.Stream(None),  # noqa: B008 - FlyDSL's own default
) -> None:
    raise AssertionError("a test launched the kernel without stubbing the launch")


def default_config(*_args: Any, **_kwargs: Any) -> Any:
    return Config(BLOCK_THREADS=BLOCK_THREADS)


def search_configs(input_t: Any, gamma: Any, output: Any, m_in: int, N: int, dtype_str: str = "bf16",
                   stream: Any = None) -> list[Any]:
    if N <= SMALL_N_THRESHOLD:
        return [default_config()]
    return list(SEARCH_CONFIGS)


def rmsnorm_tuner(do_bench: Any = None) -> Any:
    """A fresh ``_rmsnorm_tuner`` of the adopter (``do_bench``: FlyDSL's timing function)."""
    return autotune(configs=search_configs, key=["m_in", "N", "dtype_str"], default=default_config,
                    artifact_name="rmsnorm", do_bench=do_bench)(rmsnorm_direct)


def stub_launch(tuner: Any) -> list[dict[str, Any]]:
    """Replace the tuner's JIT launch (no GPU here) by a recorder; returns the record, one
    dict of the keyword arguments FlyDSL passed per launch (the config's among them)."""
    launches: list[dict[str, Any]] = []

    def launch(*args: Any, **kwargs: Any) -> None:
        launches.append(kwargs)

    tuner.fn = launch  # FlyDSL read the signature from the @jit function when it was built
    return launches


class Tensor:
    """What FlyDSL reads off a tensor argument: its shape and dtype."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "torch.bfloat16") -> None:
        self.shape = shape
        self.dtype = dtype


def call(m: int, n: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments ``rmsnorm_autotuned`` passes the tuner for an ``m x n`` bf16 input."""
    x = Tensor((m, n))
    return (x, Tensor((n,)), Tensor((m, n)), m), {"N": n, "dtype_str": "bf16", "stream": None}
