"""Keys as a vLLM user spells them: the words of vLLM's config file names.

vLLM names its fused-MoE config files
``E=<E>,N=<N>,device_name=<device>[,dtype=<dtype>][,block_shape=[<n>,<k>]][_down].json``
(and ``…,dtype=int4_w4a16,backend=flydsl.json`` for the FlyDSL int4 kernel), and its
``get_moe_configs`` takes ``block_shape`` as one ``[n, k]`` list.  :func:`vllm_spelled_key`
reads such a key (split into items by :func:`flyconfigs.registry.families.keys.split_spelled_items`:
``_down`` ends up as ``down=true``, or at the end of ``dtype`` or ``device_name`` when no
bracket precedes it) into the families' own axes:

- ``device_name`` names the device (a product of flyconfigs' catalog, as vLLM writes it:
  ``torch.cuda.get_device_name()`` with spaces as underscores); it must agree with the
  device asked for, and names it when none is;
- ``block_shape=[n,k]`` is ``block_n=n, block_k=k``;
- what a file name leaves out takes vLLM's meaning and is reported as filled in:
  ``dtype`` null (no ``dtype=`` in the name), ``block_n`` and ``block_k`` null (no
  ``block_shape``), ``down`` false (no ``_down``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry.core.products import find_product, product_catalog, vllm_device_name
from flyconfigs.registry.plugin import DeviceQuery, KeyValue, SpelledKey

__all__ = ["DOWN_SUFFIX", "vllm_spelled_key"]

DOWN_SUFFIX = "_down"
"""What ends the name of a down-projection file."""


def _fail(kernel: str, axis: str, problem: str, accepts: str, example: str) -> InvalidKeyError:
    return InvalidKeyError(f"key axis {axis!r} of {kernel!r}: {problem}; it takes {accepts}, e.g. {example}")


def _device_named(kernel: str, name: object, device: DeviceQuery | None, example: str) -> str | None:
    """The device spec ``device_name`` names, or ``None`` when it is the asked device's own."""
    accepts = "a GPU's name as vLLM's file names write it (spaces as underscores)"
    if not isinstance(name, str):
        raise _fail(kernel, "device_name", f"got {name!r}", accepts, example)
    if device is not None and device.product is not None:
        if vllm_device_name(device.product) == name:
            return None
        raise _fail(kernel, "device_name", f"{name!r} is not the device asked for ({device.describe()}, whose files "
                    f"vLLM names device_name={vllm_device_name(device.product)}): leave device_name out or ask for "
                    "its device", accepts, example)
    for product in product_catalog().products:
        if vllm_device_name(product.device.product) == name:
            return product.device.product
    found = find_product(name)
    if found is None:
        names = ", ".join(sorted({vllm_device_name(p.device.product) for p in product_catalog().products}))
        raise _fail(kernel, "device_name", f"{name!r} names no GPU of flyconfigs' catalog ({names})", accepts, example)
    return found.device.product


def vllm_spelled_key(kernel: str, axes: Sequence[str], key: Mapping[str, object], device: DeviceQuery | None,
                     example: str, defaults: Mapping[str, KeyValue]) -> SpelledKey:
    """``key`` in vLLM's file-name words made a key of ``axes`` (``E, N, dtype, block_n,
    block_k, down, M`` or ``E, N, dtype, M``), the module's rules, each axis of
    ``defaults`` the key leaves out given its value there (reported as filled in);
    :class:`InvalidKeyError` naming the axis, what it takes and ``example`` (a whole key
    in vLLM's words)."""
    out = dict(key)
    filled: dict[str, KeyValue] = {}
    named: str | None = None
    for word in ("dtype", "device_name"):
        value = out.get(word)
        if isinstance(value, str) and value.endswith(DOWN_SUFFIX) and "down" in axes:
            if "down" in out and out["down"] is not True:
                raise _fail(kernel, "down", f"{word}={value} ends in {DOWN_SUFFIX} but down={out['down']!r}",
                            "true or false", example)
            out[word], out["down"] = value.removesuffix(DOWN_SUFFIX), True
    if "device_name" in out:
        named = _device_named(kernel, out.pop("device_name"), device, example)
    if "backend" in out:
        if "block_n" in axes or out["backend"] != "flydsl":
            raise _fail(kernel, "backend", f"{kernel} has no backend={out['backend']!r}", "flydsl (vllm_flydsl_moe only)",
                        "E=64,N=1536,device_name=AMD_Instinct_MI300X,dtype=int4_w4a16,backend=flydsl M=64")
        del out["backend"]
    if "block_shape" in out:
        shape = out.pop("block_shape")
        if "block_n" not in axes:
            raise _fail(kernel, "block_shape", "is not an axis of this kernel", "no block shape", example)
        if not (isinstance(shape, list) and len(shape) == 2 and all(type(v) is int and v > 0 for v in shape)):
            raise _fail(kernel, "block_shape", f"got {shape!r}", "[n,k], the quantization block's two sides",
                        "block_shape=[128,128]")
        if "block_n" in out or "block_k" in out:
            raise _fail(kernel, "block_shape", "is given beside block_n or block_k", "one of the two spellings",
                        "block_shape=[128,128]")
        out["block_n"], out["block_k"] = shape
    for axis, value in defaults.items():
        if axis not in out:
            out[axis] = filled[axis] = value
    unknown = [k for k in out if k not in axes]
    if unknown:
        words = ", ".join((*axes, "device_name", *(("block_shape",) if "block_n" in axes else ("backend",))))
        raise _fail(kernel, unknown[0], "is not a key word of vLLM's config files nor an axis here", words, example)
    missing = [a for a in axes if a not in out]
    if missing:
        raise _fail(kernel, missing[0], "is missing",
                    "the batch size, an int >= 1" if missing[0] == "M" else "an int >= 1" if missing[0] in "EN"
                    else "a value", example)
    return SpelledKey(out, filled, named)

