"""What the executor learns from the arrays it is given: where the bytes start, how many there are, their
element type and the device that holds them, and the CUDA stream a call runs on.

``buffer_view`` accepts torch tensors, CuPy and NumPy arrays, and anything exposing
``__cuda_array_interface__``, ``__array_interface__`` or ``__dlpack__``, in that order of preference.
torch and CuPy are never imported here: an object can only be one of theirs when its library is already
in ``sys.modules``, so that is where they are looked up.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import sys
from dataclasses import dataclass, field

from loom.errors import InvalidArgumentError

DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "int32", "uint32", "float8_e4m3fn", "float8_e5m2")

_ITEMSIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


@dataclass(frozen=True)
class BufferView:
    """One contiguous buffer as the native layer sees it.

    ``device_index`` is the CUDA ordinal, None on cpu; it is also None for a bare
    ``__cuda_array_interface__`` whose object does not say (no ``__dlpack_device__``): the native layer
    then asks the driver which device owns ``pointer``. ``owner`` is the object the view came from and
    ``keepalive`` anything else that must outlive the use of ``pointer`` (the DLPack capsule); the caller
    keeps the view, and so both, alive until the operation that reads or writes the memory is done.
    """

    pointer: int
    nbytes: int
    dtype: str
    device: str
    device_index: int | None
    owner: object = field(repr=False, compare=False)
    keepalive: object = field(default=None, repr=False, compare=False)
    readonly: bool = field(default=False, compare=False)  # the producer says it must not be written
    argument: str = field(default="buffer", compare=False)  # what the caller called it, for errors


def buffer_view(obj: object, argument: str) -> BufferView:
    """Describe ``obj`` for the native layer; ``argument`` ("input", "output") names it in errors.

    Raises InvalidArgumentError when ``obj`` is not an array Loom understands, is not C-contiguous (Loom
    never copies behind the caller's back), has a dtype outside DTYPES, or lives on a device other than
    cpu or cuda.
    """
    view = _view_of(obj, argument)
    if view.nbytes > MAX_BUFFER_BYTES or view.pointer + view.nbytes > 1 << 64:
        raise InvalidArgumentError(
            f"{argument}: {view.nbytes} bytes at {view.pointer:#x} is past what Loom addresses (sizes and offsets"
            " are 64-bit, at most 2^63 - 1 bytes)"
        )
    return dataclasses.replace(view, argument=argument)


def writable(view: BufferView) -> BufferView:
    """``view``, when Loom may write into it; an InvalidArgumentError naming the argument when its producer
    marked it read-only (NumPy ``writeable=False``, a read-only buffer or array interface, DLPack's read-only
    flag): a collective's output is written by the call, and by peers."""
    if view.readonly and view.nbytes > 0:
        raise InvalidArgumentError(
            f"{view.argument}: is read-only (its producer says so), but Loom writes the call's result into it;"
            " pass a writable buffer"
        )
    return view


# Sizes and offsets are 64-bit end to end (DESIGN.md); the native layer takes them as uint64 and signed
# differences of them must not wrap.
MAX_BUFFER_BYTES = (1 << 63) - 1


def _view_of(obj: object, argument: str) -> BufferView:
    if _is_instance_of(obj, "torch", "Tensor"):
        return _torch_view(obj, argument)
    interface = _interface(obj, "__cuda_array_interface__", argument)
    if interface is not None:
        return _cuda_interface_view(obj, interface, argument)
    if _is_instance_of(obj, "numpy", "ndarray"):
        return _numpy_view(obj, argument)
    interface = _interface(obj, "__array_interface__", argument)
    if interface is not None:
        return _array_interface_view(obj, interface, argument)
    if hasattr(obj, "__dlpack__"):
        return _dlpack_view(obj, argument)
    raise InvalidArgumentError(
        f"{argument} must be a torch tensor, a CuPy or NumPy array, or an object with __cuda_array_interface__, "
        f"__array_interface__ or __dlpack__; got {_type_name(obj)}"
    )


def stream_handle(stream: object, views: list[BufferView]) -> int:
    """The cudaStream_t to run on, as an int.

    None means the current stream of the framework (torch or CuPy) of the first CUDA buffer in ``views``
    that belongs to one, or 0 (the legacy default stream) when none does. Otherwise ``stream``
    is an int handle, an object with ``__cuda_stream__`` (returning ``(0, handle)``), a torch.cuda.Stream
    (``.cuda_stream``) or a CuPy stream (``.ptr``).
    """
    if stream is None:
        return _current_stream(views)
    if isinstance(stream, bool):
        raise InvalidArgumentError(f"stream must be a CUDA stream or a cudaStream_t handle, not the bool {stream}")
    if isinstance(stream, int):
        return _checked_handle(stream, "stream")
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        # cuda.core made __cuda_stream__ a method; its first releases had it as an attribute.
        return _cuda_stream_protocol(protocol() if callable(protocol) else protocol)
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int) and not isinstance(handle, bool):
        return _checked_handle(handle, "stream.cuda_stream")
    # `.ptr` is device memory on other CuPy objects (MemoryPointer), so only CuPy's stream types qualify.
    if _is_instance_of(stream, "cupy", "cuda.Stream") or _is_instance_of(stream, "cupy", "cuda.ExternalStream"):
        return _checked_handle(stream.ptr, "stream.ptr")
    raise InvalidArgumentError(
        "stream must be None, an int cudaStream_t, a torch.cuda.Stream, a CuPy stream or an object with "
        f"__cuda_stream__; got {_type_name(stream)}"
    )


