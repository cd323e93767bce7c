"""flyconfigs.adapters: meeting users where they are.

Importers turn the config files other projects ship into ``imported`` artifacts
(:mod:`.vllm` for vLLM's fused-MoE JSON files, :mod:`.aiter` for aiter's tuned GEMM CSVs),
written under one write policy by :func:`.importing.write_imports`, which returns the
report ``flyconfigs import`` renders; and :mod:`.flydsl` serves installed artifacts to
FlyDSL's ``Autotuner``.  Each is a thin module over the schema and the public registry
API; none imports torch, and the FlyDSL adapter imports ``flydsl`` only when it builds a
config for it.
"""

from __future__ import annotations

__all__: list[str] = []
