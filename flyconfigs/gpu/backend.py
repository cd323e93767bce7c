"""One implementation of the GPU layer over two mirrored bindings.

hip-python (``hip``, ``hiprtc``) and cuda-python (``cuda.bindings.driver``, ``nvrtc``)
expose the same shape of API: every call returns ``(err, *outputs)``.  A vendor module
supplies a :class:`Binding` — the symbol names and the few calls that differ — and
everything else lives here once: error checking, runtime compilation with name
expressions and lowered names, compile-log capture, the on-disk compile cache, loading,
argument packing, launching on a foreign stream, and event timing.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from flyconfigs.errors import CompileError, GPUError, LaunchError
from flyconfigs.gpu.cache import CompileCache
from flyconfigs.schema.models import Device, Resources

__all__ = [
    "ArgKind",
    "Backend",
    "Binding",
    "CompileRequest",
    "CompiledKernel",
    "Kernel",
    "LaunchArgumentError",
    "LaunchConfig",
    "PreparedLaunch",
    "fill_arguments",
]

ArgKind = Literal["ptr", "i32", "i64", "u32", "f32"]
_CTYPES: dict[str, Callable[[Any], ctypes._SimpleCData]] = {  # type: ignore[type-arg]
    "ptr": ctypes.c_void_p,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u32": ctypes.c_uint32,
    "f32": ctypes.c_float,
}
_PACKED = {"ptr": "Q", "i32": "i4x", "i64": "q", "u32": "I4x", "f32": "f4x"}
"""Each kind in its 8-byte slot, as :mod:`struct` packs it (range-checked)."""
logger = logging.getLogger("flyconfigs.gpu")
_INT_RANGES = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1), "ptr": (0, 2**64 - 1)}


class LaunchArgumentError(LaunchError, TypeError):
    """A launch's arguments do not match the kernel's declared signature."""


class Binding(Protocol):
    """What differs between hip-python and cuda-python: the modules, symbol names and
    the calls whose shapes differ.  :class:`flyconfigs.gpu.cuda.CudaBinding` and
    :class:`flyconfigs.gpu.hip.HipBinding` implement it; every call but
    :meth:`describe`, :meth:`count`, :meth:`compiler_version`, :meth:`arch_option`,
    :meth:`launch_ex_address` and :meth:`error_name` returns the vendor's
    ``(err, *outputs)`` tuple for :meth:`Backend.check`.

    ``launch_ex_address`` is optional: the address of the driver's C entry point
    ``cuLaunchKernelEx(const CUlaunchConfig*, f, params, extra)``, or ``None``.  Where a
    binding has it, prepared launches call the driver directly with a launch config built
    once (four pointer arguments instead of eleven converted ones: the host time of a
    small launch); ``error_name`` names the driver's result codes for that path."""

    name: Literal["cuda", "hip"]
    rtc: Any
    api: Any
    rtc_prefix: str
    code_getters: tuple[str, str]
    define: str
    default_options: tuple[str, ...]

    def arch_option(self, arch: str) -> str: ...
    def destroy_program(self, program: Any) -> Any: ...
    def load_module(self, code: bytes) -> Any: ...
    def unload_module(self, module: Any) -> Any: ...
    def get_function(self, module: Any, name: bytes) -> Any: ...
    def launch(self, f: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shmem: int, stream: Any,
               params: Any, extra: Any) -> Any: ...
    def launch_ex_address(self) -> int | None: ...
    def error_name(self, code: int) -> str: ...
    def event_create(self) -> Any: ...
    def event_record(self, event: Any, stream: Any) -> Any: ...
    def event_synchronize(self, event: Any) -> Any: ...
    def event_elapsed(self, start: Any, end: Any) -> Any: ...
    def event_destroy(self, event: Any) -> Any: ...
    def synchronize(self) -> Any: ...
    def compiler_version(self) -> str: ...
    def describe(self, ordinal: int) -> Device: ...
    def activate(self, ordinal: int) -> None: ...
    def resources(self, backend: Backend, compiled: CompiledKernel, block: int, kernel: Kernel | None) -> Resources: ...
    def count(self) -> int: ...


