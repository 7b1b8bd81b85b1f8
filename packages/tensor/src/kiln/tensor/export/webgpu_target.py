"""`target="webgpu"`: the plan as NAME.js (an ES module with the WGSL kernels), NAME.safetensors and index.html.

The function must have been captured on the WEBGPU device: its kernels are the WGSL kiln ran there (validated by
wgpu when they were built), so the page runs kiln's very kernels. The module keeps one GPUBuffer per block,
binds each kernel's arguments once at `load` (WebGPU binds a view at a multiple of 256 bytes, checked here), and
`run` writes the inputs and the variables' values, encodes every dispatch and copy in one command buffer and reads
the outputs back. WebGPU stores bool and the 32-bit scalars only (the WEBGPU device's table): any other dtype, in
any buffer of the plan, is refused here naming the tensor; so is a buffer over the default binding limit.
"""

from __future__ import annotations

import json
from pathlib import Path

from kiln.codegen import Program
from kiln.renderers import dtypes_for
from kiln.tensor.export.formats import header_lines, names_of, safetensors_bytes
from kiln.tensor.export.plan import Endpoint, ExportPlan, PlannedCopy, PlannedLaunch, Role
from kiln.tensor.export.size_expression import numel_expression, size_expression
from kiln.uops import DType

__all__ = ["WEBGPU_MAX_BINDING_BYTES", "WEBGPU_MAX_WORKGROUPS", "write_webgpu"]

WEBGPU_MAX_BINDING_BYTES = 134217728
"""WebGPU's default `maxStorageBufferBindingSize` (128 MiB): the largest buffer every adapter lets a kernel bind."""
WEBGPU_MAX_WORKGROUPS = 65535
"""WebGPU's default `maxComputeWorkgroupsPerDimension`."""
_OFFSET_ALIGNMENT = 256  # the default minStorageBufferOffsetAlignment


def _describe(plan: ExportPlan, index: int) -> str:
    buffer = plan.buffers[index]
    if buffer.role is Role.WEIGHT:
        return f"weight {buffer.name!r}"
    if buffer.role is Role.INPUT:
        return f"input {buffer.name!r}"
    for endpoint in plan.outputs:
        if endpoint.location.buffer == index:
            return f"output {endpoint.name!r}"
    writers = [
        step.program.name
        for step in plan.steps
        if isinstance(step, PlannedLaunch)
        and any(argument.buffer == index for slot, argument in step.arguments.items() if slot in step.program.outs)
    ]
    return f"intermediate {buffer.name!r} (written by kernel {writers[0] if writers else '?'})"


def check_webgpu(plan: ExportPlan) -> None:
    """Refuses what WebGPU cannot hold: a dtype it does not store (TypeError), a buffer over the binding limit or a
    view at an unaligned offset (ValueError), each naming the tensor."""
    stored: frozenset[DType] = frozenset(dtypes_for("WEBGPU") or ())
    for buffer in plan.buffers:
        if buffer.dtype not in stored:
            raise TypeError(
                f"export: target 'webgpu' cannot hold {_describe(plan, buffer.index)} of dtype {buffer.dtype!r}: "
                f"WebGPU stores only {sorted(dtype.name for dtype in stored)}"
            )
        if buffer.nbytes > WEBGPU_MAX_BINDING_BYTES:
            raise ValueError(
                f"export: {_describe(plan, buffer.index)} takes {buffer.nbytes} bytes, over WebGPU's default "
                f"maxStorageBufferBindingSize of {WEBGPU_MAX_BINDING_BYTES} bytes a kernel may bind"
            )
    for endpoint in (*plan.inputs, *plan.outputs):
        if endpoint.dtype not in stored:
            raise TypeError(f"export: target 'webgpu' cannot take {endpoint.name} of dtype {endpoint.dtype!r}")
    for step in plan.steps:
        arguments = step.arguments.values() if isinstance(step, PlannedLaunch) else (step.destination, step.source)
        for argument in arguments:
            if argument.offset % _OFFSET_ALIGNMENT:
                raise ValueError(
                    f"export: a step reads {_describe(plan, argument.buffer)} at byte offset {argument.offset}; WebGPU "
                    f"binds storage at multiples of {_OFFSET_ALIGNMENT} bytes"
                )


