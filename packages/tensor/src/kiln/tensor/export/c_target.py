"""`target="c"`: the plan as NAME.h / NAME.c (C11, libc and libm only), NAME.safetensors, main.c and a Makefile.

The library keeps every block in one arena allocated by `NAME_init`, which also reads the weights (from the
safetensors file, or from the bytes embedded in NAME.c); `NAME_run` copies the inputs in, calls the kernels in the
captured order and copies the outputs out; `NAME_free` releases the arena. Single-threaded unless built with
`-DKILN_EXPORT_OPENMP -fopenmp` (see c_kernels).
"""

from __future__ import annotations

from pathlib import Path

from kiln.tensor.export.c_kernels import CKernel, ExportCRenderer, lower_kernel
from kiln.tensor.export.c_support import MAIN_SUPPORT, SAFETENSORS_READER
from kiln.tensor.export.formats import header_lines, names_of, safetensors_bytes
from kiln.tensor.export.plan import Endpoint, ExportPlan, PlannedArgument, PlannedCopy, PlannedLaunch
from kiln.tensor.export.size_expression import numel_expression, size_expression
from kiln.tensor.symbolic import max_int

__all__ = ["write_c"]

_ALIGNMENT = 64


def _comment(lines: list[str]) -> str:
    return "/*\n" + "".join(f" * {line}\n" for line in lines) + " */\n"