@dataclass(frozen=True)
class CompileRequest:
    """What to compile: source, a name expression (``"k<64, 2>"`` or a plain name) and
    extra options (``-D…``)."""

    source: str
    name_expression: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompiledKernel:
    """A code object and what is needed to load it."""

    request: CompileRequest
    arch: str
    code: bytes
    lowered_name: str
    log: str
    cache_key: str
    from_cache: bool


@dataclass(eq=False)
class Kernel:
    """A loaded kernel with its declared argument kinds."""

    compiled: CompiledKernel
    module: Any
    function: Any
    signature: tuple[ArgKind, ...]
    backend: Backend = field(repr=False)
    _slots: list[Any] = field(default_factory=list, repr=False)
    _array: Any = field(default=None, repr=False)
    _buffer: Any = field(default=None, repr=False)
    _packer: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        # One buffer of 8-byte argument slots per kernel, refilled on every launch, so the
        # hot path allocates nothing: ctypes views of it for checked launches, one
        # struct.pack_into for prepared ones.
        self._buffer = ctypes.create_string_buffer(8 * max(1, len(self.signature)))
        self._slots = [_CTYPES[kind].from_buffer(self._buffer, 8 * i) for i, kind in enumerate(self.signature)]  # type: ignore[attr-defined]
        base = ctypes.addressof(self._buffer)
        self._array = (ctypes.c_void_p * max(1, len(self._slots)))(*[base + 8 * i for i in range(len(self._slots))])
        self._packer = struct.Struct("=" + "".join(_PACKED[kind] for kind in self.signature))

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[object],
        stream: int | None = None,
        shared_bytes: int = 0,
    ) -> None:
        """Launch on ``stream`` (a raw stream handle, e.g. ``torch.cuda.current_stream()
        .cuda_stream``; ``None`` for the default stream).  Raises
        :class:`LaunchArgumentError` for arguments that do not fit the signature and
        :class:`LaunchError` when the driver refuses the launch."""
        self.backend.launch(self, grid, block, args, stream, shared_bytes)

    def prepare(self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int = 0) -> PreparedLaunch:
        """A launch of this kernel with its geometry checked once, for a hot path that
        launches the same geometry many times (see :class:`PreparedLaunch`)."""
        return PreparedLaunch(self, grid, block, shared_bytes)