def _wgsl_program(launch: PlannedLaunch) -> Program:
    """The launch's program when kiln ran it on WEBGPU (its source is the WGSL); ValueError naming the kernel and
    its device otherwise: a schedule made for another device may keep dtypes WebGPU lacks (uint8 intermediates)."""
    program = launch.program
    if program.device.partition(":")[0] != "WEBGPU":
        raise ValueError(
            f"export: target 'webgpu' exports the kernels kiln ran on WEBGPU, and kernel {program.name} ran on "
            f"{program.device}: build the model and its inputs on WEBGPU (Device.DEFAULT = 'WEBGPU', or .to('WEBGPU'))"
        )
    return program


def _js_endpoint(endpoint: Endpoint) -> str:
    names = names_of(endpoint.dtype, endpoint.name)
    shape = ", ".join(
        json.dumps(size) if isinstance(size, int) else json.dumps(size_expression(size, "js"))
        for size in endpoint.shape
    )
    return (
        f'{{ name: "{endpoint.name}", buffer: {endpoint.location.buffer}, offset: {endpoint.location.offset}, '
        f'dtype: "{endpoint.dtype.name}", array: {names.typed_array}, shape: [{shape}], '
        f"variable: {json.dumps(endpoint.variable)}, "
        f"numel: (v) => {numel_expression(endpoint.shape, 'js')} }}"
    )


def _module(plan: ExportPlan) -> str:
    sources: dict[str, int] = {}
    steps: list[str] = []
    unpack = ", ".join(variable.name for variable in plan.variables)
    for step in plan.steps:
        if isinstance(step, PlannedCopy):
            steps.append(
                f"  {{ copy: [{step.destination.buffer}, {step.destination.offset}, {step.source.buffer}, "
                f"{step.source.offset}, {step.nbytes}] }},"
            )
            continue
        program = _wgsl_program(step)
        signature = program.signature
        kernel = sources.setdefault(program.source, len(sources))
        bindings = []
        for parameter in signature.buffers:
            argument = step.arguments[parameter.slot]
            bindings.append(f"[{argument.buffer}, {argument.offset}]")
        for size in signature.global_size:
            if isinstance(size, int) and size > WEBGPU_MAX_WORKGROUPS:
                raise ValueError(
                    f"export: kernel {program.name} dispatches {size} workgroups in one dimension, over WebGPU's "
                    f"{WEBGPU_MAX_WORKGROUPS}"
                )
        dispatch = ", ".join(size_expression(size, "js") for size in signature.global_size)
        variables = ", ".join(f'"{variable.name}"' for variable in signature.variables)
        steps.append(
            f'  {{ kernel: {kernel}, name: "{program.name}", bindings: [{", ".join(bindings)}], '
            f"variables: [{variables}], dispatch: ({{ {unpack} }}) => [{dispatch}] }},"
        )
    blocks = ",\n".join(
        f'  {{ name: "{buffer.name}", bytes: {buffer.nbytes}, '
        f"weight: {'true' if buffer.role is Role.WEIGHT else 'false'}, "
        f'dtype: "{names_of(buffer.dtype, buffer.name).safetensors}" }}'
        for buffer in plan.buffers
    )
    kernels = ",\n".join(json.dumps(source) for source in sources)
    variables = ",\n".join(f'  {{ name: "{v.name}", low: {v.low}, high: {v.high} }}' for v in plan.variables)
    header = "".join(f"// {line}\n" for line in header_lines(plan, "webgpu"))
    inputs = ",\n".join(f"  {_js_endpoint(endpoint)}" for endpoint in plan.inputs)
    outputs = ",\n".join(f"  {_js_endpoint(endpoint)}" for endpoint in plan.outputs)
    return (
        header
        + "// Usage: import { load, run } from './"
        + plan.name
        + ".js'; await load('"
        + plan.name
        + ".safetensors'); const outputs = await run([input0, ...]"
        + (", { " + ", ".join(f"{v.name}: N" for v in plan.variables) + " }" if plan.variables else "")
        + ");\n\n"
        + f"export const name = {json.dumps(plan.name)};\n"
        + f"const BLOCKS = [\n{blocks}\n];\n"
        + f"const KERNELS = [\n{kernels}\n];\n"
        + f"const STEPS = [\n{chr(10).join(steps)}\n];\n"
        + f"export const variables = [\n{variables}\n];\n"
        + f"export const inputs = [\n{inputs.replace('(v) => ', f'({{ {unpack} }}) => ')}\n];\n"
        + f"export const outputs = [\n{outputs.replace('(v) => ', f'({{ {unpack} }}) => ')}\n];\n"
        + _RUNTIME
    )


