"""The LLVM IR renderer's compiler: llvmlite in this process (no subprocess), and in-process loading.

`LLVMCompiler.compile` parses the IR with llvmlite, optimizes it for the host CPU and returns a relocatable ELF object.
The IR pipeline is the LLVM_PIPELINE knob's: by default ('kernel') a few cleanup passes (SROA, instcombine, CFG
simplification, full unrolling of short loops, dead code elimination), since kiln's own opts already upcast (vectorized)
and unrolled the kernel, and LLVM's -O2 pipeline spent about as long as the code generator (its loop passes, vectorizers
and repeated instcombines found little left to do); 'O2' is LLVM's default -O2 pipeline with both vectorizers. Kernels
over narrow types (half, bfloat16's i16, i8 in memory: the renderer writes NARROW_TYPES_MARK) take -O2 even under
'kernel': the renderer converts their lanes one by one and LLVM's SLP vectorizer packs those conversions (the float16
matmul ran at half speed without it). Machine code is generated at -O2 either way (instruction selection, the greedy
register allocator, machine LICM), except for a kernel whose source carries QUICK_CODEGEN_MARK (the renderer marks
kernels of little work): under 'kernel' it takes LLVM's -O0 code generator (fast instruction selection and register
allocation; the IR passes still run, so the IR is what `optimized_ir` shows for any kernel), which builds a small
kernel in about half the time; its code is slower by about a microsecond a launch at most, at the work the renderer
allows.

A relocatable object cannot be handed to the system's dynamic loader, and linking it into a shared object needs an
external linker (a subprocess), so `LLVMCompiler.load` links the object in process with LLVM's own runtime linker
(MCJIT through llvmlite: it applies the relocations and resolves libm symbols such as fmod from this process) and
returns the kernel's address; the execution engine stays alive with the returned `HostKernel`.

Compiles cannot overlap on threads: llvmlite holds one process-wide lock around every call into LLVM (its
`ffi._LLVMLock`), though it releases the GIL, so Python work on another thread runs meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import hashlib
import threading
from collections.abc import Sequence
from typing import Any

from kiln.codegen import KernelSignature
from kiln.renderers.c_style import ENTRY_NAME
from kiln.renderers.core_launcher import llvm_ir_launcher_source
from kiln.renderers.host_kernel import HostCompiler, HostKernel, kernel_parameters, objdump_disassembly
from kiln.renderers.toolchain import (
    LLVM_PIPELINE,
    ToolchainCompiler,
    ToolchainNotFoundError,
    llvm_options,
    llvmlite_binding,
)

KERNEL_PIPELINE_PASSES = (
    "sroa",
    "instruction_combine",
    "simplify_cfg",
    "loop_unroll",
    "dead_code_elimination",
)
"""The 'kernel' pipeline (LLVM_PIPELINE): llvmlite's pass names, run once each in this order. SROA keeps a register
tile's accumulator (an alloca the renderer loads and stores whole) in registers: without it the 1024 matmul ran at a
third of its speed; instcombine folds the index arithmetic and casts the renderer spells out, simplifycfg removes the
loops' constant emptiness checks and merges blocks, loop-unroll fully unrolls short loops kiln left without its
unroll-disable hint (as -O2 does), and DCE drops what is left unused. No GVN: llvmlite offers only NewGVN, and with it
the input gradient of the nn conformance case conv2d_basic came out wrong (right under -O2 and without NewGVN; not
traced further); kiln's uops are already free of common subexpressions."""

NARROW_TYPES_MARK = "; kiln pipeline: O2 for narrow types"
"""A header line of a kernel source that, under the 'kernel' pipeline, still asks for -O2 (`pipeline_for`). The
renderer writes it (`LLVMRenderer.render`) for a kernel that computes in half or bfloat, or loads or stores i8 or i16
in memory (int8 / uint8 / bool bytes, bfloat16's bits); i8 or i16 only in registers (a maximum of bools cast to
uint8, an accumulator of them) does not ask: resnet18.onnx's max pooling with a `<144 x i8>` maximum took 400 ms of
-O2 against 130 ms, a (8, 32) max-and-mean 17 against 8 ms, and both ran as fast (min of 300 interleaved calls)."""

QUICK_CODEGEN_MARK = "; kiln codegen: quick"
"""The second line of a kernel source that asks, under the 'kernel' pipeline, for LLVM's quick (-O0) code
generator (`is_quick`). The renderer writes it (LLVMRenderer.quick_codegen_work); being part of the
source, it is part of the compile-cache key."""


