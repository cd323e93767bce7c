"""vLLM's fused-MoE config files as ``imported`` artifacts of ``vllm_fused_moe``.

A file is named ``E=<E>,N=<N>,device_name=<device>[,dtype=<dtype>][,block_shape=[<n>,<k>]].json``
(vLLM's ``get_config_file_name``: the device is ``torch.cuda.get_device_name()`` with
spaces as underscores) and maps each batch size ``M`` (a JSON member such as ``"64"``) to
the kernel's config; a member ``triton_version`` records the Triton it was tuned with.
Each batch size becomes one artifact keyed ``E, N, dtype, block_shape, M``.  The device
is the product the file name names: one the importer was given, else one of flyconfigs'
catalog; the artifact says which.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from flyconfigs.adapters.imported import Imported, UpstreamFile, imported_artifact
from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.kernels.vllm_fused_moe import SPEC
from flyconfigs.registry.products import find_product, product_catalog
from flyconfigs.schema.jsonio import read_document
from flyconfigs.schema.models import Device

__all__ = ["CONFIG_DIR", "PROJECT", "import_vllm_file", "parse_file_name"]

PROJECT = "vllm-project/vllm"
CONFIG_DIR = "vllm/model_executor/layers/fused_moe/configs"
"""Where vLLM keeps these files."""
_NAME = re.compile(
    r"^E=(?P<E>[1-9][0-9]{0,8}),N=(?P<N>[1-9][0-9]{0,8}),device_name=(?P<device>[^,]+)"
    r"(?:,dtype=(?P<dtype>[A-Za-z0-9_]+))?(?:,block_shape=\[(?P<bn>[1-9][0-9]{0,5}),(?P<bk>[1-9][0-9]{0,5})\])?\.json$"
)
_BATCH = re.compile(r"^[1-9][0-9]{0,17}$")


def parse_file_name(name: str) -> tuple[dict[str, object], str]:
    """The key axes a file name states (``E``, ``N``, ``dtype``, ``block_shape``) and its
    raw ``device_name``; :class:`ArtifactError` on ``<file name>`` if it is not vLLM's pattern."""
    match = _NAME.match(name)
    if match is None:
        raise ArtifactError(name, [FieldProblem("<file name>", "is not E=…,N=…,device_name=…[,dtype=…][,block_shape=[n,k]]"
                                                                 ".json, as vLLM names its fused-MoE configs")])
    shape = [int(match["bn"]), int(match["bk"])] if match["bn"] else None
    return {"E": int(match["E"]), "N": int(match["N"]), "dtype": match["dtype"], "block_shape": shape}, match["device"]


def _device(device_name: str, given: Sequence[Device], file: str) -> tuple[Device, str]:
    """The device a file name's ``device_name`` names, and how it was found."""
    how = f"the file name's device_name={device_name}: vLLM writes torch.cuda.get_device_name() with spaces as underscores"
    for device in given:
        if device.product.replace(" ", "_") == device_name:
            return device, f"{how}, here {device.product!r} as the import was told ({device.describe()})"
    product = find_product(device_name.replace("_", " "))
    if product is None:
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
    (a batch size that is not a positive int, a config value that is not an int, a config
    the kernel refuses) is refused alone, in :attr:`Imported.refused`."""
    p = Path(path)
    file = str(p)
    axes, device_name = parse_file_name(p.name)
    device, device_from = _device(device_name, devices, file)
    data = read_document(p)
    if not isinstance(data, dict):
        raise ArtifactError(file, [FieldProblem("", f"expected an object of batch sizes, got {type(data).__name__}")])
    versions: dict[str, str] = {}
    triton = data.get("triton_version")
    if triton is not None:
        if not isinstance(triton, str) or not triton:
            raise ArtifactError(file, [FieldProblem("triton_version", f"expected a version string, got {triton!r}")])
        versions["triton"] = triton
    upstream = UpstreamFile(PROJECT, f"{CONFIG_DIR}/{p.name}", revision)
    out = Imported(file)
    for member, config in data.items():
        if member == "triton_version":
            continue
        try:
            if not _BATCH.match(member):
                raise ArtifactError(file, [FieldProblem(member, "is not a batch size (a positive int)")])
            if not isinstance(config, dict):
                raise ArtifactError(file, [FieldProblem(member, f"expected a config object, got {type(config).__name__}")])
            for name, value in config.items():
                if type(value) is not int:
                    raise ArtifactError(file, [FieldProblem(f"{member}.{name}", f"expected an int, got {value!r}")])
            out.artifacts.append(imported_artifact(
                SPEC, device, {**axes, "M": int(member)}, config, upstream=upstream, entry=f'"{member}"',
                device_from=device_from, tool="flyconfigs import vllm", backend="vllm", backend_versions=versions,
                file=file, field=member))
        except ArtifactError as exc:
            out.refused.append(exc)
    return out
