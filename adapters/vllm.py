"""vLLM's fused-MoE config files as ``imported`` artifacts.

A file is named as vLLM 0.34's ``get_config_file_name`` names it:
``E=<E>,N=<N>,device_name=<device>[,dtype=<dtype>][,block_shape=[<n>,<k>]][_down].json``
(the device is ``torch.cuda.get_device_name()`` with spaces as underscores; ``_down`` marks
the separate down-projection configs), or, for the FlyDSL int4 kernel,
``E=<E>,N=<N>,device_name=<device>,dtype=int4_w4a16,backend=flydsl.json``.  Each maps a
batch size ``M`` (a JSON member such as ``"64"``) to the kernel's config; a member
``triton_version`` records the Triton it was tuned with.  Each batch size becomes one
artifact of ``vllm_fused_moe`` (key ``E, N, dtype, block_n, block_k, down, M``) or of
``vllm_flydsl_moe`` (key ``E, N, dtype, M``).  The device is the product the file name
names: one the importer was given, else one of flyconfigs' catalog; the artifact says
which.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flyconfigs.adapters.as_table import as_table
from flyconfigs.adapters.imported import Imported, UpstreamFile, imported_artifact
from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.kernels import vllm_flydsl_moe, vllm_fused_moe
from flyconfigs.registry.core.products import find_product, product_catalog
from flyconfigs.registry.declarations import KernelDecl
from flyconfigs.schema.jsonio import read_document
from flyconfigs.schema.models import Device

__all__ = ["CONFIG_DIR", "PROJECT", "VLLMFile", "import_vllm_file", "parse_file_name", "tabulated", "vllm_file_name"]

PROJECT = "vllm-project/vllm"
CONFIG_DIR = "vllm/model_executor/layers/fused_moe/configs"
"""Where vLLM keeps these files."""
FLYDSL_BACKEND = "flydsl"
_NAME = re.compile(
    r"^E=(?P<E>[1-9][0-9]{0,8}),N=(?P<N>[1-9][0-9]{0,8}),device_name=(?P<device>[^,]+?)"
    r"(?:,dtype=(?P<dtype>[A-Za-z0-9_]+))?(?:,block_shape=\[(?P<bn>[1-9][0-9]{0,5}),(?P<bk>[1-9][0-9]{0,5})\])?"
    r"(?:,backend=(?P<backend>[a-z0-9_]+))?(?P<down>_down)?\.json$"
)
_BATCH = re.compile(r"^[1-9][0-9]{0,17}$")
TRITON_VERSION = "triton_version"


@dataclass(frozen=True)
class VLLMFile:
    """What a vLLM config file's name states: the kernel family it belongs to, the key axes
    but ``M``, and the raw ``device_name``."""

    decl: KernelDecl
    axes: dict[str, Any]
    device_name: str


def parse_file_name(name: str) -> VLLMFile:
    """What the file name ``name`` states; :class:`ArtifactError` on ``<file name>`` if it
    is not one of vLLM's patterns."""
    match = _NAME.fullmatch(name)  # whole: a trailing newline is no part of a name
    if match is None:
        raise ArtifactError(name, [FieldProblem("<file name>", "is not E=…,N=…,device_name=…[,dtype=…][,block_shape=[n,k]]"
                                                                 "[_down].json, as vLLM names its fused-MoE configs")])
    E, N, dtype = int(match["E"]), int(match["N"]), match["dtype"]
    if match["backend"] is not None:
        if match["backend"] != FLYDSL_BACKEND or dtype != "int4_w4a16" or match["bn"] or match["down"]:
            raise ArtifactError(name, [FieldProblem("<file name>.backend", "vLLM names one backend file: "
                                                    "…,dtype=int4_w4a16,backend=flydsl.json")])
        return VLLMFile(vllm_flydsl_moe.SPEC, {"E": E, "N": N, "dtype": dtype}, match["device"])
    block_n, block_k = (int(match["bn"]), int(match["bk"])) if match["bn"] else (None, None)
    return VLLMFile(vllm_fused_moe.SPEC, {"E": E, "N": N, "dtype": dtype, "block_n": block_n, "block_k": block_k,
                                          "down": match["down"] is not None}, match["device"])


