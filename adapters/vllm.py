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

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flyconfigs.adapters.as_table import as_table
from flyconfigs.adapters.imported import Imported, UpstreamFile, imported_artifact
from flyconfigs.adapters.spelling import JSON_HEAD, JSON_TAIL, json_member_text, json_members
from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.kernels import vllm_flydsl_moe, vllm_fused_moe
from flyconfigs.registry.core.products import find_product, product_catalog
from flyconfigs.registry.declarations import KernelDecl
from flyconfigs.schema.jsonio import parse_document, read_file_bytes
from flyconfigs.schema.load import parse_table
from flyconfigs.schema.models import Artifact, Device
from flyconfigs.schema.table import Table

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
    try:
        raw = read_file_bytes(p)
    except FileNotFoundError:
        raise ArtifactError(file, [FieldProblem("", "cannot read: No such file or directory")]) from None
    data = parse_document(raw, file)
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
    try:
        out.text = raw.decode("utf-8")
    except UnicodeDecodeError:  # JSON in another encoding: imported, its spelling not kept
        pass
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
    ``{"USE_TMA": false}``) stays an artifact beside it.  With the file's text, the table
    keeps its spelling (schema 1.8, :func:`json_spelling`)."""
    table, left = as_table(imported.artifacts, imported.file)
    if table is None:
        return imported
    if imported.text is not None:
        data = table.model_dump(mode="json")
        data["spelling"] = json_spelling(imported.text, table, left, imported.refused, imported.file)
        table = parse_table(data, imported.file)[0]
    return Imported(imported.file, left, imported.refused, [table], imported.text)


def json_spelling(text: str, table: Table, left: Sequence[Artifact], refused: Sequence[ArtifactError],
                  file: str) -> dict[str, Any]:
    """The spelling (schema 1.8, :class:`~flyconfigs.schema.table.Spelling`) of the vLLM
    file ``text`` whose members are ``table``'s rows, the artifacts ``left`` beside it, its
    ``triton_version`` and the entries ``refused``: the indent of its first member (4 when
    it has none), every member in the file's order, the text of each that is not what
    :func:`~flyconfigs.adapters.vllm_export.write_vllm_files` writes for it (a member laid
    out on one line, another indent), the refused ones kept as text with why, and its
    head and tail where they are not ``{`` and a closing brace with a final newline."""
    head, members, tail = json_members(text, file)
    found = re.match(r"\n( *)\S", members[0][1]) if members else None
    indent = len(found.group(1)) if found else 4
    held: dict[str, Any] = {f'"{table.key_of(i)["M"]}"': table.config_of(i) for i in range(len(table.rows))}
    # An artifact's config comes back as its file holds it: canonical, the names sorted.
    held.update({f'"{a.key["M"]}"': dict(sorted(a.winner.config.items())) for a in left})
    why = {p.field: p.message for error in refused for p in error.problems}
    texts: dict[str, str] = {}
    unserved = []
    for name, own in members:
        entry = f'"{name}"'
        if entry in held:
            standard = json_member_text(name, held[entry], indent)
        elif name == TRITON_VERSION:
            standard = json_member_text(name, json.loads("{" + own + "}")[name], indent)
        else:
            unserved.append({"entry": entry, "text": own, "why": why.get(name, "no row of flyconfigs holds it")})
            continue
        if own != standard:
            texts[entry] = own
    spelling: dict[str, Any] = {"format": "json", "newline": "\n", "indent": indent,
                                "order": [f'"{name}"' for name, _ in members], "texts": texts, "unserved": unserved}
    if head != JSON_HEAD:
        spelling["head"] = head
    if tail != JSON_TAIL:
        spelling["tail"] = tail
    return spelling