def _current_stream(views: list[BufferView]) -> int:
    for view in views:
        if view.device != "cuda":
            continue
        if _is_instance_of(view.owner, "torch", "Tensor"):
            torch = sys.modules["torch"]
            # The raw handle, where torch has it (as its own compiled code reads it): current_stream()
            # builds a Stream object per call, a few microseconds of every eager call.
            raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
            if raw is not None and view.device_index is not None:
                return int(raw(view.device_index))
            return int(torch.cuda.current_stream(view.device_index).cuda_stream)
        if _is_instance_of(view.owner, "cupy", "ndarray"):
            cupy = sys.modules["cupy"]
            with cupy.cuda.Device(view.device_index):
                return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _cuda_stream_protocol(answer: object) -> int:
    if not (isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(part, int) for part in answer)):
        raise InvalidArgumentError(f"stream.__cuda_stream__ must give (version, handle) as two ints, not {answer!r}")
    version, handle = answer
    if version != 0:
        raise InvalidArgumentError(f"stream.__cuda_stream__ is protocol version {version}; Loom understands 0")
    return _checked_handle(handle, "stream.__cuda_stream__()[1]")


def _checked_handle(handle: int, what: str) -> int:
    if not 0 <= handle < 1 << 64:
        raise InvalidArgumentError(f"{what} is {handle}, which is not a cudaStream_t (0 to 2**64-1)")
    return handle


def _torch_view(tensor, argument: str) -> BufferView:
    torch = sys.modules["torch"]
    if tensor.layout is not torch.strided:
        raise InvalidArgumentError(f"{argument} is a {tensor.layout} tensor; Loom needs a dense one (.to_dense())")
    dtype = _torch_dtypes(torch).get(tensor.dtype)
    if dtype is None:
        raise _unsupported_dtype(argument, str(tensor.dtype).removeprefix("torch."))
    place = tensor.device  # a new torch.device each time it is asked for
    device = place.type
    if device not in ("cpu", "cuda"):
        raise _unsupported_device(argument, str(place))
    if not tensor.is_contiguous():
        raise _not_contiguous(argument, tuple(tensor.shape), tuple(tensor.stride()), "elements")
    index = place.index if device == "cuda" else None
    return BufferView(tensor.data_ptr(), tensor.numel() * tensor.element_size(), dtype, device, index, tensor)


@functools.lru_cache(maxsize=4)
def _torch_dtypes(torch) -> dict:
    """torch dtype -> Loom dtype name, once per torch module (every eager call asks)."""
    # uint32 and the float8 types are recent additions to torch; older releases simply cannot hold them.
    names = {"float32", "float16", "bfloat16", "int32", "uint32", "float8_e4m3fn", "float8_e5m2"}
    return {getattr(torch, name): name for name in names if hasattr(torch, name)}


def _numpy_view(array, argument: str) -> BufferView:
    dtype = _numpy_dtype(array.dtype, argument)
    if not array.flags.c_contiguous:
        raise _not_contiguous(argument, array.shape, array.strides, "bytes")
    pointer = array.__array_interface__["data"][0]
    return BufferView(pointer, array.nbytes, dtype, "cpu", None, array, readonly=not array.flags.writeable)


