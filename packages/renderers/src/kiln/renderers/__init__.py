"""Concrete renderers, each owning its compiler: C and LLVM IR for the CPU, Python text for the PYTHON device, CUDA C
(NVRTC) and PTX (ptxas) for NVIDIA GPUs, OpenCL C (the OpenCL platform's program build) for the CL device, WGSL
(validated by wgpu, an optional dependency) for the WEBGPU device, C for AMD GPUs (clang's amdgcn target) and Metal
Shading Language for Apple GPUs (xcrun metal, macOS only).

Importing this package loads no toolchain: a renderer finds its compiler (clang/gcc, llvmlite, libnvrtc, ptxas) when
first used and raises `ToolchainNotFoundError` naming what to install if it is missing.
"""

from kiln.renderers.amd import AMDCompileError, AMDCompiler, AMDRenderer
from kiln.renderers.amd_toolchain import AMD_CLANG, AMDToolchain, amd_toolchain_available, find_amd_toolchain
from kiln.renderers.c import CCompiler, CompileError, CRenderer
from kiln.renderers.c_dialect import C_DIALECT, CDialect
from kiln.renderers.c_style import ENTRY_NAME, CStyleRenderer, CStyleWriter, pm_c_style
from kiln.renderers.core_launcher import CoreLauncher, core_launcher_for, launcher_supported
from kiln.renderers.cpu_renderers import cpu_renderers, renderers_for
from kiln.renderers.cuda import CUDACompiler, CUDARenderer
from kiln.renderers.device_table import DEVICE_TABLE, DeviceRow, dtypes_for
from kiln.renderers.host_kernel import HostCompiler, HostKernel, KernelParameter, kernel_parameters, load_shared_object
from kiln.renderers.llvm_compiler import LLVMCompiler
from kiln.renderers.llvm_ir import LLVMRenderer, pm_llvm_ir
from kiln.renderers.metal import MetalCompileError, MetalCompiler, MetalRenderer
from kiln.renderers.nvrtc import NVRTC_PATH, NvrtcCompileError, NvrtcNotFoundError, load_nvrtc
from kiln.renderers.opencl import OpenCLCompileError, OpenCLCompiler, OpenCLRenderer
from kiln.renderers.opencl_library import OpenCLError, OpenCLNotFoundError, opencl_available, opencl_targets
from kiln.renderers.process_once import ProcessOnce
from kiln.renderers.ptx import PTXAS, PTXAssemblerError, PTXCompiler, PTXRenderer
from kiln.renderers.ptx_rules import pm_ptx
from kiln.renderers.python import PythonCompiler, PythonRenderer, parse_linear, render_linear
from kiln.renderers.target import AMD_TARGETS, Target, TargetRenderer, nvidia_target, tensor_core_of
from kiln.renderers.tensor_cores import TENSOR_CORES_GFX942, TENSOR_CORES_GFX1100, TENSOR_CORES_METAL, TENSOR_CORES_SM80
from kiln.renderers.toolchain import CPU_CC, CToolchain, ToolchainCompiler, ToolchainNotFoundError, find_c_compiler
from kiln.renderers.webgpu_library import WebGPUNotFoundError, webgpu_available
from kiln.renderers.wgsl import WGSLCompileError, WGSLCompiler, WGSLRenderer

__all__ = [
    "ProcessOnce",
    "AMD_CLANG",
    "AMD_TARGETS",
    "AMDCompileError",
    "AMDCompiler",
    "AMDRenderer",
    "AMDToolchain",
    "MetalCompileError",
    "MetalCompiler",
    "MetalRenderer",
    "TENSOR_CORES_GFX1100",
    "TENSOR_CORES_GFX942",
    "TENSOR_CORES_METAL",
    "amd_toolchain_available",
    "find_amd_toolchain",
    "CPU_CC",
    "DEVICE_TABLE",
    "ENTRY_NAME",
    "NVRTC_PATH",
    "PTXAS",
    "TENSOR_CORES_SM80",
    "Target",
    "TargetRenderer",
    "CCompiler",
    "CDialect",
    "C_DIALECT",
    "CRenderer",
    "CStyleRenderer",
    "CStyleWriter",
    "CToolchain",
    "CUDACompiler",
    "CUDARenderer",
    "CompileError",
    "DeviceRow",
    "CoreLauncher",
    "HostCompiler",
    "HostKernel",
    "KernelParameter",
    "LLVMCompiler",
    "LLVMRenderer",
    "NvrtcCompileError",
    "OpenCLCompileError",
    "OpenCLCompiler",
    "OpenCLError",
    "OpenCLNotFoundError",
    "OpenCLRenderer",
    "NvrtcNotFoundError",
    "PTXAssemblerError",
    "PTXCompiler",
    "PTXRenderer",
    "PythonCompiler",
    "PythonRenderer",
    "ToolchainCompiler",
    "ToolchainNotFoundError",
    "WGSLCompileError",
    "WGSLCompiler",
    "WGSLRenderer",
    "WebGPUNotFoundError",
    "core_launcher_for",
    "cpu_renderers",
    "dtypes_for",
    "renderers_for",
    "find_c_compiler",
    "kernel_parameters",
    "launcher_supported",
    "load_nvrtc",
    "load_shared_object",
    "nvidia_target",
    "opencl_available",
    "opencl_targets",
    "parse_linear",
    "pm_c_style",
    "pm_llvm_ir",
    "pm_ptx",
    "render_linear",
    "tensor_core_of",
    "webgpu_available",
]
