"""`WebGPUProgramRunner`: a program's WGSL built into a compute pipeline on the WEBGPU device and dispatched."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from kiln.codegen import Program
from kiln.renderers import ENTRY_NAME
from kiln.renderers.webgpu_library import load_wgpu
from kiln.runtime.buffer import Buffer
from kiln.runtime.program_runner import Launch, ProgramRunner
from kiln.runtime.webgpu.webgpu_allocator import WebGPUMemory, align_up
from kiln.runtime.webgpu.webgpu_context import WebGPUContext

__all__ = ["WebGPUProgramRunner"]


class WebGPUProgramRunner(ProgramRunner):
    """Builds the program's WGSL (its "binary") into a compute pipeline and dispatches `kiln_kernel`.

    The WGSL renderer's binding layout: binding k of group 0 is the k-th used buffer slot (read-write storage), then
    one read-only storage array of the variables' int32 values (sorted by name) when the program has variables.
    WebGPU counts workgroups, as kiln does: `dispatchWorkgroups(*global_size)`; the workgroup size is in the shader.
    A view reaches the kernel as a binding at its offset, which WebGPU requires to be a multiple of the adapter's
    `min-storage-buffer-offset-alignment`.
    """

    device: WebGPUContext

    def __init__(self, device: WebGPUContext, program: Program) -> None:
        super().__init__(device, program)
        binary = self._binary("a WEBGPU program must come from the device's renderer, whose compiler validates it")
        wgpu = load_wgpu()
        gpu = device.target.device
        self._gpu = gpu
        self._slot_alignments = tuple((slot, 1) for slot in self.slots)
        self.offset_alignment = int(device.target.limits.get("min-storage-buffer-offset-alignment", 256))
        storage = {"type": wgpu.BufferBindingType.storage}
        read_only = {"type": wgpu.BufferBindingType.read_only_storage}
        entries = [
            {"binding": binding, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": storage}
            for binding in range(len(self.slots))
        ]
        self.variables_buffer: Any = None
        if self.variables:
            entries.append({"binding": len(self.slots), "visibility": wgpu.ShaderStage.COMPUTE, "buffer": read_only})
            usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
            self.variables_buffer = gpu.create_buffer(size=4 * len(self.variables), usage=usage)
        self.bind_group_layout = gpu.create_bind_group_layout(entries=entries)
        layout = gpu.create_pipeline_layout(bind_group_layouts=[self.bind_group_layout])
        module = gpu.create_shader_module(label=program.name, code=binary.decode())
        self.pipeline = gpu.create_compute_pipeline(
            layout=layout, compute={"module": module, "entry_point": ENTRY_NAME}
        )
        self._launch_lock = threading.Lock()  # the variables buffer is written and submitted as one step

    def buffer_address(self, buffer: Buffer) -> int:
        """The byte offset the kernel's binding of `buffer` starts at (checked against the binding alignment)."""
        memory = buffer.opaque
        assert isinstance(memory, WebGPUMemory)
        if memory.offset % self.offset_alignment:
            raise ValueError(
                f"{self.name}: a kernel cannot take a view at byte offset {memory.offset} on {self.device.name}: "
                f"WebGPU binds storage buffers at multiples of {self.offset_alignment} bytes "
                "(min-storage-buffer-offset-alignment); copy the view into its own buffer first"
            )
        return memory.offset

    def _binding(self, binding: int, buffer: Buffer) -> dict[str, Any]:
        memory = buffer.opaque
        assert isinstance(memory, WebGPUMemory)
        available = memory.buffer.size - memory.offset
        size = min(max(align_up(memory.size), 4), available)
        return {"binding": binding, "resource": {"buffer": memory.buffer, "offset": memory.offset, "size": size}}

    def _launch(self, launch: Launch) -> float | None:
        device, global_size = self.device, launch.global_size
        if 0 in global_size:
            return 0.0 if launch.wait else None
        limit = int(device.target.limits.get("max-compute-workgroups-per-dimension", 65535))
        if max(global_size) > limit:
            raise ValueError(f"{self.name}: {global_size} workgroups exceed WebGPU's {limit} per dimension")
        entries = [self._binding(binding, launch.buffers[slot]) for binding, slot in enumerate(self.slots)]
        if self.variables_buffer is not None:
            entries.append({"binding": len(self.slots), "resource": {"buffer": self.variables_buffer}})
        bind_group = self._gpu.create_bind_group(layout=self.bind_group_layout, entries=entries)
        encoder = self._gpu.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, bind_group)
        compute.dispatch_workgroups(*global_size)
        compute.end()
        with self._launch_lock:
            if self.variables_buffer is not None:  # ordered before this submission, after the earlier ones
                self._gpu.queue.write_buffer(self.variables_buffer, 0, np.asarray(launch.values, dtype=np.int32))
            value = device.timeline.submit([encoder.finish()])
        if not launch.wait:
            return None
        device.timeline.wait(value)
        return device.timeline.seconds(value)