@functools.lru_cache(maxsize=64)
def _numpy_dtype_name(dtype) -> str | None:
    """The Loom dtype of a NumPy dtype, None when Loom has none (numpy builds dtype.name anew each time)."""
    # dtype.name, not the typestr: ml_dtypes' bfloat16 and float8 types all read '<V1'/'<V2' in a typestr.
    return dtype.name if dtype.name in _ITEMSIZE and dtype.isnative else None


def _numpy_dtype(dtype, argument: str) -> str:
    name = _numpy_dtype_name(dtype)
    if name is None:
        shown = dtype.name if dtype.isnative else f"{dtype.name} ({dtype.str}, non-native byte order)"
        raise _unsupported_dtype(argument, shown)
    return name


def _cuda_interface_view(obj, interface: dict, argument: str) -> BufferView:
    name = "__cuda_array_interface__"
    if interface.get("version") not in (2, 3):
        raise InvalidArgumentError(
            f"{argument}.{name} has version {interface.get('version')!r}; Loom reads versions 2 and 3"
        )
    pointer, nbytes, dtype = _interface_layout(interface, argument, name)
    readonly = bool(interface["data"][1])
    return BufferView(pointer, nbytes, dtype, "cuda", _cuda_device_index(obj), obj, readonly=readonly)


def _array_interface_view(obj, interface: dict, argument: str) -> BufferView:
    pointer, nbytes, dtype = _interface_layout(interface, argument, "__array_interface__")
    return BufferView(pointer, nbytes, dtype, "cpu", None, obj, readonly=bool(interface["data"][1]))


def _interface(obj, name: str, argument: str) -> dict | None:
    try:
        interface = getattr(obj, name, None)
    except Exception as error:  # e.g. a producer that cannot describe this particular array
        raise InvalidArgumentError(f"{argument}.{name} raised {type(error).__name__}: {error}") from error
    if interface is not None and not isinstance(interface, dict):
        raise InvalidArgumentError(f"{argument}.{name} is a {_type_name(interface)}, not a dict")
    return interface


def _interface_layout(interface: dict, argument: str, name: str) -> tuple[int, int, str]:
    """(pointer, nbytes, dtype) of an array interface dict, checked for contiguity."""
    where = f"{argument}.{name}"
    if interface.get("mask") is not None:
        raise InvalidArgumentError(f"{where} has a mask; Loom cannot run masked arrays")
    shape = interface.get("shape")
    if not isinstance(shape, (tuple, list)) or not all(_is_count(extent) for extent in shape):
        raise InvalidArgumentError(f"{where}['shape'] must be a tuple of non-negative ints, not {shape!r}")
    dtype = _typestr_dtype(interface.get("typestr"), interface.get("descr"), argument, where)
    data = interface.get("data")
    if not (isinstance(data, (tuple, list)) and len(data) == 2 and _is_count(data[0])):
        raise InvalidArgumentError(f"{where}['data'] must be (pointer, read_only), not {data!r}")
    strides = interface.get("strides")
    if strides is not None:
        if not (isinstance(strides, (tuple, list)) and len(strides) == len(shape)):
            raise InvalidArgumentError(f"{where}['strides'] must be None or one int per dimension, not {strides!r}")
        if not _is_c_contiguous(shape, strides, _ITEMSIZE[dtype]):
            raise _not_contiguous(argument, tuple(shape), tuple(strides), "bytes")
    return data[0], math.prod(shape) * _ITEMSIZE[dtype], dtype


_TYPESTR_DTYPES = {"f4": "float32", "f2": "float16", "i4": "int32", "u4": "uint32"}
_TYPESTR_KINDS = {"f": "float", "i": "int", "u": "uint", "c": "complex", "V": "void"}


def _typestr_dtype(typestr: object, descr: object, argument: str, where: str) -> str:
    if not (isinstance(typestr, str) and len(typestr) >= 3 and typestr[2:].isdigit()):
        raise InvalidArgumentError(f"{where}['typestr'] must look like '<f4', not {typestr!r}")
    if descr is not None and not _is_plain_descr(descr, typestr):
        raise _unsupported_dtype(argument, f"a structured dtype {descr!r}")
    order, code = typestr[0], typestr[1:]
    kind = _TYPESTR_KINDS.get(code[0])
    shown = f"{kind}{int(code[1:]) * 8}" if kind else "bool" if code == "b1" else f"typestr {typestr!r}"
    native = "<" if sys.byteorder == "little" else ">"
    if order not in ("|", "=", native):
        raise _unsupported_dtype(argument, f"{shown} ({typestr}, non-native byte order)")
    if code not in _TYPESTR_DTYPES:
        raise _unsupported_dtype(argument, shown)
    return _TYPESTR_DTYPES[code]