_RUNTIME = r"""
const pad4 = (bytes) => Math.ceil(Math.max(bytes, 4) / 4) * 4;
let state = null;

function tensorInfo(header, name) {
  const info = header[name];
  if (!info) throw new Error(`weights file has no tensor "${name}"`);
  return info;
}

// Requests a WebGPU device, reads the weights (safetensors at `weightsUrl`) into GPU buffers and builds the kernels.
export async function load(weightsUrl) {
  if (!navigator.gpu) throw new Error("this browser has no WebGPU (navigator.gpu is undefined)");
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error("no WebGPU adapter");
  const device = await adapter.requestDevice({
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
    },
  });
  const response = await fetch(weightsUrl);
  if (!response.ok) throw new Error(`fetching ${weightsUrl}: HTTP ${response.status}`);
  const file = new Uint8Array(await response.arrayBuffer());
  const headerLength = Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + headerLength)));
  const dataStart = 8 + headerLength;
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const buffers = BLOCKS.map((block) => device.createBuffer({ size: pad4(block.bytes), usage }));
  BLOCKS.forEach((block, index) => {
    if (!block.weight) return;
    const info = tensorInfo(header, block.name);
    const [start, end] = info.data_offsets;
    if (info.dtype !== block.dtype || end - start !== block.bytes) {
      throw new Error(`weight "${block.name}": expected ${block.dtype} of ${block.bytes} bytes, the file has ` +
        `${info.dtype} of ${end - start}`);
    }
    const bytes = new Uint8Array(pad4(block.bytes));
    bytes.set(file.subarray(dataStart + start, dataStart + end));
    device.queue.writeBuffer(buffers[index], 0, bytes);
  });
  device.pushErrorScope("validation");
  // explicit layouts, as the WEBGPU device binds them: an "auto" layout drops the bindings a shader never reads
  const pipelines = new Map();
  const steps = STEPS.map((step) => {
    if (step.copy) return step;
    const storage = (binding, type) => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer: { type } });
    const layoutEntries = step.bindings.map((_, binding) => storage(binding, "storage"));
    if (step.variables.length) layoutEntries.push(storage(layoutEntries.length, "read-only-storage"));
    const layout = device.createBindGroupLayout({ entries: layoutEntries });
    const key = `${step.kernel}/${layoutEntries.length}`;
    if (!pipelines.has(key)) {
      pipelines.set(key, device.createComputePipeline({
        layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
        compute: { module: device.createShaderModule({ code: KERNELS[step.kernel] }), entryPoint: "kiln_kernel" },
      }));
    }
    const pipeline = pipelines.get(key);
    const entries = step.bindings.map(([block, offset], binding) => ({
      binding, resource: { buffer: buffers[block], offset, size: pad4(BLOCKS[block].bytes) - offset },
    }));
    let values = null;
    if (step.variables.length) {
      const valuesUsage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
      values = device.createBuffer({ size: 4 * step.variables.length, usage: valuesUsage });
      entries.push({ binding: entries.length, resource: { buffer: values } });
    }
    const group = device.createBindGroup({ layout, entries });
    return { ...step, pipeline, group, values };
  });
  const error = await device.popErrorScope();
  if (error) throw new Error(`WebGPU rejected the kernels: ${error.message}`);
  state = { device, buffers, steps };
}

// Runs the model on `inputArrays` (typed arrays in the order of `inputs`), with the variables' values in `values`;
// resolves to the outputs as typed arrays (in the order of `outputs`).
export async function run(inputArrays, values = {}) {
  if (!state) throw new Error("call load() before run()");
  const { device, buffers, steps } = state;
  for (const variable of variables) {
    const value = values[variable.name];
    if (!Number.isInteger(value) || value < variable.low || value > variable.high) {
      throw new RangeError(`variable ${variable.name} = ${value} is outside [${variable.low}, ${variable.high}]`);
    }
  }
  const arrays = inputs.filter((input) => !input.variable);
  if (inputArrays.length !== arrays.length) {
    throw new Error(`expected ${arrays.length} inputs, got ${inputArrays.length}`);
  }
  let next = 0;
  inputs.forEach((input) => {
    // a Variable argument reaches the kernels as a 0-dim int32 tensor holding its value
    const data = input.variable ? new Int32Array([values[input.variable]]) : inputArrays[next++];
    const numel = input.numel(values);
    if (!(data instanceof input.array) || data.length !== numel) {
      throw new TypeError(`${input.name}: expected a ${input.array.name} of ${numel} elements`);
    }
    const bytes = new Uint8Array(pad4(data.byteLength));
    bytes.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    device.queue.writeBuffer(buffers[input.buffer], input.offset, bytes);
  });
  const encoder = device.createCommandEncoder();
  for (const step of steps) {
    if (step.copy) {
      const [destination, destinationOffset, source, sourceOffset, bytes] = step.copy;
      encoder.copyBufferToBuffer(buffers[source], sourceOffset, buffers[destination], destinationOffset, pad4(bytes));
      continue;
    }
    if (step.values) {
      device.queue.writeBuffer(step.values, 0, new Int32Array(step.variables.map((name) => values[name])));
    }
    const [x, y, z] = step.dispatch(values);
    if (x * y * z === 0) continue;
    const pass = encoder.beginComputePass();
    pass.setPipeline(step.pipeline);
    pass.setBindGroup(0, step.group);
    pass.dispatchWorkgroups(x, y, z);
    pass.end();
  }
  const staging = outputs.map((output) => {
    const bytes = pad4(output.numel(values) * output.array.BYTES_PER_ELEMENT);
    const buffer = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    encoder.copyBufferToBuffer(buffers[output.buffer], output.offset, buffer, 0, bytes);
    return buffer;
  });
  device.queue.submit([encoder.finish()]);
  return Promise.all(staging.map(async (buffer, index) => {
    await buffer.mapAsync(GPUMapMode.READ);
    const output = outputs[index];
    const copy = new output.array(output.numel(values));
    copy.set(new output.array(buffer.getMappedRange(), 0, copy.length));
    buffer.destroy();
    return copy;
  }));
}
"""