def _layout(plan: ExportPlan) -> tuple[list[int], int]:
    offsets, total = [], 0
    for buffer in plan.buffers:
        offsets.append(total)
        total += -(-max(buffer.nbytes, 1) // _ALIGNMENT) * _ALIGNMENT
    return offsets, total


def _pointer(argument: PlannedArgument, offsets: list[int]) -> str:
    return f"(void *)(kiln_arena + {offsets[argument.buffer] + argument.offset})"


def _endpoint_bytes(endpoint: Endpoint) -> str:
    return f"(size_t)({numel_expression(endpoint.shape, 'c')}) * {endpoint.dtype.itemsize}"


def _data_inputs(plan: ExportPlan) -> list[Endpoint]:
    """The inputs the caller passes as arrays (a Variable argument's input is fed from the variable's value)."""
    return [endpoint for endpoint in plan.inputs if endpoint.variable is None]


def _run_parameters(plan: ExportPlan) -> list[str]:
    parameters = [
        f"const {names_of(endpoint.dtype, endpoint.name).c_type} *{endpoint.name}" for endpoint in _data_inputs(plan)
    ]
    parameters += [f"int {variable.name}" for variable in plan.variables]
    parameters += [f"{names_of(endpoint.dtype, endpoint.name).c_type} *{endpoint.name}" for endpoint in plan.outputs]
    return parameters


def _header(plan: ExportPlan, comment: str) -> str:
    name, guard = plan.name, plan.name.upper()
    lines = [comment, f"#ifndef {guard}_H", f"#define {guard}_H", "", "#include <stddef.h>", "#include <stdint.h>", ""]
    for endpoint in (*_data_inputs(plan), *plan.outputs):
        maximum = 1
        for size in endpoint.shape:
            maximum *= max_int(size)
        lines.append(f"#define {_maximum_macro(name, endpoint)} {maximum}")
    lines += [
        "",
        "/* Reads the weights (a safetensors file; with embedded weights the path is ignored and may be NULL) and",
        " * allocates the working memory. Returns 0, or a negative code: -1 no memory, -2 unreadable file,",
        " * -3 a weight missing or of another dtype or size. */",
        f"int {name}_init(const char *weights_path);",
        "",
        "/* Runs the model: inputs and outputs are C-order arrays of the shapes above. Returns 0, -1 before init,",
        " * -2 for a variable outside its range. */",
        f"int {name}_run({', '.join(_run_parameters(plan))});",
        "",
        "/* Releases the working memory (init may be called again after). */",
        f"void {name}_free(void);",
        "",
        f"#endif /* {guard}_H */",
        "",
    ]
    return "\n".join(lines)


def _kernel_call(kernel: CKernel, launch: PlannedLaunch, offsets: list[int], indent: str) -> list[str]:
    arguments = []
    for parameter in kernel.signature.buffers:
        argument = launch.arguments.get(parameter.slot)
        if argument is None:
            raise RuntimeError(f"export: kernel {launch.program.name} takes buffer slot {parameter.slot}, never passed")
        arguments.append(_pointer(argument, offsets))
    arguments += [variable.name for variable in kernel.signature.variables]
    if not kernel.signature.core_id:
        return [f"{indent}{kernel.function}({', '.join(arguments)});"]
    cores = size_expression(kernel.signature.global_size[0], "c")
    return [
        "#ifdef KILN_EXPORT_OPENMP",
        "#pragma omp parallel for",
        "#endif",
        f"{indent}for (int core = 0; core < {cores}; core++) {kernel.function}({', '.join([*arguments, 'core'])});",
    ]


def _weights_array(data: bytes) -> str:
    rows = [",".join(str(byte) for byte in data[start : start + 32]) for start in range(0, len(data), 32)]
    return "static const unsigned char kiln_weights[] = {\n" + ",\n".join(rows) + "\n};\n"


def _source(plan: ExportPlan, comment: str, embedded: bytes | None) -> str:
    name = plan.name
    offsets, arena_size = _layout(plan)
    fused = any(isinstance(step, PlannedLaunch) and step.fuse_multiply_add for step in plan.steps)
    renderer = ExportCRenderer(fuse_multiply_add=fused)
    kernels: dict[int, CKernel] = {}
    for number, step in enumerate(plan.steps):
        if isinstance(step, PlannedLaunch):
            kernels[number] = lower_kernel(step.ast, step.program, renderer, f"kernel{number}_{step.program.name}")
    parts = [
        comment,
        "#include <math.h>",
        "#include <stdint.h>",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        f'#include "{name}.h"',
        SAFETENSORS_READER,
        f"static unsigned char *kiln_arena; /* {arena_size} bytes: every block at a {_ALIGNMENT}-byte boundary */",
        *renderer.shared,
        *(kernel.definition for kernel in kernels.values()),
    ]
    if embedded is not None:
        parts.append(_weights_array(embedded))
    init = [
        f"int {name}_init(const char *weights_path) {{",
        f"  {name}_free();",
        f"  kiln_arena = calloc(1, {arena_size});",
        "  if (!kiln_arena) return -1;",
    ]
    if embedded is not None:
        init += [
            "  (void)weights_path;",
            "  const unsigned char *file = kiln_weights;",
            "  size_t size = sizeof kiln_weights;",
        ]
    else:
        init += [
            '  FILE *stream = weights_path ? fopen(weights_path, "rb") : NULL;',
            f"  if (!stream) {{ {name}_free(); return -2; }}",
            "  fseek(stream, 0, SEEK_END);",
            "  long length = ftell(stream);",
            "  fseek(stream, 0, SEEK_SET);",
            "  unsigned char *file = length > 0 ? malloc((size_t)length) : NULL;",
            "  size_t size = file ? fread(file, 1, (size_t)length, stream) : 0;",
            "  fclose(stream);",
            f"  if (!file || size != (size_t)length) {{ free(file); {name}_free(); return -2; }}",
        ]
    init.append("  int status = 0;")
    for weight in plan.weights():
        dtype = names_of(weight.dtype, f"weight {weight.name}").safetensors
        init.append(
            f'  if (status == 0 && kiln_load_tensor(file, size, "{weight.name}", "{dtype}", {weight.nbytes}, '
            f"kiln_arena + {offsets[weight.index]}) != 0) status = -3;"
        )
    if embedded is None:
        init.append("  free(file);")
    init += [f"  if (status != 0) {name}_free();", "  return status;", "}"]
    run = [f"int {name}_run({', '.join(_run_parameters(plan))}) {{", "  if (!kiln_arena) return -1;"]
    for variable in plan.variables:
        run.append(f"  if ({variable.name} < {variable.low} || {variable.name} > {variable.high}) return -2;")
    for endpoint in plan.inputs:
        if endpoint.variable is not None:  # a Variable argument: the kernels read its value as a 0-dim int32
            run.append(
                f"  {{ int32_t value = {endpoint.variable}; "
                f"memcpy({_pointer(endpoint.location, offsets)}, &value, 4); }}"
            )
        else:
            run.append(
                f"  memcpy({_pointer(endpoint.location, offsets)}, {endpoint.name}, {_endpoint_bytes(endpoint)});"
            )
    for number, step in enumerate(plan.steps):
        if isinstance(step, PlannedCopy):
            destination, source = _pointer(step.destination, offsets), _pointer(step.source, offsets)
            run.append(f"  memmove({destination}, {source}, {step.nbytes});")
        else:
            run += _kernel_call(kernels[number], step, offsets, "  ")
    for endpoint in plan.outputs:
        run.append(f"  memcpy({endpoint.name}, {_pointer(endpoint.location, offsets)}, {_endpoint_bytes(endpoint)});")
    run += ["  return 0;", "}"]
    free = [f"void {name}_free(void) {{", "  free(kiln_arena);", "  kiln_arena = NULL;", "}"]
    return "\n".join([*parts, "\n".join(init), "\n".join(run), "\n".join(free)]) + "\n"


def _maximum_macro(name: str, endpoint: Endpoint) -> str:
    return f"{name.upper()}_{endpoint.name.upper()}_MAX_NUMEL"


def _main(plan: ExportPlan, comment: str) -> str:
    name = plan.name
    data_inputs = _data_inputs(plan)
    count = len(data_inputs)
    usage = " ".join(
        [f"{name}.safetensors"] + [f"{e.name}.(bin|npy)" for e in data_inputs] + [f"{v.name}=N" for v in plan.variables]
    )
    lines = [
        comment,
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        f'#include "{name}.h"',
        MAIN_SUPPORT,
        "int main(int argc, char **argv) {",
        f"  if (argc != {2 + count + len(plan.variables)}) {{",
        f'    fprintf(stderr, "usage: %s {usage}\\n", argv[0]);',
        "    return 2;",
        "  }",
    ]
    for number, variable in enumerate(plan.variables):
        argument = f"argv[{2 + count + number}]"
        lines += [
            f'  if (strncmp({argument}, "{variable.name}=", {len(variable.name) + 1}) != 0) {{',
            f'    fprintf(stderr, "argument %s: expected {variable.name}=N\\n", {argument});',
            "    return 2;",
            "  }",
            f"  int {variable.name} = atoi({argument} + {len(variable.name) + 1});",
        ]
    for endpoint in plan.outputs:
        c_type = names_of(endpoint.dtype, endpoint.name).c_type
        lines.append(f"  {c_type} *{endpoint.name} = malloc(sizeof({c_type}) * {_maximum_macro(name, endpoint)});")
    for number, endpoint in enumerate(data_inputs):
        names = names_of(endpoint.dtype, endpoint.name)
        lines += [
            f"  {names.c_type} *{endpoint.name} = malloc(sizeof({names.c_type}) * {_maximum_macro(name, endpoint)});",
            f'  if (read_input(argv[{2 + number}], "{names.descr}", {endpoint.name}, {_endpoint_bytes(endpoint)}) '
            "!= 0) return 1;",
        ]
    arguments = [e.name for e in data_inputs] + [v.name for v in plan.variables] + [e.name for e in plan.outputs]
    lines += [
        f"  int status = {name}_init(argv[1]);",
        f'  if (status != 0) {{ fprintf(stderr, "{name}_init(%s) failed: %d\\n", argv[1], status); return 1; }}',
        f"  status = {name}_run({', '.join(arguments)});",
        f'  if (status != 0) {{ fprintf(stderr, "{name}_run failed: %d\\n", status); return 1; }}',
    ]
    for endpoint in plan.outputs:
        numel = numel_expression(endpoint.shape, "c")
        if endpoint.dtype.name.startswith("float") and endpoint.dtype.itemsize >= 4:
            element, form = f"(double){endpoint.name}[i]", "%.17g"
        else:
            element, form = f"(long long){endpoint.name}[i]", "%lld"
        lines += [
            f'  printf("{endpoint.name} {endpoint.dtype.name} %zu\\n", (size_t)({numel}));',
            f'  for (size_t i = 0; i < (size_t)({numel}); i++) printf("{form}\\n", {element});',
        ]
    lines += [f"  free({endpoint.name});" for endpoint in (*data_inputs, *plan.outputs)]
    lines += [f"  {name}_free();", "  return 0;", "}", ""]
    return "\n".join(lines)


def _makefile(name: str) -> str:
    return (
        f"# {name}: built from C11 with libc and libm only. -fwrapv: the kernels' integer ops wrap around, as kiln's\n"
        "# IR defines them. Add -DKILN_EXPORT_OPENMP -fopenmp to CFLAGS to spread multi-core kernels over threads.\n"
        "# ARCH: the host's instruction set (FMA, vector units); `make ARCH=` builds for the compiler's baseline,\n"
        "# where the fused multiply-adds of kernels kiln ran under LLVM IR become libm calls (several times slower).\n"
        "CC ?= cc\n"
        "CFLAGS ?= -O2 -std=c11 -fwrapv\n"
        "ARCH ?= -march=native\n\n"
        f"all: {name}_main lib{name}.so\n\n"
        f"{name}_main: main.c {name}.c {name}.h\n"
        f"\t$(CC) $(CFLAGS) $(ARCH) -o $@ main.c {name}.c -lm\n\n"
        f"lib{name}.so: {name}.c {name}.h\n"
        f"\t$(CC) $(CFLAGS) $(ARCH) -fPIC -shared -o $@ {name}.c -lm\n\n"
        "clean:\n"
        f"\trm -f {name}_main lib{name}.so\n\n"
        ".PHONY: all clean\n"
    )


def write_c(plan: ExportPlan, out: Path, embed_weights: bool) -> list[Path]:
    """Writes the C artifact of `plan` into `out`; returns the paths written."""
    comment = _comment(header_lines(plan, "c"))
    weights = safetensors_bytes(plan.weights(), {"model": plan.name, "format": "kiln.tensor.export"})
    files = {
        f"{plan.name}.h": _header(plan, comment),
        f"{plan.name}.c": _source(plan, comment, weights if embed_weights else None),
        "main.c": _main(plan, comment),
        "Makefile": _makefile(plan.name),
    }
    written = []
    for file_name, text in files.items():
        path = out / file_name
        path.write_text(text)
        written.append(path)
    if not embed_weights:
        path = out / f"{plan.name}.safetensors"
        path.write_bytes(weights)
        written.append(path)
    return written