class LaunchConfig(ctypes.Structure):
    """The driver's ``CUlaunchConfig`` (cuda.h, CUDA 11.8 and later)."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("numAttrs", ctypes.c_uint),
    ]


_LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
"""``CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void**, void**)``."""


@functools.cache
def _launch_ex(address: int) -> Callable[..., int]:
    return _LAUNCH_EX(address)


class PreparedLaunch:
    """One kernel at one grid, block and shared-memory size, checked when made.

    Calling it with the arguments and a raw stream handle launches.  The arguments are
    packed into the kernel's argument slots in one step, which checks each against its
    kind (an int in range, a float for ``f32``) but not the count or ``data_ptr()``
    objects of :func:`fill_arguments`: pass plain ints and floats, as many as the
    signature has.  Raises :class:`LaunchArgumentError` for an argument that does not
    fit and :class:`LaunchError` when the driver refuses the launch.

    Where the binding offers the driver's ``cuLaunchKernelEx`` (see :class:`Binding`),
    the launch owns one buffer holding the launch config, the argument slots and the
    array of their addresses; a call packs the stream and the arguments into it and
    calls the driver with four constant pointers."""

    __slots__ = ("_buffer", "_call", "_direct", "_kernel", "_lock", "_pack", "_params", "_stream_at")

    def __init__(self, kernel: Kernel, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int) -> None:
        check_geometry(grid, block)
        if shared_bytes.__class__ is not int or shared_bytes < 0:
            raise LaunchArgumentError(f"shared_bytes must be a non-negative int, got {shared_bytes!r}")
        self._kernel = kernel
        binding = kernel.backend.binding
        address = getattr(binding, "launch_ex_address", lambda: None)()
        self._direct = address is not None
        self._call: Callable[..., Any]
        if self._direct:
            count = max(1, len(kernel.signature))
            head = ctypes.sizeof(LaunchConfig)
            buffer = ctypes.create_string_buffer(head + 16 * count)
            config = LaunchConfig.from_buffer(buffer)
            config.gridDimX, config.gridDimY, config.gridDimZ = grid
            config.blockDimX, config.blockDimY, config.blockDimZ = block
            config.sharedMemBytes = shared_bytes
            base = ctypes.addressof(buffer)
            slots = [base + head + 8 * i for i in range(count)]
            ctypes.memmove(base + head + 8 * count, (ctypes.c_void_p * count)(*slots), 8 * count)
            self._buffer = buffer
            self._stream_at = LaunchConfig.hStream.offset
            # The stream, then zeros over attrs and numAttrs (and the padding), then the slots.
            gap = head - self._stream_at - 8
            layout = "=Q" + f"{gap}x" + "".join(_PACKED[kind] for kind in kernel.signature)
            self._pack = struct.Struct(layout).pack_into
            self._lock = threading.Lock()
            self._params = base + head + 8 * count
            function = int(kernel.function)
            self._call = functools.partial(_launch_ex(address), base, function, self._params, None)
        else:
            self._buffer = kernel._buffer
            self._stream_at = 0
            self._pack = kernel._packer.pack_into
            self._lock = kernel._lock
            self._params = ctypes.addressof(kernel._array)
            self._call = functools.partial(binding.launch, kernel.function, *grid, *block, shared_bytes)

    def __call__(self, args: Sequence[object], stream: int | None = None) -> None:
        if self._direct:
            with self._lock:
                try:
                    self._pack(self._buffer, self._stream_at, stream or 0, *args)
                except struct.error as exc:
                    raise LaunchArgumentError(f"arguments {tuple(args)!r} do not fit {self._kernel.signature}: {exc}") from None
                code = self._call()
            if code:
                name = self._kernel.backend.binding.error_name(code)
                raise LaunchError(f"launching {self._kernel.compiled.lowered_name} failed: {name} ({code})")
            return
        with self._lock:
            try:
                self._pack(self._buffer, 0, *args)
            except struct.error as exc:
                raise LaunchArgumentError(f"arguments {tuple(args)!r} do not fit {self._kernel.signature}: {exc}") from None
            result = self._call(stream or 0, self._params, None)
        if result[0]:
            self._kernel.backend.check(result, f"launching {self._kernel.compiled.lowered_name}", LaunchError)


def check_geometry(grid: Sequence[int], block: Sequence[int]) -> None:
    """:class:`LaunchArgumentError` unless ``grid`` and ``block`` are three positive ints each."""
    if len(grid) != 3 or len(block) != 3 or not all(d.__class__ is int and d > 0 for d in (*grid, *block)):
        raise LaunchArgumentError(f"grid and block must be three positive ints each, got {grid!r} and {block!r}")


def fill_arguments(signature: Sequence[ArgKind], slots: Sequence[Any], args: Sequence[object]) -> None:
    """Check ``args`` against ``signature`` and store them into the ctypes ``slots``.

    Pointers may be ints or objects with ``data_ptr()`` (torch tensors); ``f32`` takes
    an int or float; integer kinds take ints in their range (never bools)."""
    if len(args) != len(signature):
        raise LaunchArgumentError(f"kernel takes {len(signature)} arguments ({', '.join(signature)}), got {len(args)}")
    for index, kind in enumerate(signature):
        arg = args[index]
        if kind == "ptr" and hasattr(arg, "data_ptr"):
            arg = arg.data_ptr()
        if kind == "f32":
            if arg.__class__ is not float and (isinstance(arg, bool) or not isinstance(arg, (int, float))):
                raise LaunchArgumentError(f"argument {index} must be a float (f32), got {type(arg).__name__}")
            slots[index].value = arg
            continue
        if arg.__class__ is not int and (isinstance(arg, bool) or not isinstance(arg, int)):
            raise LaunchArgumentError(f"argument {index} must be an int ({kind}), got {type(arg).__name__}")
        low, high = _INT_RANGES[kind]
        if not low <= arg <= high:
            raise LaunchArgumentError(f"argument {index} = {arg} does not fit {kind}")
        slots[index].value = arg


class Backend:
    """A GPU backend: compile, load, launch, time; one instance per (binding, device)."""

    def __init__(self, binding: Binding, ordinal: int = 0, arch: str | None = None, cache: CompileCache | None = None) -> None:
        self.binding = binding
        self.ordinal = ordinal
        self._arch = arch
        self._device: Device | None = None
        self._active = False
        self._lock = threading.Lock()
        self.cache = cache if cache is not None else CompileCache()

    @property
    def name(self) -> str:
        return self.binding.name

    # -- errors ---------------------------------------------------------------------------

    def check(self, result: Any, what: str, error: type[GPUError] = GPUError) -> Any:
        """Unpack ``(err, *outputs)``; raise ``error`` naming ``what`` on failure."""
        if isinstance(result, tuple):
            err, rest = result[0], result[1:]
        else:
            err, rest = result, ()
        if int(err) != 0:
            raise error(f"{what} failed: {getattr(err, 'name', err)} ({int(err)})")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    # -- the device -----------------------------------------------------------------------

    def device(self) -> Device:
        """The descriptor of the selected device (ordinal ``self.ordinal``)."""
        if self._device is None:
            self._device = self.binding.describe(self.ordinal)
        return self._device

    @property
    def arch(self) -> str:
        """The arch compiled for: the one given, else the selected device's."""
        if self._arch is None:
            self._arch = self.device().arch
        return self._arch

    def activate(self) -> None:
        """Make the selected device current for this thread (shares torch's context)."""
        if not self._active:
            self.binding.activate(self.ordinal)
            self._active = True

    # -- compiling ------------------------------------------------------------------------

    def options(self, request: CompileRequest) -> list[str]:
        """Every compiler option for ``request`` on this backend."""
        return [self.binding.arch_option(self.arch), *self.binding.default_options, self.binding.define, *request.options]

    def cache_key(self, request: CompileRequest) -> str:
        """sha256 of source, name expression, options, arch and compiler version."""
        h = hashlib.sha256()
        for part in (request.source, request.name_expression, "\0".join(self.options(request)), self.arch,
                     self.name, self.binding.compiler_version()):
            h.update(part.encode())
            h.update(b"\0\1")
        return h.hexdigest()

    def compile(self, request: CompileRequest) -> CompiledKernel:
        """Compile ``request`` (or take it from the cache).  Raises
        :class:`CompileError` carrying the compiler's log."""
        key = self.cache_key(request)
        hit = self.cache.get(key)
        if hit is not None:
            code, meta = hit
            return CompiledKernel(request, self.arch, code, meta["lowered_name"], meta.get("log", ""), key, True)
        code, lowered, log = self._compile_uncached(request)
        try:
            self.cache.put(key, code, {"lowered_name": lowered, "log": log, "arch": self.arch, "backend": self.name})
        except OSError as exc:
            # A full disk or a read-only cache costs the next process a compile; it must
            # not fail the call that has its code object in hand.
            logger.warning("compile cache %s: cannot store %s (%s)", self.cache.root, key[:12], exc.strerror or exc)
        return CompiledKernel(request, self.arch, code, lowered, log, key, False)

    def compile_many(self, requests: Iterable[CompileRequest], workers: int = 8) -> list[CompiledKernel | CompileError]:
        """Compile several requests in parallel threads; a failure is returned in place."""
        def one(req: CompileRequest) -> CompiledKernel | CompileError:
            try:
                return self.compile(req)
            except CompileError as exc:
                return exc

        items = list(requests)
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
            return list(pool.map(one, items))

    def _compile_uncached(self, request: CompileRequest) -> tuple[bytes, str, str]:
        rtc, prefix = self.binding.rtc, self.binding.rtc_prefix
        program = self.check(
            getattr(rtc, f"{prefix}CreateProgram")(request.source.encode(), b"flyconfigs_kernel.cu", 0, [], []),
            f"{prefix}CreateProgram", CompileError,
        )
        try:
            expression = request.name_expression.encode()
            self.check(getattr(rtc, f"{prefix}AddNameExpression")(program, expression), f"{prefix}AddNameExpression", CompileError)
            options = [o.encode() for o in self.options(request)]
            result = getattr(rtc, f"{prefix}CompileProgram")(program, len(options), options)
            log = self._program_log(program)
            if int(result[0]) != 0:
                raise CompileError(
                    f"compiling {request.name_expression} for {self.arch} failed: {getattr(result[0], 'name', result[0])}", log
                )
            lowered = self.check(getattr(rtc, f"{prefix}GetLoweredName")(program, expression), f"{prefix}GetLoweredName", CompileError)
            # Read now: the name lives in the program's memory, which destroying it frees
            # (hip-python hands back a view of it; a longer name read later was garbage).
            name = lowered.decode() if isinstance(lowered, bytes) else str(lowered)
            size_call, code_call = self.binding.code_getters
            size = self.check(getattr(rtc, size_call)(program), size_call, CompileError)
            buffer = bytearray(size) if self.name == "hip" else b" " * size
            self.check(getattr(rtc, code_call)(program, buffer), code_call, CompileError)
        finally:
            self.binding.destroy_program(program)
        return bytes(buffer), name.rstrip("\0"), log

    def _program_log(self, program: Any) -> str:
        rtc, prefix = self.binding.rtc, self.binding.rtc_prefix
        size = self.check(getattr(rtc, f"{prefix}GetProgramLogSize")(program), f"{prefix}GetProgramLogSize", CompileError)
        if not size:
            return ""
        buffer = bytearray(size) if self.name == "hip" else b" " * size
        self.check(getattr(rtc, f"{prefix}GetProgramLog")(program, buffer), f"{prefix}GetProgramLog", CompileError)
        return bytes(buffer).rstrip(b"\0 ").decode("utf-8", "replace").strip()

    # -- loading and launching ------------------------------------------------------------

    def load(self, compiled: CompiledKernel, signature: Sequence[ArgKind]) -> Kernel:
        """Load ``compiled`` on the selected device."""
        self.activate()
        module = self.check(self.binding.load_module(compiled.code), "loading the code object", LaunchError)
        function = self.check(self.binding.get_function(module, compiled.lowered_name.encode()), "finding the kernel", LaunchError)
        return Kernel(compiled, module, function, tuple(signature), self)

    def unload(self, kernel: Kernel) -> None:
        """Unload ``kernel``'s code object from the device; the caller must not launch it
        again (nor replay a graph that holds it)."""
        self.activate()
        self.check(self.binding.unload_module(kernel.module), "unloading the code object", LaunchError)

    def launch(
        self,
        kernel: Kernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[object],
        stream: int | None = None,
        shared_bytes: int = 0,
    ) -> None:
        """See :meth:`Kernel.launch`."""
        check_geometry(grid, block)
        with kernel._lock:
            fill_arguments(kernel.signature, kernel._slots, args)
            result = self.binding.launch(
                kernel.function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
                stream or 0, ctypes.addressof(kernel._array), None,
            )
        if result[0]:
            self.check(result, f"launching {kernel.compiled.lowered_name}", LaunchError)

    def synchronize(self) -> None:
        """Wait for the device; raises :class:`LaunchError` if a kernel faulted."""
        self.check(self.binding.synchronize(), "synchronizing the device", LaunchError)

    # -- timing ---------------------------------------------------------------------------

    def time_ms(self, run: Callable[[], None], stream: int | None = None) -> float:
        """Milliseconds between two events recorded around ``run()`` on ``stream``.  The
        events are destroyed before it returns, also when ``run`` raises."""
        events = []
        try:
            for _ in range(2):
                events.append(self.check(self.binding.event_create(), "creating an event"))
            start, end = events
            self.check(self.binding.event_record(start, stream or 0), "recording an event")
            run()
            self.check(self.binding.event_record(end, stream or 0), "recording an event")
            self.check(self.binding.event_synchronize(end), "waiting for an event", LaunchError)
            return float(self.check(self.binding.event_elapsed(start, end), "reading an event pair"))
        finally:
            for event in events:
                self.binding.event_destroy(event)

    # -- resources ------------------------------------------------------------------------

    def resources(self, compiled: CompiledKernel, block_threads: int, kernel: Kernel | None = None) -> Resources:
        """Registers, spills, shared memory and the occupancy a launch of
        ``block_threads`` threads allows.  AMD reads the code object (no GPU needed);
        NVIDIA asks the driver about the loaded function (``kernel``, loaded if absent)."""
        return self.binding.resources(self, compiled, block_threads, kernel)