def vllm_file_name(kernel: str, device_name: str, key: dict[str, Any]) -> str:
    """The file vLLM reads ``key`` (less ``M``) from on a GPU whose files are named
    ``device_name``: :func:`parse_file_name`'s inverse."""
    dtype = f",dtype={key['dtype']}" if key.get("dtype") else ""
    if kernel == vllm_flydsl_moe.SPEC.name:
        return f"E={key['E']},N={key['N']},device_name={device_name}{dtype},backend={FLYDSL_BACKEND}.json"
    block = f",block_shape=[{key['block_n']},{key['block_k']}]" if key.get("block_n") and key.get("block_k") else ""
    return f"E={key['E']},N={key['N']},device_name={device_name}{dtype}{block}{'_down' if key.get('down') else ''}.json"


def _device(device_name: str, given: Sequence[Device], file: str) -> tuple[Device, str]:
    """The device a file name's ``device_name`` names, and how it was found."""
    how = f"the file name's device_name={device_name}: vLLM writes torch.cuda.get_device_name() with spaces as underscores"
    for device in given:
        if device.product.replace(" ", "_") == device_name:
            return device, f"{how}, here {device.product!r} as the import was told ({device.describe()})"
    product = find_product(device_name)
    if product is None or product.device.product.replace(" ", "_") != device_name:
        names = ", ".join(pr.device.product for pr in product_catalog().products)
        raise ArtifactError(file, [FieldProblem("<file name>.device_name", f"{device_name!r} names no product of "
                                                f"flyconfigs' catalog ({names}) and none the import was given")])
    return product.device, f"{how}, here the catalog product {product.device.product!r}"


def import_vllm_file(path: str | Path, revision: str | None = None, devices: Sequence[Device] = ()) -> Imported:
    """Every batch size of the vLLM config file at ``path`` as an artifact.

    ``revision`` is the vLLM commit or tag the file was taken from, recorded with its
    address.  ``devices`` describe GPUs the catalog does not know; a file whose
    ``device_name`` is one of their products (spaces as underscores) takes it.  Raises
    :class:`ArtifactError` naming the file and the field for a file that cannot be
    imported at all (its name, its device, its JSON); an entry that cannot be represented
    (a batch size that is not a positive int, a config the kernel cannot launch) is
    refused alone, in :attr:`Imported.refused`."""
    p = Path(path)
    file = str(p)
    named = parse_file_name(p.name)
    device, device_from = _device(named.device_name, devices, file)
    data = read_document(p)
    if not isinstance(data, dict):
        raise ArtifactError(file, [FieldProblem("", f"expected an object of batch sizes, got {type(data).__name__}")])
    versions: dict[str, str] = {}
    triton = data.get(TRITON_VERSION)
    if triton is not None:
        if not isinstance(triton, str) or not triton:
            raise ArtifactError(file, [FieldProblem(TRITON_VERSION, f"expected a version string, got {triton!r}")])
        versions["triton"] = triton
    if not any(member != TRITON_VERSION for member in data):
        raise ArtifactError(file, [FieldProblem("", "no batch size in the file: nothing to import")])
    upstream = UpstreamFile(PROJECT, f"{CONFIG_DIR}/{p.name}", revision)
    out = Imported(file)
    for member, config in data.items():
        if member == TRITON_VERSION:
            continue
        try:
            if not _BATCH.fullmatch(member):
                raise ArtifactError(file, [FieldProblem(member, "is not a batch size (a positive int)")])
            if not isinstance(config, dict):
                raise ArtifactError(file, [FieldProblem(member, f"expected a config object, got {type(config).__name__}")])
            out.artifacts.append(imported_artifact(
                named.decl, device, {**named.axes, "M": int(member)}, config, upstream=upstream, entry=f'"{member}"',
                device_from=device_from, tool="flyconfigs import vllm", backend="vllm", backend_versions=versions,
                file=file, field=member))
        except ArtifactError as exc:
            out.refused.append(exc)
    return out


def tabulated(imported: Imported) -> Imported:
    """``imported`` (one vLLM file's) with its entries as one table (schema 1.6), in the
    file's order; an entry whose tunables differ from most of the file's (a down file's
    ``{"USE_TMA": false}``) stays an artifact beside it."""
    table, left = as_table(imported.artifacts, imported.file)
    if table is None:
        return imported
    return Imported(imported.file, left, imported.refused, [table])