def _page(plan: ExportPlan) -> str:
    header = "".join(f"  {line}\n" for line in header_lines(plan, "webgpu"))
    values = ", ".join(f"{v.name}: {v.high}" for v in plan.variables)
    return f"""<!doctype html>
<!--
{header}-->
<html lang="en">
<meta charset="utf-8">
<link rel="icon" href="data:,">
<title>{plan.name} (kiln export, WebGPU)</title>
<body>
<h1>{plan.name}</h1>
<p>The model runs in this page on WebGPU: its inputs here are a fixed pattern (sin of the element index).</p>
<p id="status">loading...</p>
<pre id="output"></pre>
<script type="module">
import * as model from "./{plan.name}.js";
const status = document.getElementById("status");
try {{
  await model.load("./{plan.name}.safetensors");
  const values = {{ {values} }};
  const arrays = model.inputs.filter((input) => !input.variable).map((input) => {{
    const data = new input.array(input.numel(values));
    for (let i = 0; i < data.length; i++) data[i] = input.array === Float32Array ? Math.sin(i) : i % 7;
    return data;
  }});
  const started = performance.now();
  const results = await model.run(arrays, values);
  const elapsed = performance.now() - started;
  document.getElementById("output").textContent = results.map((data, index) =>
    `${{model.outputs[index].name}} (${{data.length}} values): ` +
    `${{Array.from(data.slice(0, 16)).join(", ")}}`).join("\\n");
  status.textContent = `done in ${{elapsed.toFixed(1)}} ms`;
}} catch (error) {{
  status.textContent = `error: ${{error.message}}`;
  throw error;
}}
</script>
</body>
</html>
"""


def write_webgpu(plan: ExportPlan, out: Path) -> list[Path]:
    """Checks `plan` against WebGPU's limits, then writes NAME.js, NAME.safetensors and index.html into `out`."""
    check_webgpu(plan)
    module = _module(plan)
    weights = safetensors_bytes(plan.weights(), {"model": plan.name, "format": "kiln.tensor.export"})
    written = []
    for file_name, content in ((f"{plan.name}.js", module), ("index.html", _page(plan))):
        path = out / file_name
        path.write_text(content)
        written.append(path)
    path = out / f"{plan.name}.safetensors"
    path.write_bytes(weights)
    written.append(path)
    return written
