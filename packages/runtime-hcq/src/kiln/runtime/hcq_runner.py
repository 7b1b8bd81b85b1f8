"""`HCQProgramRunner`: launching a program on a queue-driven device (`HCQCompiled`) through its argument block."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kiln.codegen import Program
from kiln.runtime.buffer import Buffer
from kiln.runtime.command_queue import ExecCommand
from kiln.runtime.hcq import HCQCompiled
from kiln.runtime.kernel_args import HCQArgsState
from kiln.runtime.knobs import profiling_enabled
from kiln.runtime.program_runner import Launch, ProgramRunner
from kiln.uops import knobs

_PROFILE = knobs.get_knob(
    "PROFILE"
)  # read on every direct launch: the Knob itself (`profiling_enabled` without a call)

__all__ = ["HCQProgramRunner"]


class HCQProgramRunner(ProgramRunner):
    """Launches by filling an argument block (`arg_layout`) and submitting one exec command on the device's timeline.

    `kernel_for(buffers)` is what the exec command runs: for software engines a callable
    `(args, global_size, local_size) -> None` (see `SoftwareKernel`). Buffer addresses are the `address` of each
    buffer's allocator handle (host memory: the host pointer).
    """

    device: HCQCompiled
    inline_work_limit = 0
    """Launches of at most this much estimated work (flops plus global memory bytes, static shapes only) may run in
    the caller's thread when the device is idle (see `HCQCompiled.execute`); 0 never does."""

    def __init__(self, device: HCQCompiled, program: Program, kernel: object) -> None:
        super().__init__(device, program)
        self.kernel = kernel
        self.inline = False
        # a static-shape program's launch sizes are checked once, here: its launches skip the queue's checks
        self._static_launch = self._static_dims is not None and all(
            size >= 1 for dims in self._static_dims for size in dims
        )
        if self._static_launch and self.inline_work_limit > 0:
            estimates = program.estimates
            flops, memory = estimates.flops, estimates.global_memory_bytes
            if isinstance(flops, int) and isinstance(memory, int):
                self.inline = flops + memory <= self.inline_work_limit
        # a launch that may run in the caller's thread without a command object (`HCQCompiled.launch_inline`)
        self._inline_call = self.inline and not self.variables
        # the argument blocks of such launches by buffer addresses: the allocator hands the same memory out again,
        # so launches repeat addresses; a block run inline is only read and never leaves the call, so one serves
        # every launch on the same addresses (a queued launch gets a fresh block, see `_launch`)
        self._inline_blocks: dict[tuple[int, ...], HCQArgsState] = {}
        # whether `kernel_for` is this class's (the loaded kernel for any buffers): then a launch reads `kernel`
        self._kernel_unbound = type(self).kernel_for is HCQProgramRunner.kernel_for
        # the entry point `launch_direct` calls, found on its first call (subclasses set `kernel` after this), and
        # the mask of the low address bits the slots need clear (the largest alignment any slot needs, minus one)
        self._direct_entry: Callable[..., None] | None = None
        self._direct_known = False
        self._alignment_mask = max((alignment for _, alignment in self._slot_alignments), default=1) - 1

    def __call__(
        self, buffers: Sequence[Buffer], var_vals: Mapping[str, int] | None = None, wait: bool = False
    ) -> float | None:
        """`ProgramRunner.__call__`; a tiny kernel without variables on an idle queue runs here at once (the usual
        launch of a small op), with the same buffer checks and argument block and without the exec command."""
        if self._inline_call and not wait and not profiling_enabled():
            addresses = self.buffer_addresses(buffers)
            blocks = self._inline_blocks
            args = blocks.get(addresses)
            if args is None:
                if len(blocks) >= 64:
                    blocks.clear()
                args = blocks[addresses] = HCQArgsState.for_launch(self.arg_layout, addresses, ())
            dims = self._static_dims
            assert dims is not None  # an inline runner has static launch sizes
            kernel = self.kernel if self._kernel_unbound else self.kernel_for(buffers)
            if self.device.launch_inline(kernel, args, dims[0], dims[1], self.name):
                return None
            return self._launch(Launch(buffers, addresses, (), dims[0], dims[1], wait))
        return super().__call__(buffers, var_vals, wait)

    def launch_direct(self, buffers: Sequence[Buffer]) -> bool:
        """Runs the kernel at once in the calling thread on `buffers` (one per used slot, in slot order, allocated)
        when it is a one-core native kernel that may run inline, nothing is profiled, every buffer is aligned as the
        kernel reads it and the device is idle; returns False, having run nothing, otherwise (then call the runner).
        The caller vouches that the buffers fit the slots: buffers of the dtypes, sizes and device this runner
        accepted for them before (the eager lane's keys), so only their addresses are read."""
        entry = self._direct_entry
        if entry is None:
            if self._direct_known:
                return False
            entry = self.direct_call()
            if entry is None:
                return False
        if profiling_enabled():
            return False
        mask = self._alignment_mask
        addresses = []
        for buffer in buffers:
            address: int = buffer._opaque.address
            if address & mask:
                return False
            addresses.append(address)
        return self.device.launch_direct_many(((entry, tuple(addresses)),))

    def direct_launcher(self, slots: Sequence[int | Buffer]) -> Callable[[Buffer, Buffer], bool] | None:
        """`launch_direct` made once for a launch that repeats with two buffers changing: a function of
        (first, second) that runs the kernel on the buffers `slots` names (in slot order: 0 the first, 1 the second,
        a Buffer itself for a fixed one), or None when the kernel is not one a direct launch runs (`direct_call`).
        The function returns False, having run nothing, where `launch_direct` would (PROFILE, a misaligned buffer, a
        busy device). The caller vouches for the buffers as for `launch_direct` (the eager lane, per key)."""
        function = self.direct_call()
        if function is None:
            return None
        mask, launch_many = self._alignment_mask, self.device.launch_direct_many
        layout = tuple(slots)
        if layout == (0, 1) or layout == (1, 0):  # (the usual op: its output and one operand)
            swapped = layout == (1, 0)

            def launch_two(first: Buffer, second: Buffer) -> bool:
                one, two = first._opaque.address, second._opaque.address
                if (one | two) & mask or _PROFILE.value():
                    return False
                return launch_many(((function, (two, one) if swapped else (one, two)),))

            return launch_two

        def launch(first: Buffer, second: Buffer) -> bool:
            addresses = []
            for slot in layout:
                buffer = slot if isinstance(slot, Buffer) else first if slot == 0 else second
                address: int = buffer._opaque.address
                if address & mask:
                    return False
                addresses.append(address)
            return not profiling_enabled() and launch_many(((function, tuple(addresses)),))

        return launch

    def direct_call(self) -> Callable[..., None] | None:
        """What a direct launch calls with the buffer addresses (in slot order) alone: the entry point of a one-core
        native kernel (`NativeKernel.direct_entry`) of an inline launch without variables, else None. The caller
        runs it through `HCQCompiled.launch_direct` / `launch_direct_many` (the queue's order), on addresses aligned
        to `alignment_mask`."""
        if self._direct_known:
            return self._direct_entry
        entry = getattr(self.kernel, "direct_entry", None)
        direct = self._inline_call and self._kernel_unbound and self.arg_layout.pointers_first and callable(entry)
        self._direct_entry = entry if direct else None
        self._direct_known = True
        return self._direct_entry

    @property
    def alignment_mask(self) -> int:
        """The low address bits every buffer of a launch must have clear (the largest slot alignment, minus one)."""
        return self._alignment_mask

    @property
    def batchable(self) -> bool:
        """Whether launches can be built ahead as exec commands (`exec_command`) and submitted in a list with
        `HCQCompiled.launch_many`: fixed launch sizes (checked) and no variables."""
        return self._static_launch and not self.variables

    def exec_command(self, buffers: Sequence[Buffer], profiling: bool = False) -> ExecCommand:
        """The exec command of a launch on `buffers` (checked like a call: one per slot, allocated if needed), with
        a fresh argument block, for `HCQCompiled.launch_many`; only for a `batchable` runner. `profiling`: attach
        the PROFILE event's arguments."""
        if not self.batchable:
            raise RuntimeError(f"{self.name}: only a runner with fixed launch sizes and no variables builds commands")
        args = HCQArgsState.for_launch(self.arg_layout, self.buffer_addresses(buffers), ())
        dims = self._static_dims
        assert dims is not None  # a static launch has them
        global_size, local_size = dims
        profile = self.profile_args(()) if profiling else None
        return ExecCommand(self.kernel_for(buffers), args, global_size, local_size, self.name, profile)

    def kernel_for(self, buffers: Sequence[Buffer]) -> object:
        """The object the exec command runs for this launch (the loaded kernel; subclasses may bind the buffers)."""
        return self.kernel

    def buffer_address(self, buffer: Buffer) -> int:
        """The address of the buffer's memory, from its allocator handle."""
        address: int = (buffer.opaque if buffer._opaque is None else buffer._opaque).address
        return address

    def _launch(self, launch: Launch) -> float | None:
        # A fresh block per launch: queued launches keep their own arguments until they run.
        buffers, addresses, values, global_size, local_size, wait = launch
        args = HCQArgsState.for_launch(self.arg_layout, addresses, values)
        profiling = profiling_enabled()
        profile = self.profile_args(values) if profiling else None
        if self._static_launch:
            command = ExecCommand(self.kernel_for(buffers), args, global_size, local_size, self.name, profile)
            return self.device.launch(command, wait=wait, inline=self.inline, profiling=profiling)
        return self.device.execute(
            self.kernel_for(buffers), args, global_size, local_size, name=self.name, wait=wait, profile=profile
        )
