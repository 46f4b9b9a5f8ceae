"""loom.runtime.tensors: what the executor learns from the arrays and streams it is given.

NumPy, hand-made interface objects, NumPy's own DLPack export and a DLPack producer built here with
ctypes run everywhere. torch and CuPy are stood in for by small fake modules placed in sys.modules (the
code under test only ever looks them up there); the tests against the real libraries skip when those
are not installed, and their CUDA parts are marked gpu and skip without a device.
"""

from __future__ import annotations

import ctypes
import sys
import types

import numpy as np
import pytest
from loom.errors import InvalidArgumentError
from loom.runtime.tensors import DTYPES, BufferView, buffer_view, stream_handle

SUPPORTED = ", ".join(DTYPES)
RNG = np.random.default_rng(20240611)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_dtypes_are_the_native_layers_in_order() -> None:
    assert DTYPES == ("float32", "float16", "bfloat16", "int32", "uint32", "float8_e4m3fn", "float8_e5m2")


# NumPy


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint32"])
def test_numpy_arrays_of_each_dtype(dtype: str) -> None:
    shape = tuple(int(n) for n in RNG.integers(1, 9, size=3))
    array = RNG.integers(0, 100, size=shape).astype(dtype)
    view = buffer_view(array, "input")
    assert view == BufferView(_address(array), array.size * np.dtype(dtype).itemsize, dtype, "cpu", None, array)
    assert view.owner is array


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_ml_dtypes_arrays_map_by_dtype_name(dtype: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed (bfloat16/float8 NumPy arrays)")
    array = np.ones((5, 7), dtype=getattr(ml_dtypes, dtype))
    view = buffer_view(array, "output")
    assert (view.dtype, view.nbytes, view.pointer) == (dtype, 35 * array.itemsize, _address(array))


def test_slices_start_at_their_first_element() -> None:
    array = np.arange(60, dtype=np.float32).reshape(6, 10)
    rows = array[2:5]
    view = buffer_view(rows, "input")
    assert view.pointer == _address(rows) == _address(array) + 2 * 10 * 4
    assert view.nbytes == 3 * 10 * 4
    tail = array.reshape(-1)[37:]
    assert buffer_view(tail, "input").pointer == _address(array) + 37 * 4


def test_zero_element_and_zero_dimensional_arrays() -> None:
    empty = np.zeros((0, 4), dtype=np.int32)
    assert buffer_view(empty, "input").nbytes == 0
    assert buffer_view(np.zeros((3, 0), dtype=np.float32)[:, ::2], "input").nbytes == 0
    scalar = np.array(7, dtype=np.uint32)
    assert buffer_view(scalar, "input").nbytes == 4


def test_size_one_dimensions_do_not_break_contiguity() -> None:
    base = np.arange(8, dtype=np.float16)
    column = np.lib.stride_tricks.as_strided(base, shape=(8, 1), strides=(2, 998))
    view = buffer_view(column, "input")
    assert (view.pointer, view.nbytes) == (_address(base), 16)


@pytest.mark.parametrize(
    "make", [lambda a: a[:, 1:], lambda a: a[::2], lambda a: a.T, lambda a: a.reshape(-1)[::3]], ids=str
)
def test_non_contiguous_arrays_are_refused_not_copied(make) -> None:
    array = make(np.zeros((4, 6), dtype=np.float32))
    with pytest.raises(InvalidArgumentError, match=r"^output is not contiguous \(shape") as raised:
        buffer_view(array, "output")
    assert f"strides {array.strides} in bytes" in str(raised.value)
    assert "output.contiguous()" in str(raised.value)
    assert "numpy.ascontiguousarray(output)" in str(raised.value)


@pytest.mark.parametrize(
    ("dtype", "shown"),
    [("float64", "float64"), ("int64", "int64"), ("bool", "bool"), ("complex64", "complex64"), (">f4", "float32")],
)
def test_unsupported_numpy_dtypes_are_named(dtype: str, shown: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        buffer_view(np.zeros(4, dtype=dtype), "input")
    message = str(raised.value)
    assert message.startswith(f"input has dtype {shown}")
    assert message.endswith(f"which Loom cannot run; supported dtypes: {SUPPORTED}")
    if dtype.startswith(">"):
        assert "(>f4, non-native byte order)" in message


@pytest.mark.parametrize("thing", [[1.0, 2.0], "abc", b"abc", None, object(), memoryview(b"abcd")])
def test_unknown_objects(thing) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^input must be a torch tensor, a CuPy or NumPy array") as raised:
        buffer_view(thing, "input")
    assert str(raised.value).endswith(f"got {type(thing).__qualname__}")


# __cuda_array_interface__ and a bare __array_interface__


class CudaArray:
    """A device array as numba or a custom allocator would expose it."""

    def __init__(self, device: int | None = None, **interface) -> None:
        self.__cuda_array_interface__ = {"version": 3, "data": (0x7F00_0000_1000, False), "strides": None}
        self.__cuda_array_interface__.update(interface)
        if device is not None:
            self.__dlpack_device__ = lambda: (2, device)

    def __dlpack__(self, **_):
        raise AssertionError("__cuda_array_interface__ comes before DLPack")


class HostArray:
    def __init__(self, **interface) -> None:
        self.__array_interface__ = {"version": 3, "data": (0x5500_0000, False), "strides": None, **interface}


def test_cuda_array_interface_contiguous() -> None:
    view = buffer_view(CudaArray(shape=(3, 5), typestr="<f2"), "input")
    assert (view.pointer, view.nbytes, view.dtype, view.device, view.device_index) == (
        0x7F00_0000_1000,
        30,
        "float16",
        "cuda",
        None,
    )


def test_cuda_array_interface_device_comes_from_dlpack_device() -> None:
    view = buffer_view(CudaArray(device=3, shape=(4,), typestr="<i4", version=2), "output")
    assert (view.device, view.device_index, view.dtype, view.nbytes) == ("cuda", 3, "int32", 16)


def test_cuda_array_interface_explicit_row_major_strides_and_size_one_dimensions() -> None:
    view = buffer_view(CudaArray(shape=(2, 1, 3), strides=(12, 999, 4), typestr="<u4"), "input")
    assert (view.dtype, view.nbytes) == ("uint32", 24)


def test_cuda_array_interface_strided_is_refused() -> None:
    array = CudaArray(shape=(4, 3), strides=(24, 4), typestr="<f4")
    with pytest.raises(InvalidArgumentError, match=r"^input is not contiguous \(shape \(4, 3\), strides \(24, 4\)"):
        buffer_view(array, "input")


def test_cuda_array_interface_with_plain_descr() -> None:
    view = buffer_view(CudaArray(shape=(8,), typestr="<f4", descr=[("", "<f4")]), "input")
    assert (view.dtype, view.nbytes) == ("float32", 32)


def test_cuda_array_interface_structured_descr_is_refused() -> None:
    descr = [("re", "<f4"), ("im", "<f4")]
    with pytest.raises(InvalidArgumentError, match=r"^input has dtype a structured dtype .*supported dtypes: float32"):
        buffer_view(CudaArray(shape=(8,), typestr="|V8", descr=descr), "input")


@pytest.mark.parametrize(
    ("typestr", "shown"), [("<f8", "float64"), ("<i8", "int64"), ("|b1", "bool"), ("<V2", "void16")]
)
def test_cuda_array_interface_unsupported_typestr(typestr: str, shown: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        buffer_view(CudaArray(shape=(2,), typestr=typestr), "output")
    assert str(raised.value) == f"output has dtype {shown}, which Loom cannot run; supported dtypes: {SUPPORTED}"


def test_cuda_array_interface_zero_elements_with_null_pointer() -> None:
    view = buffer_view(CudaArray(shape=(0, 16), typestr="<f4", data=(0, False)), "input")
    assert (view.pointer, view.nbytes) == (0, 0)


@pytest.mark.parametrize(
    ("interface", "pattern"),
    [
        ({"version": 1}, r"__cuda_array_interface__ has version 1; Loom reads versions 2 and 3"),
        ({"mask": object()}, r"has a mask"),
        ({"shape": (2, -1)}, r"\['shape'\] must be a tuple of non-negative ints"),
        ({"typestr": "float32"}, r"\['typestr'\] must look like '<f4'"),
        ({"data": 1234}, r"\['data'\] must be \(pointer, read_only\)"),
        ({"strides": (4,)}, r"\['strides'\] must be None or one int per dimension"),
    ],
)
def test_malformed_cuda_array_interface(interface: dict, pattern: str) -> None:
    array = CudaArray(**{"shape": (2, 3), "typestr": "<f4", **interface})
    with pytest.raises(InvalidArgumentError, match="^input"):
        buffer_view(array, "input")
    with pytest.raises(InvalidArgumentError, match=pattern):
        buffer_view(array, "input")


def test_a_raising_interface_is_reported_against_the_argument() -> None:
    class Refuses:
        @property
        def __cuda_array_interface__(self):
            raise TypeError("bfloat16 has no typestr")

    with pytest.raises(InvalidArgumentError, match=r"^output.__cuda_array_interface__ raised TypeError: bfloat16"):
        buffer_view(Refuses(), "output")


def test_bare_array_interface_is_cpu_memory() -> None:
    view = buffer_view(HostArray(shape=(2, 3), typestr="<i4", strides=(12, 4)), "input")
    assert view == BufferView(0x5500_0000, 24, "int32", "cpu", None, None)
    with pytest.raises(InvalidArgumentError, match=r"^input is not contiguous"):
        buffer_view(HostArray(shape=(2, 3), typestr="<i4", strides=(4, 8)), "input")


# DLPack: NumPy's own export, reached only through __dlpack__


class DLPackOnly:
    """Hides everything of a NumPy array but __dlpack__ / __dlpack_device__."""

    def __init__(self, array: np.ndarray, keywords: tuple[str, ...] | None = None) -> None:
        self.array = array
        self.keywords = keywords  # None: pass everything through; else the keywords an older producer knows
        self.calls: list[dict] = []

    def __dlpack__(self, **keywords):
        self.calls.append(keywords)
        if self.keywords is not None and set(keywords) - set(self.keywords):
            raise TypeError(f"__dlpack__() got an unexpected keyword argument {sorted(keywords)[0]!r}")
        return self.array.__dlpack__(**keywords)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize(
    ("keywords", "capsule"),
    [(None, "dltensor_versioned"), (("stream",), "dltensor"), ((), "dltensor")],
    ids=["versioned", "stream-only", "no-keywords"],
)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint32"])
def test_dlpack_round_trip_through_numpy(dtype: str, keywords, capsule: str) -> None:
    base = RNG.integers(0, 50, size=(9, 6)).astype(dtype)
    rows = base[3:7]
    producer = DLPackOnly(rows, keywords)
    view = buffer_view(producer, "input")
    assert view == BufferView(_address(rows), 4 * 6 * base.itemsize, dtype, "cpu", None, producer)
    assert view.pointer == _address(base) + 3 * 6 * base.itemsize
    assert view.owner is producer
    assert f'capsule object "{capsule}"' in repr(view.keepalive)
    assert producer.calls[0] == {"stream": None, "max_version": (1, 1), "copy": False}


def test_dlpack_capsule_is_freed_by_its_producer_once_the_view_goes() -> None:
    array = np.zeros((4, 4), dtype=np.float32)
    producer = DLPackOnly(array)
    before = sys.getrefcount(array)
    view = buffer_view(producer, "input")
    assert sys.getrefcount(array) == before + 1  # the DLManagedTensor's reference, held by the capsule
    del view
    assert sys.getrefcount(array) == before


def test_dlpack_non_contiguous_and_unsupported_dtype() -> None:
    strided = np.zeros((4, 6), dtype=np.int32)[:, ::2]
    with pytest.raises(InvalidArgumentError, match=r"^output is not contiguous \(shape \(4, 3\), strides \(6, 2\) in"):
        buffer_view(DLPackOnly(strided), "output")
    with pytest.raises(InvalidArgumentError, match=rf"^output has dtype float64, .*supported dtypes: {SUPPORTED}$"):
        buffer_view(DLPackOnly(np.zeros(3)), "output")


def test_dlpack_zero_elements() -> None:
    view = buffer_view(DLPackOnly(np.zeros((0, 3), dtype=np.float32)), "input")
    assert (view.nbytes, view.device) == (0, "cpu")


def test_dlpack_export_refused_by_the_producer() -> None:
    readonly = np.zeros(4, dtype=np.float32)
    readonly.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match=r"^input cannot be exported through DLPack without a copy: "):
        buffer_view(DLPackOnly(readonly, keywords=()), "input")


# DLPack: a producer built here, for what NumPy cannot export (devices, bfloat16, float8, byte offsets)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)


class HandmadeDLPack:
    """Exports a DLManagedTensor over its own 256 bytes; no deleter, the object owns everything."""

    def __init__(
        self, code: int, bits: int, shape, *, strides=None, lanes=1, device=(1, 0), byte_offset=0, **versioned
    ):
        self.storage = (ctypes.c_uint8 * 256)()
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides) if strides is not None else None
        tensor = DLTensor(
            data=ctypes.addressof(self.storage),
            device=DLDevice(*device),
            ndim=len(shape),
            dtype=DLDataType(code, bits, lanes),
            shape=ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)),
            strides=ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64)) if self.strides else None,
            byte_offset=byte_offset,
        )
        if versioned:
            self.managed = DLManagedTensorVersioned(
                major=versioned.get("major", 1), minor=1, flags=versioned.get("flags", 0), dl_tensor=tensor
            )
            self.name = b"dltensor_versioned"
        else:
            self.managed = DLManagedTensor(dl_tensor=tensor)
            self.name = b"dltensor"

    @property
    def address(self) -> int:
        return ctypes.addressof(self.storage)

    def __dlpack__(self, stream=None, max_version=None, copy=None):
        if self.name == b"dltensor_versioned" and max_version is None:
            raise AssertionError("a consumer that reads versioned tensors asks for them")
        return _capsule_new(ctypes.addressof(self.managed), self.name, None)