def _is_plain_descr(descr: object, typestr: str) -> bool:
    # [('', typestr)] describes a plain element; anything else is a structured one.
    return (
        isinstance(descr, (list, tuple))
        and len(descr) == 1
        and isinstance(descr[0], (list, tuple))
        and tuple(descr[0]) == ("", typestr)
    )


def _cuda_device_index(obj) -> int | None:
    # __cuda_array_interface__ carries no ordinal; CuPy, numba and most others also speak DLPack, whose
    # __dlpack_device__ says it without exporting anything.
    ask = getattr(obj, "__dlpack_device__", None)
    if not callable(ask):
        return None
    try:
        kind, index = ask()
    except Exception:
        return None
    return int(index) if kind in (_DL_CUDA, _DL_CUDA_MANAGED) else None


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_DEVICE_NAMES = {
    _DL_CPU: "cpu",
    _DL_CUDA: "cuda",
    _DL_CUDA_HOST: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    9: "vpi",
    10: "rocm",
    11: "rocm_host",
    12: "ext_dev",
    _DL_CUDA_MANAGED: "cuda_managed",
    14: "oneapi",
    15: "webgpu",
    16: "hexagon",
    17: "maia",
    18: "trn",
}
# (DLDataTypeCode, bits) -> Loom dtype; the float8 codes are DLPack 1.1's kDLFloat8_e4m3fn and kDLFloat8_e5m2.
_DL_DTYPES = {
    (2, 32): "float32",
    (2, 16): "float16",
    (4, 16): "bfloat16",
    (0, 32): "int32",
    (1, 32): "uint32",
    (10, 8): "float8_e4m3fn",
    (12, 8): "float8_e5m2",
}
_DL_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque", 4: "bfloat", 5: "complex", 6: "bool"}
_DL_FLOAT8_NAMES = {
    7: "float8_e3m4",
    8: "float8_e4m3",
    9: "float8_e4m3b11fnuz",
    10: "float8_e4m3fn",
    11: "float8_e4m3fnuz",
    12: "float8_e5m2",
    13: "float8_e5m2fnuz",
    14: "float8_e8m0fnu",
    15: "float6_e2m3fn",
    16: "float6_e3m2fn",
    17: "float4_e2m1fn",
}
_DL_FLAG_READ_ONLY = 1 << 0
_DL_FLAG_IS_COPIED = 1 << 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# Own prototypes rather than setting argtypes on ctypes.pythonapi's shared function objects.
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

# Newest first; a producer that predates a keyword answers TypeError and gets the next, shorter call.
# copy=False: a copy would be a silent one (an output written into it would be lost). stream=None is the
# array API's default: a CUDA producer orders its pending work before the legacy default stream.
_DLPACK_CALLS = (
    {"stream": None, "max_version": (1, 1), "copy": False},
    {"stream": None, "max_version": (1, 1)},
    {"stream": None},
    {},
)


def _dlpack_view(obj, argument: str) -> BufferView:
    capsule = _export_dlpack(obj, argument)
    # The capsule is read but not consumed: it keeps its name "dltensor" (or "dltensor_versioned") and the
    # view holds it as `keepalive`. When it is garbage-collected, the producer's capsule destructor sees an
    # unconsumed capsule and calls the deleter, exactly once. Consuming it instead (renaming it
    # "used_dltensor") would make Loom responsible for calling the deleter through a C function pointer, for
    # no gain: the memory must stay valid for as long as the view is used either way.
    readonly = False
    if _capsule_is_valid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        if managed.version.major != 1:
            raise InvalidArgumentError(
                f"{argument}.__dlpack__() gave a DLPack {managed.version.major}.{managed.version.minor} tensor; "
                "Loom reads DLPack 1.x"
            )
        if managed.flags & _DL_FLAG_IS_COPIED:
            raise InvalidArgumentError(
                f"{argument}.__dlpack__() exported a copy; Loom needs the array's own memory (no silent copies)"
            )
        readonly = bool(managed.flags & _DL_FLAG_READ_ONLY)
    elif _capsule_is_valid(capsule, b"dltensor"):
        managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    else:
        raise InvalidArgumentError(
            f"{argument}.__dlpack__() returned {capsule!r}, not an unconsumed 'dltensor' or 'dltensor_versioned' "
            "capsule"
        )
    pointer, nbytes, dtype, device, index = _read_dl_tensor(managed.dl_tensor, argument)
    return BufferView(pointer, nbytes, dtype, device, index, obj, keepalive=capsule, readonly=readonly)


