"""GPU tests: real torch tensors on a real device through the CUDA (or HIP) backend.
They skip cleanly where no GPU, torch or binding is present."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _gpu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT", raising=False)
    from flyconfigs.registry import refresh

    refresh()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.gpu)