@pytest.mark.parametrize(
    ("code", "bits", "dtype"),
    [(2, 32, "float32"), (2, 16, "float16"), (4, 16, "bfloat16"), (0, 32, "int32"), (1, 32, "uint32")]
    + [(10, 8, "float8_e4m3fn"), (12, 8, "float8_e5m2")],
)
@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_type_codes(code: int, bits: int, dtype: str, versioned: bool) -> None:
    producer = HandmadeDLPack(code, bits, (3, 4), **({"major": 1} if versioned else {}))
    view = buffer_view(producer, "input")
    assert view == BufferView(producer.address, 12 * bits // 8, dtype, "cpu", None, producer)


@pytest.mark.parametrize(
    ("code", "bits", "lanes", "shown"),
    [
        (2, 64, 1, "float64"),
        (4, 32, 1, "bfloat32"),
        (6, 8, 1, "bool"),
        (5, 64, 1, "complex64"),
        (8, 8, 1, "float8_e4m3"),
        (11, 8, 1, "float8_e4m3fnuz"),
        (17, 4, 1, "float4_e2m1fn"),
        (2, 32, 4, "float32 x4 lanes"),
        (99, 8, 1, "DLPack type code 99 (8 bits)"),
    ],
)
def test_dlpack_unsupported_types(code: int, bits: int, lanes: int, shown: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        buffer_view(HandmadeDLPack(code, bits, (2,), lanes=lanes), "input")
    assert str(raised.value) == f"input has dtype {shown}, which Loom cannot run; supported dtypes: {SUPPORTED}"


def test_dlpack_cuda_device_and_byte_offset() -> None:
    producer = HandmadeDLPack(4, 16, (2, 8), device=(2, 3), byte_offset=64, major=1)
    view = buffer_view(producer, "output")
    assert (view.pointer, view.nbytes, view.dtype, view.device, view.device_index) == (
        producer.address + 64,
        32,
        "bfloat16",
        "cuda",
        3,
    )


def test_dlpack_pinned_host_memory_is_cpu() -> None:
    view = buffer_view(HandmadeDLPack(2, 32, (4,), device=(3, 0)), "input")
    assert (view.device, view.device_index) == ("cpu", None)


@pytest.mark.parametrize(
    ("device", "shown"), [((10, 1), "rocm:1"), ((13, 0), "cuda_managed:0"), ((42, 0), "unknown:0")]
)
def test_dlpack_other_devices_are_refused(device, shown: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        buffer_view(HandmadeDLPack(2, 32, (4,), device=device), "input")
    assert str(raised.value) == (
        f"input is on device {shown} (DLPack device type {device[0]}); Loom runs on cpu and cuda memory only"
    )


def test_dlpack_strides() -> None:
    assert buffer_view(HandmadeDLPack(2, 32, (3, 1, 5), strides=(5, 77, 1)), "input").nbytes == 60
    with pytest.raises(InvalidArgumentError, match=r"^input is not contiguous \(shape \(3, 5\), strides \(1, 3\) in"):
        buffer_view(HandmadeDLPack(2, 32, (3, 5), strides=(1, 3)), "input")


def test_dlpack_versioned_major_and_copies() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^input.__dlpack__\(\) gave a DLPack 2.1 tensor; Loom reads"):
        buffer_view(HandmadeDLPack(2, 32, (4,), major=2), "input")
    with pytest.raises(InvalidArgumentError, match=r"^output.__dlpack__\(\) exported a copy; Loom needs"):
        buffer_view(HandmadeDLPack(2, 32, (4,), major=1, flags=2), "output")
    assert buffer_view(HandmadeDLPack(2, 32, (4,), major=1, flags=1), "input").nbytes == 16  # read-only flag


def test_dlpack_capsule_of_another_kind() -> None:
    class UsedCapsule:
        def __init__(self) -> None:
            self.tensor = HandmadeDLPack(2, 32, (1,))

        def __dlpack__(self, **_):
            return _capsule_new(ctypes.addressof(self.tensor.managed), b"used_dltensor", None)

    with pytest.raises(InvalidArgumentError, match=r"^input.__dlpack__\(\) returned <capsule object \"used_dltensor\""):
        buffer_view(UsedCapsule(), "input")


# torch and CuPy, stood in for by fake modules


class FakeTorchDtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class FakeTorchDevice:
    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.type, _, index = spec.partition(":")
        self.index = int(index) if index else None

    def __str__(self) -> str:
        return self.spec


@pytest.fixture
def fake_torch(monkeypatch):
    torch = types.ModuleType("torch")
    for name in ("float32", "float16", "bfloat16", "int32", "uint32", "float8_e4m3fn", "float8_e5m2", "float64"):
        setattr(torch, name, FakeTorchDtype(name))
    torch.strided, torch.sparse_coo = "torch.strided", "torch.sparse_coo"
    torch.cuda = types.SimpleNamespace(current_stream=lambda device: types.SimpleNamespace(cuda_stream=0x5000 + device))

    class Tensor:
        def __init__(self, dtype, shape, stride, *, device="cuda:1", pointer=0x7000_0000, layout=torch.strided):
            self.dtype, self.shape, self._stride, self.layout, self._pointer = dtype, shape, stride, layout, pointer
            self.device = FakeTorchDevice(device)

        def data_ptr(self):
            return self._pointer

        def numel(self):
            return int(np.prod(self.shape))

        def element_size(self):
            return {"float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "float64": 8}.get(
                self.dtype.name, 4
            )

        def stride(self):
            return self._stride

        def is_contiguous(self):
            return self._stride == tuple(int(np.prod(self.shape[i + 1 :])) for i in range(len(self.shape)))

    torch.Tensor = Tensor
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


@pytest.mark.parametrize("dtype", DTYPES)
def test_fake_torch_tensors(fake_torch, dtype: str) -> None:
    tensor = fake_torch.Tensor(getattr(fake_torch, dtype), (4, 3), (3, 1))
    view = buffer_view(tensor, "input")
    assert view == BufferView(0x7000_0000, 12 * tensor.element_size(), dtype, "cuda", 1, tensor)
    assert stream_handle(None, [view]) == 0x5001


def test_fake_torch_current_stream_is_read_raw_where_torch_has_it(fake_torch) -> None:
    # torch._C._cuda_getCurrentRawStream: the handle without a Stream object per call (eager calls' cost).
    fake_torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0x9000 + index)
    view = buffer_view(fake_torch.Tensor(fake_torch.float32, (4,), (1,), device="cuda:2"), "input")
    assert stream_handle(None, [view]) == 0x9002


def test_fake_torch_refusals(fake_torch) -> None:
    tensor = fake_torch.Tensor
    with pytest.raises(InvalidArgumentError, match=rf"^output has dtype float64, .*supported dtypes: {SUPPORTED}$"):
        buffer_view(tensor(fake_torch.float64, (4,), (1,)), "output")
    with pytest.raises(InvalidArgumentError, match=r"^output is not contiguous \(shape \(4, 3\), strides \(1, 4\) in"):
        buffer_view(tensor(fake_torch.float32, (4, 3), (1, 4)), "output")
    with pytest.raises(InvalidArgumentError, match=r"output.contiguous\(\)"):
        buffer_view(tensor(fake_torch.float32, (4, 3), (1, 4)), "output")
    with pytest.raises(InvalidArgumentError, match=r"^input is a torch.sparse_coo tensor; Loom needs a dense one"):
        buffer_view(tensor(fake_torch.float32, (4,), (1,), layout=fake_torch.sparse_coo), "input")
    with pytest.raises(InvalidArgumentError, match=r"^input is on device mps; Loom runs on cpu and cuda memory only"):
        buffer_view(tensor(fake_torch.float32, (4,), (1,), device="mps"), "input")


def test_fake_torch_cpu_tensors_run_on_stream_zero(fake_torch) -> None:
    view = buffer_view(fake_torch.Tensor(fake_torch.int32, (5,), (1,), device="cpu"), "input")
    assert (view.device, view.device_index) == ("cpu", None)
    assert stream_handle(None, [view]) == 0


@pytest.fixture
def fake_cupy(monkeypatch):
    cupy = types.ModuleType("cupy")
    current = [0]

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.saved, current[0] = current[0], self.index

        def __exit__(self, *_):
            current[0] = self.saved

    class ndarray(CudaArray):  # CuPy's spelling
        pass

    class Stream:
        def __init__(self, ptr: int) -> None:
            self.ptr = ptr

    class ExternalStream(Stream):
        pass

    class MemoryPointer:
        def __init__(self, ptr: int) -> None:
            self.ptr = ptr

    cupy.ndarray = ndarray
    cupy.cuda = types.SimpleNamespace(
        Device=Device,
        Stream=Stream,
        ExternalStream=ExternalStream,
        MemoryPointer=MemoryPointer,
        get_current_stream=lambda: Stream(0x6000 + current[0]),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


def test_fake_cupy_current_stream_is_the_arrays_devices(fake_cupy) -> None:
    view = buffer_view(fake_cupy.ndarray(device=2, shape=(4,), typestr="<f4"), "input")
    assert (view.device, view.device_index) == ("cuda", 2)
    assert stream_handle(None, [view]) == 0x6002
    plain = buffer_view(CudaArray(device=1, shape=(4,), typestr="<f4"), "input")
    assert stream_handle(None, [plain]) == 0
    assert stream_handle(None, [plain, view]) == 0x6002


def test_fake_cupy_streams_but_not_other_objects_with_ptr(fake_cupy) -> None:
    assert stream_handle(fake_cupy.cuda.Stream(0xDEF0), []) == 0xDEF0
    assert stream_handle(fake_cupy.cuda.ExternalStream(0xDEF8), []) == 0xDEF8
    with pytest.raises(InvalidArgumentError, match=r"^stream must be None, .*; got .*MemoryPointer$"):
        stream_handle(fake_cupy.cuda.MemoryPointer(0x7F00_0000_0000), [])


# stream_handle


def test_stream_none_without_a_framework_is_the_default_stream() -> None:
    assert stream_handle(None, []) == 0
    assert stream_handle(None, [buffer_view(np.zeros(4, dtype=np.float32), "input")]) == 0


@pytest.mark.parametrize("handle", [0, 1, 2, 0x7F12_3456_7890, (1 << 64) - 1])
def test_stream_ints(handle: int) -> None:
    assert stream_handle(handle, []) == handle


def test_stream_objects() -> None:
    torch_like = types.SimpleNamespace(cuda_stream=0xABC0)
    assert stream_handle(torch_like, []) == 0xABC0

    class CudaCoreStream:
        def __cuda_stream__(self):
            return (0, 0x1230)

    assert stream_handle(CudaCoreStream(), []) == 0x1230
    assert stream_handle(types.SimpleNamespace(__cuda_stream__=(0, 0x4560)), []) == 0x4560


@pytest.mark.parametrize(
    ("stream", "pattern"),
    [
        (-1, r"^stream is -1, which is not a cudaStream_t"),
        (1 << 64, r"^stream is 18446744073709551616, which is not a cudaStream_t"),
        (True, r"^stream must be a CUDA stream or a cudaStream_t handle, not the bool True"),
        ("0", r"^stream must be None, an int cudaStream_t, .*; got str$"),
        (1.0, r"^stream must be None, an int cudaStream_t, .*; got float$"),
        (types.SimpleNamespace(ptr=0x1000), r"^stream must be None, .*; got types.SimpleNamespace$"),
        (types.SimpleNamespace(cuda_stream="x"), r"^stream must be None"),
        (types.SimpleNamespace(__cuda_stream__=lambda: (1, 5)), r"^stream.__cuda_stream__ is protocol version 1"),
        (types.SimpleNamespace(__cuda_stream__=lambda: 5), r"^stream.__cuda_stream__ must give \(version, handle\)"),
        (types.SimpleNamespace(cuda_stream=-5), r"^stream.cuda_stream is -5, which is not a cudaStream_t"),
    ],
)
def test_bad_streams(stream, pattern: str) -> None:
    with pytest.raises(InvalidArgumentError, match=pattern):
        stream_handle(stream, [])


# The real libraries (skipped where they are not installed)


def _torch_dtypes(torch) -> list:
    names = [name for name in DTYPES if hasattr(torch, name)]
    return [(getattr(torch, name), name) for name in names]


def test_torch_cpu_tensors() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    for dtype, name in _torch_dtypes(torch):
        tensor = torch.empty((6, 5), dtype=dtype)
        view = buffer_view(tensor, "input")
        assert view == BufferView(tensor.data_ptr(), 30 * tensor.element_size(), name, "cpu", None, tensor)
        assert buffer_view(tensor[2:], "input").pointer == tensor.data_ptr() + 10 * tensor.element_size()
    with pytest.raises(InvalidArgumentError, match=r"^output is not contiguous.*output.contiguous\(\)"):
        buffer_view(torch.empty((6, 5)).t(), "output")
    with pytest.raises(InvalidArgumentError, match=rf"^input has dtype float64, .*supported dtypes: {SUPPORTED}$"):
        buffer_view(torch.empty(3, dtype=torch.float64), "input")
    assert stream_handle(None, [buffer_view(torch.empty(3), "input")]) == 0


def _cuda_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.mark.gpu
def test_torch_cuda_tensors_and_streams() -> None:
    torch = _cuda_torch()
    device = torch.cuda.device_count() - 1
    for dtype, name in _torch_dtypes(torch):
        tensor = torch.empty((4, 8), dtype=dtype, device=f"cuda:{device}")
        view = buffer_view(tensor, "output")
        assert (view.pointer, view.dtype, view.device, view.device_index) == (tensor.data_ptr(), name, "cuda", device)
    assert stream_handle(None, [view]) == torch.cuda.current_stream(device).cuda_stream
    side = torch.cuda.Stream(device=device)
    assert stream_handle(side, [view]) == side.cuda_stream
    with torch.cuda.stream(side):
        assert stream_handle(None, [view]) == side.cuda_stream


def _cuda_cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("CuPy sees no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as error:
        pytest.skip(f"CuPy sees no CUDA device: {error}")
    return cupy


@pytest.mark.gpu
def test_cupy_arrays_and_streams() -> None:
    cupy = _cuda_cupy()
    for name in ("float32", "float16", "int32", "uint32"):
        array = cupy.zeros((4, 8), dtype=name)
        view = buffer_view(array, "input")
        assert view == BufferView(array.data.ptr, array.nbytes, name, "cuda", array.device.id, array)
        assert buffer_view(array[1:], "input").pointer == array.data.ptr + 8 * array.itemsize
    with pytest.raises(InvalidArgumentError, match=r"^input is not contiguous"):
        buffer_view(cupy.zeros((4, 8), dtype="float32")[:, ::2], "input")
    assert stream_handle(None, [view]) == cupy.cuda.get_current_stream().ptr
    with cupy.cuda.Stream() as side:
        assert stream_handle(None, [view]) == side.ptr
    assert stream_handle(side, []) == side.ptr
    with pytest.raises(InvalidArgumentError, match=r"^stream must be None"):
        stream_handle(array.data, [])  # a MemoryPointer: its .ptr is device memory, not a stream