def _export_dlpack(obj, argument: str) -> object:
    refusal: TypeError | None = None
    for keywords in _DLPACK_CALLS:
        try:
            return obj.__dlpack__(**keywords)
        except TypeError as error:
            refusal = error
        except BufferError as error:
            raise InvalidArgumentError(
                f"{argument} cannot be exported through DLPack without a copy: {error}"
            ) from error
    raise InvalidArgumentError(f"{argument}.__dlpack__() failed: {refusal}") from refusal


def _read_dl_tensor(tensor: _DLTensor, argument: str) -> tuple[int, int, str, str, int | None]:
    """(pointer, nbytes, dtype, device, device_index) of a DLTensor, checked for contiguity."""
    kind, ordinal = tensor.device.device_type, tensor.device.device_id
    if kind not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST):
        shown = _DL_DEVICE_NAMES.get(kind, "unknown")
        raise _unsupported_device(argument, f"{shown}:{ordinal} (DLPack device type {kind})")
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    dtype = _DL_DTYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        raise _unsupported_dtype(argument, _dl_dtype_name(code, bits, lanes))
    if tensor.ndim < 0:
        raise InvalidArgumentError(f"{argument}.__dlpack__() gave ndim {tensor.ndim}")
    shape = [tensor.shape[axis] for axis in range(tensor.ndim)]
    # NULL strides: a compact row-major tensor (legacy DLPack; 1.x producers always give them).
    if tensor.strides:
        strides = [tensor.strides[axis] for axis in range(tensor.ndim)]
        if not _is_c_contiguous(shape, strides, 1):
            raise _not_contiguous(argument, tuple(shape), tuple(strides), "elements")
    pointer = (tensor.data or 0) + tensor.byte_offset
    device = "cuda" if kind == _DL_CUDA else "cpu"
    index = ordinal if kind == _DL_CUDA else None
    return pointer, math.prod(shape) * _ITEMSIZE[dtype], dtype, device, index


def _dl_dtype_name(code: int, bits: int, lanes: int) -> str:
    if code in _DL_FLOAT8_NAMES:
        name = _DL_FLOAT8_NAMES[code]
    elif code == 6:
        name = "bool"
    elif code in _DL_CODE_NAMES:
        name = f"{_DL_CODE_NAMES[code]}{bits}"
    else:
        name = f"DLPack type code {code} ({bits} bits)"
    return f"{name} x{lanes} lanes" if lanes != 1 else name


def _is_c_contiguous(shape, strides, unit: int) -> bool:
    """Row-major with no gaps, dimensions of extent 1 (whose stride means nothing) left out; ``strides``
    count ``unit`` bytes and the element is ``unit`` wide. An array with no elements is contiguous."""
    if 0 in shape:
        return True
    expected = unit
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_instance_of(obj: object, module: str, type_path: str) -> bool:
    """isinstance(obj, module.type_path) if ``module`` is already imported, without importing it."""
    kind = sys.modules.get(module)
    for name in type_path.split("."):
        kind = getattr(kind, name, None)
    return isinstance(kind, type) and isinstance(obj, kind)


def _type_name(obj: object) -> str:
    kind = type(obj)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _unsupported_dtype(argument: str, shown: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{argument} has dtype {shown}, which Loom cannot run; supported dtypes: {', '.join(DTYPES)}"
    )


def _unsupported_device(argument: str, shown: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{argument} is on device {shown}; Loom runs on cpu and cuda memory only")


def _not_contiguous(argument: str, shape: tuple, strides: tuple, unit: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{argument} is not contiguous (shape {shape}, strides {strides} in {unit}); Loom does not copy it "
        f"behind your back: pass a contiguous array, e.g. {argument}.contiguous() for a torch tensor or "
        f"numpy.ascontiguousarray({argument}) / cupy.ascontiguousarray({argument})"
    )
