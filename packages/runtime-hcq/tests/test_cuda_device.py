"""The CUDA device against a fake libcuda (no GPU here): opening, memory, copies, module loading, argument packing,
launch dimensions, event timing and error messages. Tests on a real GPU run only where one opens."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from fake_libcuda import INVALID_PTX, LAUNCH_OUT_OF_RESOURCES, NO_DEVICE, FakeLibcuda

from kiln.codegen import (
    Compiler,
    KernelInfo,
    KernelSignature,
    Opt,
    OptOps,
    Program,
    Renderer,
    format_linear,
    get_program,
)
from kiln.runtime import Buffer, Device, DeviceUnavailable, OutOfMemoryError, copy_between
from kiln.runtime.cuda import CUDADevice, CUDAError, DriverAPI
from kiln.runtime.cuda.cuda_device import initialize
from kiln.uops import Ops, UOp, dtypes


class FakePTXCompiler(Compiler):
    """Turns source into an "image" the fake driver recognizes (the source itself)."""

    identity = "fake ptx compiler 1"

    def compile(self, source: str) -> bytes:
        return source.encode()


class FakeCUDARenderer(Renderer):
    """A GPU-shaped target for the fake GPUs (device kind FAKECUDA)."""

    device = "FAKECUDA"
    has_local = True
    has_shared = True
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    local_size_max = 1024
    shared_max = 49152
    compiler = FakePTXCompiler()

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        return "// fake ptx\n" + format_linear(uops)


@pytest.fixture
def fake() -> Iterator[FakeLibcuda]:
    """Two fake GPUs behind the device kind FAKECUDA (CUDADevice on the fake driver)."""
    library = FakeLibcuda(gpus=2)
    api = DriverAPI(library)
    Device.register("FAKECUDA", lambda name: CUDADevice(name, api))
    yield library
    Device.forget("FAKECUDA")
    Device.forget("FAKECUDA:1")


ROWS = 4


def scale_sink(limit: int) -> UOp:
    """out[r, i] = a[i] * k + r for i < n, r < ROWS (int32): a symbolic size and a variable in the parameters."""
    n, k = UOp.variable("n", 1, limit), UOp.variable("k", -100, 100)
    i, r = UOp.range(n, 0), UOp.range(ROWS, 1)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(ROWS * limit), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(limit), arg=1)
    value = a.index(i).load() * k.cast(dtypes.int32) + r.cast(dtypes.int32)
    return UOp(Ops.SINK, src=(out.index(r * limit + i).store(value).end(i, r),), arg=KernelInfo("scale"))


def test_opening_without_the_driver_library_is_unavailable() -> None:
    try:
        Device["CUDA"]
    except DeviceUnavailable as error:
        assert "CUDA:" in str(error)
    else:
        pytest.skip("a CUDA GPU opens on this machine")


def test_a_driver_without_gpus_is_unavailable() -> None:
    with pytest.raises(DeviceUnavailable, match=r"finds no GPU .*CUDA_ERROR_NO_DEVICE \(100\)"):
        initialize(DriverAPI(FakeLibcuda(init_result=NO_DEVICE)))
    api = DriverAPI(FakeLibcuda(gpus=1))
    with pytest.raises(DeviceUnavailable, match=r"'CUDA:1': the driver sees 1 CUDA GPU\(s\), so there is no GPU 1"):
        CUDADevice("CUDA:1", api)
    with pytest.raises(DeviceUnavailable, match="CUDA devices are numbered"):
        CUDADevice("CUDA:first", api)


def test_device_facts_come_from_the_driver() -> None:
    device = CUDADevice("CUDA:1", DriverAPI(FakeLibcuda(gpus=2, capability=(8, 9))))
    assert (device.ordinal, device.arch, device.gpu_name) == (1, "sm_89", "Fake GPU 1")


def test_renderers_come_from_kiln_renderers_table_with_a_clear_error_when_absent(fake: FakeLibcuda) -> None:
    device = Device["FAKECUDA"]
    assert isinstance(device, CUDADevice)
    from kiln.renderers import CUDARenderer, PTXRenderer, renderers_for

    assert device.renderers == renderers_for("CUDA") == (CUDARenderer, PTXRenderer)
    device.renderers = ()  # an installed kiln.renderers without CUDA renderers
    with pytest.raises(RuntimeError, match=r"offers none for CUDA"):
        device.renderer_class  # noqa: B018


def test_memory_round_trips_through_views_and_between_gpus(fake: FakeLibcuda) -> None:
    values = np.arange(100, dtype=np.float32) * 1.5
    source = Buffer("FAKECUDA", 100, dtypes.float32).copyin(values)
    np.testing.assert_array_equal(source.numpy(), values)  # no host view: numpy() copies out
    view = source.view(10, dtypes.float32, offset=40)
    np.testing.assert_array_equal(view.numpy(), values[10:20])
    same_gpu = Buffer("FAKECUDA", 100, dtypes.float32)
    copy_between(same_gpu, source)
    other_gpu = Buffer("FAKECUDA:1", 100, dtypes.float32)
    copy_between(other_gpu, same_gpu)  # cuMemcpyPeer between the two contexts (the fake checks them)
    np.testing.assert_array_equal(other_gpu.numpy(), values)
    host = Buffer("PYTHON", 100, dtypes.float32)
    copy_between(host, other_gpu)
    np.testing.assert_array_equal(host.numpy(), values)


def test_running_out_of_memory_empties_the_cache_then_names_the_request(fake: FakeLibcuda) -> None:
    fake.memory_per_gpu = 4096
    first = Buffer("FAKECUDA", 768, dtypes.float32).allocate()  # 3 KiB
    first.deallocate()  # cached by the LRU allocator, still allocated on the GPU
    second = Buffer("FAKECUDA", 512, dtypes.float32).allocate()  # 2 KiB fit only after the cache is freed
    assert fake.used[0] == 2048
    with pytest.raises(OutOfMemoryError, match=r"could not allocate 4096 bytes .*CUDA_ERROR_OUT_OF_MEMORY"):
        Buffer("FAKECUDA", 1024, dtypes.float32).allocate()
    assert second.is_allocated


def test_launch_packs_parameters_like_c_and_uses_the_programs_dims(fake: FakeLibcuda) -> None:
    program = Program(get_program(scale_sink(64), FakeCUDARenderer(), (Opt(OptOps.LOCAL, 1, ROWS),)))
    fake.programs[program.binary or b""] = program
    values = np.arange(64, dtype=np.int32) - 20
    out = Buffer("FAKECUDA", ROWS * 64, dtypes.int32).copyin(np.full(ROWS * 64, 7, np.int32))
    source = Buffer("FAKECUDA", 64, dtypes.int32).copyin(values)
    runner = Device["FAKECUDA"].runtime(program)
    assert runner([out, source], {"n": 40, "k": -3}) is None
    launch = fake.launches[-1]
    # the grid follows the symbolic size n; the block holds the ROWS threads of the LOCAL axis
    assert (launch.grid, launch.block) == ((40, 1, 1), (ROWS, 1, 1))
    # buffers by slot, then the variables sorted by name (k before n), as the kernel's parameter list declares them
    assert launch.parameters == (out.opaque, source.opaque, -3, 40)
    expected = np.full((ROWS, 64), 7, np.int32)
    expected[:, :40] = values[:40] * -3 + np.arange(ROWS)[:, None]
    np.testing.assert_array_equal(out.numpy().reshape(ROWS, 64), expected)


def test_wait_times_the_launch_with_events(fake: FakeLibcuda) -> None:
    program = Program(get_program(scale_sink(16), FakeCUDARenderer()))
    fake.programs[program.binary or b""] = program
    fake.event_milliseconds = 2.5
    buffers = [
        Buffer("FAKECUDA", ROWS * 16, dtypes.int32),
        Buffer("FAKECUDA", 16, dtypes.int32).copyin(np.ones(16, np.int32)),
    ]
    assert Device["FAKECUDA"].runtime(program)(buffers, {"n": 16, "k": 2}, wait=True) == pytest.approx(0.0025)


def test_driver_errors_name_the_call_the_kernel_and_the_cause(fake: FakeLibcuda) -> None:
    program = Program(get_program(scale_sink(32), FakeCUDARenderer()))
    with pytest.raises(CUDAError, match=r"cuModuleLoadDataEx failed \(loading 'scale' on FAKECUDA; JIT log: ptxas "):
        Device["FAKECUDA"].runtime(program)
    assert fake.loaded_images[-1].endswith(b"\x00")  # PTX text is handed over NUL-terminated
    fake.programs[program.binary or b""] = program
    fake.launch_result = LAUNCH_OUT_OF_RESOURCES
    buffers = [Buffer("FAKECUDA", ROWS * 32, dtypes.int32), Buffer("FAKECUDA", 32, dtypes.int32)]
    with pytest.raises(CUDAError, match=r"cuLaunchKernel failed \(scale on FAKECUDA, grid \(3, 1, 1\), block"):
        Device["FAKECUDA"].runtime(program)(buffers, {"n": 3, "k": 1})
    error = CUDAError("cuX", INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "bad")
    assert (error.code, error.error_name, error.function) == (218, "CUDA_ERROR_INVALID_PTX", "cuX")
    assert DriverAPI(fake).error_name(12345) == "CUresult 12345"  # a code the driver cannot name


def test_the_kernel_is_found_by_entry_name_then_by_program_name(fake: FakeLibcuda) -> None:
    program = Program(get_program(scale_sink(8), FakeCUDARenderer()))
    fake.programs[program.binary or b""] = program
    fake.entry_name = b"scale"  # a module whose kernel is named after the program
    assert Device["FAKECUDA"].runtime(program).function in fake.functions
    fake.entry_name = b"something_else"
    Device.forget("FAKECUDA")
    with pytest.raises(RuntimeError, match=r"no kernel named any of \['kiln_kernel', 'scale'\]"):
        Device["FAKECUDA"].runtime(program)


def test_cubin_images_are_passed_unchanged(fake: FakeLibcuda) -> None:
    image = b"\x7fELF\x02\x01\x01" + bytes(20)
    with pytest.raises(CUDAError, match="CUDA_ERROR_INVALID_PTX"):
        DriverAPI(fake).load_module(image)
    assert fake.loaded_images[-1] == image


def test_programs_without_a_binary_are_refused(fake: FakeLibcuda) -> None:
    class SourceOnly(FakeCUDARenderer):
        compiler = None

    program = Program(get_program(scale_sink(8), SourceOnly()))
    with pytest.raises(RuntimeError, match="'scale' has no binary: a CUDA program must come from a renderer with"):
        Device["FAKECUDA"].runtime(program)