class LLVMCompiler(HostCompiler, ToolchainCompiler):
    """LLVM IR -> a relocatable object for the host CPU, with llvmlite in this process (LLVM_PIPELINE's passes).

    `load` links the object in process (MCJIT) and returns the kernel. llvmlite is not thread-safe, so compiles,
    loads and the disposal of dropped kernels' engines are serialized by one process-wide lock.
    """

    optimization_level = 2
    quick_optimization_level = 0
    """The code generator's level for a source marked QUICK_CODEGEN_MARK (under the 'kernel' pipeline)."""
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._llvm: Any = None
        self._target_machine: Any = None
        self._quick_target_machine: Any = None
        self._identity: str | None = None
        self._host_cpu: tuple[str, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled compiler carries (to a BEAM build worker): its identity and host CPU, not llvmlite's
        module or target machine (remade on first use)."""
        return {**self.__dict__, "_llvm": None, "_target_machine": None, "_quick_target_machine": None}

    @property
    def llvm(self) -> Any:
        """`llvmlite.binding`, initialized (ToolchainNotFoundError when llvmlite is missing)."""
        if self._llvm is None:
            self._llvm = llvmlite_binding()
        return self._llvm

    @property
    def target_machine(self) -> Any:
        """llvmlite's TargetMachine for the host CPU and its features (the compiler's own)."""
        if self._target_machine is None:
            self._target_machine = self._new_target_machine()
        return self._target_machine

    @property
    def host_cpu(self) -> tuple[str, str]:
        """The host CPU's name and its feature string, as LLVM reports them (asked once: reading the features costs
        about as much as building a target machine)."""
        if self._host_cpu is None:
            llvm = self.llvm
            self._host_cpu = (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
        return self._host_cpu

    def target_machine_for(self, source: str) -> Any:
        """The target machine that generates `source`'s machine code: a quick one (`quick_optimization_level`) when
        `is_quick(source)`, else `target_machine`."""
        if not self.is_quick(source):
            return self.target_machine
        if self._quick_target_machine is None:
            self._quick_target_machine = self._new_target_machine(self.quick_optimization_level)
        return self._quick_target_machine

    def _new_target_machine(self, level: int | None = None) -> Any:
        llvm = self.llvm
        target = llvm.Target.from_triple(llvm.get_process_triple())
        cpu, features = self.host_cpu
        # The large code model: every address the kernel takes (its constant pool, libm functions) is a 64-bit
        # absolute relocation (R_X86_64_64). With the default small model, the code reaches its constants through
        # 32-bit PC-relative offsets, and MCJIT places each section on its own, so in a process that has loaded
        # many kernels the constants could land over 2 GiB from the code: RuntimeDyldELF then aborted the process
        # (assertion `isInt<32>(RealOffset)`), the lost pytest worker of the README's known issue, seen in a core
        # dump. The constants are hoisted out of the loops, so the 64-bit address loads cost nothing measurable.
        return target.create_target_machine(
            cpu=cpu,
            features=features,
            opt=self.optimization_level if level is None else level,
            reloc="static",
            codemodel="large",
        )

    def toolchain_identity(self) -> str:
        """llvmlite and LLVM versions, the target triple and the host CPU with its features (computed once: it is
        part of every compile-cache key)."""
        if self._identity is None:
            self._identity = self._host_identity()
        return self._identity

    def _host_identity(self) -> str:
        import llvmlite

        llvm = self.llvm
        version = ".".join(str(part) for part in llvm.llvm_version_info)
        name, features = self.host_cpu
        cpu = f"{name}-{hashlib.sha256(features.encode()).hexdigest()[:16]}"
        return f"llvmlite {llvmlite.__version__} LLVM {version} {llvm.get_process_triple()} cpu={cpu}"

    @property
    def pipeline(self) -> str:
        """The IR optimization pipeline compiles run: the LLVM_PIPELINE knob ('kernel' or 'O2'), read per compile."""
        return LLVM_PIPELINE.value()

    def pipeline_for(self, source: str) -> str:
        """The pipeline `source` goes through: 'O2' under the knob's 'O2', and under 'kernel' for a source whose
        header (the comment lines above its first `define`) carries NARROW_TYPES_MARK (their lane-by-lane
        conversions need LLVM's SLP vectorizer); else 'kernel'."""
        pipeline = self.pipeline
        if pipeline == "O2":
            return pipeline
        header_end = source.find("\ndefine ")
        return "O2" if source.find(NARROW_TYPES_MARK, 0, max(header_end, 0)) >= 0 else pipeline

    def is_quick(self, source: str) -> bool:
        """Whether `source`'s machine code comes from the quick (-O0) code generator: its second line is
        QUICK_CODEGEN_MARK and the pipeline is 'kernel'."""
        first_line_end = source.find("\n")
        marked = first_line_end >= 0 and source.startswith(QUICK_CODEGEN_MARK, first_line_end + 1)
        return marked and self.pipeline == "kernel"

    @property
    def flags(self) -> tuple[str, ...]:
        """The IR pipeline (its passes), the code generator's level, code model and the process's LLVM options
        (`LLVM_OPTIONS`; every other option is LLVM's default): five entries, then the options."""
        level = f"-O{self.optimization_level}"
        if self.pipeline == "O2":  # the entries binaries were cached under before the 'kernel' pipeline existed
            head: tuple[str, ...] = (level, "loop-vectorize", "slp-vectorize")
        else:
            # the choice per source is part of the key through the rule: its passes and the narrow types
            head = (
                f"pipeline={','.join(KERNEL_PIPELINE_PASSES)}",
                f"codegen={level}, -O{self.quick_optimization_level} under {QUICK_CODEGEN_MARK!r}",
                f"{level} with vectorizers under {NARROW_TYPES_MARK!r}",
            )
        return (*head, "code-model=large", "reloc=static", *llvm_options(self.llvm))

    @flags.setter
    def flags(self, value: tuple[str, ...]) -> None:
        raise AttributeError("an LLVMCompiler's flags follow its optimization_level")

    def compile(self, source: str) -> bytes:
        """The ELF object of LLVM IR `source`; RuntimeError naming LLVM's message when the IR is invalid."""
        with self._lock:
            _dispose_retired_engines()
            # every LLVM object of the compile is a local of _compile_locked, so it is freed there, under the lock
            return self._compile_locked(source)

    def optimized_ir(self, source: str) -> str:
        """LLVM IR `source` after this compiler's optimization pipeline (what `compile` turns into machine code), as
        text: for reading what LLVM made of a kernel. RuntimeError naming LLVM's message when the IR is invalid."""
        with self._lock:
            _dispose_retired_engines()
            return str(self._optimized_module(source))

    def _compile_locked(self, source: str) -> bytes:
        module = self._optimized_module(source)
        return bytes(self.target_machine_for(source).emit_object(module))

    def _optimized_module(self, source: str) -> Any:
        # the caller holds the lock; the module is freed when the caller drops it (under the lock)
        llvm = self.llvm
        rejected = None
        try:
            module = llvm.parse_assembly(source)
            module.verify()
        except RuntimeError as error:
            # raised below, without the traceback: its frames hold the module, which must be freed here, under
            # the lock, not whenever the exception is dropped
            rejected = str(error)
        if rejected is not None:
            module = None
            raise RuntimeError(f"LLVM rejected the kernel: {rejected}\n--- source ---\n{source}")
        machine = self.target_machine
        module.triple = machine.triple
        module.data_layout = str(machine.target_data)
        options = llvm.create_pipeline_tuning_options(speed_level=self.optimization_level)
        if self.pipeline_for(source) == "O2":
            options.loop_vectorization = True
            options.slp_vectorization = True
            builder = llvm.create_pass_builder(machine, options)
            builder.getModulePassManager().run(module, builder)
            return module
        builder = llvm.create_pass_builder(machine, options)  # the analyses the passes ask for, for this target
        passes = llvm.create_new_module_pass_manager()
        for name in KERNEL_PIPELINE_PASSES:
            getattr(passes, f"add_{name}_pass")()
        passes.run(module, builder)
        return module

    def load(self, binary: bytes, signature: KernelSignature) -> HostKernel:
        """Link object `binary` into this process (MCJIT) and return its kernel."""
        llvm = self.llvm
        with self._lock:
            _dispose_retired_engines()
            _load_runtime_library(llvm)
            engine = self._linking_engine()
            engine.add_object_file(llvm.ObjectFileRef.from_data(binary))
            engine.finalize_object()
            address = engine.get_function_address(ENTRY_NAME)
            owner = _EngineOwner(engine)
            del engine
        return HostKernel(address, kernel_parameters(signature), (owner, binary))

    def load_functions(self, binary: bytes, names: Sequence[str]) -> tuple[dict[str, int], object]:
        """Link object `binary` into this process (MCJIT): the addresses of its functions `names`, and the owner of
        the execution engine (the code lives while it does)."""
        llvm = self.llvm
        with self._lock:
            _dispose_retired_engines()
            engine = self._linking_engine()
            engine.add_object_file(llvm.ObjectFileRef.from_data(binary))
            engine.finalize_object()
            addresses = {name: engine.get_function_address(name) for name in names}
            owner = _EngineOwner(engine)
            del engine
        return addresses, (owner, binary)

    def core_launcher_source(self) -> str | None:
        """The core launcher in LLVM IR for the host (kiln.renderers.core_launcher)."""
        return llvm_ir_launcher_source()

    def _linking_engine(self) -> Any:
        """A new MCJIT engine that holds no IR module, only there to link objects (the caller holds the lock).

        MCJIT is created with a module, and `finalize_object` generates machine code for every module it holds: an
        empty module went through the whole code generator each load (about 0.7 ms, more than linking the kernel).
        So the module is taken back out before any object is added. No code is generated here, so the engine's
        target machine (the engine owns it: each engine gets a new one) is a plain one for the host triple: the
        host CPU's name and features only cost time (building that machine takes several times longer).
        """
        llvm = self.llvm
        target = llvm.Target.from_triple(llvm.get_process_triple())
        machine = target.create_target_machine(reloc="static", codemodel="large")
        placeholder = llvm.parse_assembly("")
        engine = llvm.create_mcjit_compiler(placeholder, machine)
        engine.remove_module(placeholder)
        del placeholder  # no longer owned by the engine: freed here, under the lock
        return engine

    def disassemble(self, binary: bytes) -> str:
        """objdump's disassembly of the object (llvmlite has no disassembler; NotImplementedError without objdump)."""
        return objdump_disassembly(binary)


_retired_engines: list[Any] = []
"""Execution engines whose kernels were dropped, waiting to be disposed under `LLVMCompiler._lock`.

llvmlite parses every module into LLVM's one global context, which is not thread-safe, and disposing an engine frees
the module it owns in that context. A kernel can be dropped on any thread: the CPU queue's worker releases a launch
command after running it, and the garbage collector runs on whichever thread allocates. Disposing the engine right
there could race a compile on the main thread; so it is only queued here, and the next compile or load (holding the
lock) disposes it. Disposing unmaps the kernel's code, and the next load may map another kernel there: whatever can
still call the code must hold its `HostKernel` (the CPU device's launch commands do, through `NativeKernel.owner`).
"""


def _dispose_retired_engines() -> None:
    """Disposes the queued engines (the caller holds `LLVMCompiler._lock`)."""
    while _retired_engines:
        _retired_engines.pop()  # the last reference: llvmlite disposes the engine here


class _EngineOwner:
    """Keeps an MCJIT execution engine alive with its kernel; when dropped, queues the engine for disposal."""

    __slots__ = ("engine",)

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def __del__(self) -> None:
        retired = _retired_engines
        if retired is not None:  # None only during interpreter shutdown
            retired.append(self.engine)  # list.append is atomic: no lock is taken here (this may run on any thread)


@functools.cache
def _load_runtime_library(llvm: Any) -> None:
    # float16 conversions on CPUs without F16C / AVX512-FP16 call __extendhfsf2, __truncdfhf2 ... (libgcc)
    library = ctypes.util.find_library("gcc_s")
    if library is not None:
        with contextlib.suppress(RuntimeError):
            llvm.load_library_permanently(library)


@functools.cache
def host_has_vector_ldexp() -> bool:
    """Whether the host CPU scales floats by powers of two in one vector instruction (AVX-512F's VSCALEFPS, which
    LLVM selects for `llvm.ldexp`); without it LLVM calls libm's ldexpf lane by lane. False without llvmlite."""
    try:
        features = llvmlite_binding().get_host_cpu_features()
    except ToolchainNotFoundError:
        return False
    return bool(features.get("avx512f"))


@functools.cache
def host_register_tile_lanes() -> int:
    """float32 accumulator lanes a register tile may keep on the host CPU: half its vector register file (256 with
    AVX-512's 32 x 16 lanes, else 64: AVX2's 16 x 8); 64 when llvmlite is missing (nothing compiles then anyway)."""
    try:
        features = llvmlite_binding().get_host_cpu_features()
    except ToolchainNotFoundError:
        return 64
    return 256 if features.get("avx512f") else 64
