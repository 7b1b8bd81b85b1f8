"""`QuantizedWeight`: a GGUF block-quantized matrix kept as its raw bytes, decoded lazily where it is consumed.

The decode (kiln.tensor.state.quantization) is only elementwise and movement ops on the uint8 bytes, so the scheduler
fuses it into the kernel that reads the weight: for a decode step's few rows, `x @ weight.T` becomes one reduction
that decodes each block as it multiplies, and the float matrix never exists in memory (a Q4_K / Q5_K weight keeps
its runs' steps and offsets decoded once: `QuantizedWeight.run_scales`). A prompt's rows (BATCHED_ROWS) get the weight
decoded once into a float matrix that the tiled matmul reads. An embedding lookup (`QuantizedWeight.take_rows`)
gathers the picked rows' bytes before decoding them.
"""

from __future__ import annotations

import math

from kiln.tensor.ops._checks import ShapeError
from kiln.tensor.state.quantization import RUN_DECODES, GGMLType, block_format, dequantize
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["QuantizedWeight", "linear"]


class QuantizedWeight:
    """A (rows, cols) or (experts, rows, cols) ggml-quantized matrix: `raw` uint8 bytes, `ggml_type`, `shape`."""

    def __init__(self, raw: Tensor, ggml_type: int, shape: tuple[int, ...]) -> None:
        block = block_format(ggml_type)
        if shape[-1] % block.block_size:
            raise ValueError(f"{GGMLType(ggml_type).name} rows of {shape[-1]} are not whole {block.block_size}-blocks")
        self.raw, self.ggml_type, self.shape = raw, GGMLType(ggml_type), tuple(shape)
        self._run_table: Tensor | None = None

    def __repr__(self) -> str:
        return f"QuantizedWeight({self.ggml_type.name}, shape={self.shape})"

    def dequantized(self) -> Tensor:
        """The float32 values as a lazy Tensor (decoded inside whatever kernel reads it)."""
        return dequantize(self.raw, self.ggml_type, self.shape)

    def __getitem__(self, index: int) -> QuantizedWeight:
        """Matrix `index` of a stacked (experts, rows, cols) weight, still quantized (a byte range of `raw`)."""
        if len(self.shape) != 3 or not 0 <= index < self.shape[0]:
            raise IndexError(f"index {index} of a quantized weight of shape {self.shape}")
        size = self.raw.numel() // self.shape[0]
        return QuantizedWeight(self.raw[index * size : (index + 1) * size], self.ggml_type, self.shape[1:])

    def row(self, index: int) -> Tensor:
        """Row `index` of a (rows, cols) weight, decoded to float32 (1, cols): only that row's blocks are read."""
        if len(self.shape) != 2 or not 0 <= index < self.shape[0]:
            raise IndexError(f"row {index} of a quantized weight of shape {self.shape}")
        size = self.raw.numel() // self.shape[0]
        return dequantize(self.raw[index * size : (index + 1) * size], self.ggml_type, (1, self.shape[1]))

    def take_rows(self, tokens: Tensor) -> Tensor:
        """Rows `tokens` (int ids, any shape) of a (rows, cols) weight, decoded: float32 (*tokens.shape, cols).

        The picked rows' bytes are gathered first (a one-hot product over the raw rows, which codegen's gather
        rewrite turns into reading the picked rows only), then only they are decoded. The one-hot product over the
        decoded table instead read the table through an expand over the tokens, so the scheduler decoded the whole
        table into a float matrix of its own for every prompt (the 100M bench model's prefill: a 98 MB kernel,
        `E_2_48000_8_2_16`, before its gather). Ids outside [0, rows) pick zero bytes (rows of zeros for every
        format whose zero bytes decode to 0)."""
        if len(self.shape) != 2:
            raise ValueError(f"take_rows needs a (rows, cols) weight, got a quantized weight of shape {self.shape}")
        rows, cols = self.shape
        size = self.raw.numel() // rows
        hot = (tokens.reshape(-1, 1, 1) == Tensor.arange(rows, device=self.raw.device).reshape(1, rows, 1)).where(1, 0)
        table = self.raw.reshape(1, rows, size).cast(dtypes.int32)
        picked = (hot * table).sum(1, dtype=dtypes.int32).cast(dtypes.uint8).contiguous()  # stored as bytes
        block = block_format(self.ggml_type)
        return block.decode(picked.reshape(-1, block.type_size)).reshape(*tokens.shape, cols)

    def run_scales(self) -> tuple[Tensor, Tensor]:
        """The step and offset of every 32-run of a (rows, cols) weight of a RUN_DECODES format (Q4_K, Q5_K), each
        float32 (rows, cols // 32, 1): views of one (rows, cols // 32, 2) table that a kernel of its own decodes on
        the first call and that is kept (two floats per run, 44% of a Q4_K matrix's bytes on top of them). A
        few-rows product reads them in place of the six-bit fields and float16s it decoded for every run of every
        row: a (32000, 768) Q4_K matrix times a vector took 6.0 ms of CPU time, now 4.0-4.5 (two threads, medians
        of 5 replays, the minimum over 30, on the loaded 2-core VM)."""
        if self.ggml_type not in RUN_DECODES or len(self.shape) != 2:
            raise ValueError(f"run_scales needs a (rows, cols) Q4_K or Q5_K weight, got {self!r}")
        if self._run_table is None:
            rows, cols = self.shape
            blocks = self.raw.reshape(-1, block_format(self.ggml_type).type_size)
            step, offset = RUN_DECODES[self.ggml_type].run_scales(blocks)
            self._run_table = Tensor.cat(step, offset, dim=-1).reshape(rows, cols // GROUP, 2).contiguous().realize()
        return self._run_table[:, :, 0:1], self._run_table[:, :, 1:2]

    @property
    def nbytes(self) -> int:
        return int(math.prod(self.raw.shape))


Weight = Tensor | QuantizedWeight


def linear(x: Tensor, weight: Weight, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T (+ bias) in float32, decoding a quantized or half-precision weight inside the matmul."""
    if isinstance(weight, QuantizedWeight) and len(weight.shape) == 2 and weight.shape[1] % GROUP == 0:
        _check_columns(x, weight)
        if _few_rows(x):
            out = _blocked_product(x.float(), weight)
        else:  # a prompt's rows: each block decoded once into a float matrix that the matmul's tiles share
            out = x.float().contiguous() @ weight.dequantized().contiguous().T
    else:
        matrix = weight.dequantized() if isinstance(weight, QuantizedWeight) else weight.float()
        out = x.float() @ matrix.T
    return out if bias is None else out + bias.float()


BATCHED_ROWS = 16
"""Inputs of at least this many rows (or a symbolic count: a prefill chunk) multiply a quantized weight decoded once
into a float32 matrix of its own (a kernel that reads the bytes once), then the float matmul with its register tiles.
The fused product of `_blocked_product` decodes every block once per input row: the right trade for a decode step's
one row, where the float matrix would cost more memory traffic than the product; for a prompt, the decode repeated
per row costs more than writing and reading the matrix once. The input is made contiguous too: a view (the
attention's heads put back side by side) kept the matmul from its register tiles.

Kernel time of a (2048, 768) weight times 64 rows (DEBUG=2, minimum of 15 on the loaded 2-core VM, which swings the
same kernel by 3x): Q8_0 24 -> 0.35 + 9.4 ms (decode + matmul), Q6_K 40 -> 0.52 + 10.6; Q4_K, which the scheduler
already split into a decode and a tiled kernel, stays at about 10 ms. In the 100M model's prefill of 64 tokens
(Q4_K_M), the contiguous input took the attention output projection from 35 to 6 ms a layer; all the kernels of
a 64-token forward of the Q8_0 model summed 1.9 and 2.1 s before, 1.3 and 1.1 s after (eager, DEBUG=2, same VM).
At 8 rows (the server's decode of 8 slots) both forms took about 1 ms (Q8_0, Q4_K): such a step keeps the fused
product.

Where a 64-row product's time goes now ((2048, 768) and (768, 2048) weights, process CPU time with CPU_SPIN=0,
minimum of 30 TinyJit replays on the loaded 2-core VM): the decode kernel 0.85-1.1 ms for every format (Q8_0, Q4_K,
Q6_K alike: it writes 6.3 MB of float32, so the writes bound it, not the format's arithmetic), the matmul 2.3 ms
(~140 GFLOP/s). Tried and slower: the decode inside the matmul's tile (Q8_0: 9.0 against 3.3 ms: the tile decodes
each weight vector again for every row tile), the weight cut into 256- or 512-row parts each decoded and multiplied
apart and concatenated (8-10 ms: the concatenation's schedule); Q4_K decoded from `run_scales`' table was no
faster (0.96 against 0.97 ms)."""


def _check_columns(x: Tensor, weight: QuantizedWeight) -> None:
    cols = weight.shape[-1]
    if x.ndim == 0 or x.shape[-1] != cols:
        raise ShapeError(
            f"linear: an input of shape {x.shape} cannot multiply a weight of shape {weight.shape}: its last dim "
            f"must equal the weight's column count ({cols})"
        )


def _few_rows(x: Tensor) -> bool:
    """Whether `x` has a known number of rows (all dims but the last) under BATCHED_ROWS."""
    rows = 1
    for size in x.shape[:-1]:
        if not isinstance(size, int):
            return False
        rows *= size
    return rows < BATCHED_ROWS


GROUP = 32
"""The run of a quantized row's values `linear` sums as one inner reduce axis: every ggml block format stores its
values in runs of 32 (or 16) under one scale, so a run's quants are contiguous bytes and its scale is decoded once."""


def _blocked_product(x: Tensor, weight: QuantizedWeight) -> Tensor:
    """x @ weight.T summed run by run: the product keeps (cols / GROUP, GROUP) as two reduce axes, so the kernel's
    inner loop reads one run's quants as contiguous vector loads and decodes its scale once, where one merged axis of
    `cols` read every quant through a division and a remainder by the block size and gathered bytes across rows.

    Kernel time of a (2048, 1024) weight times one vector on CPU (`DEBUG=2`): Q8_0 0.93 -> 0.14 ms, Q4_0 1.41 ->
    0.08, Q4_K 1.41 -> 0.18, Q6_K 3.43 -> 0.27 (summing whole 256-value K-quant blocks instead: 1.25 and 1.78 ms),
    Q5_0 4.2 -> 0.14 (its fifth bits decoded by shifts: kiln.tensor.state.quantization). The 100M bench model's
    Q8_0 decode went from 20.8 to ~120 tok/s, its prefill from 46 to ~195. (The merged product of a 2-D input of 64
    or more rows gets a matmul register tile and was faster in isolation, but slower in the model: prefill 62
    tok/s.) A Q4_K / Q5_K weight's runs read their step and offset from `run_scales`' table.

    What bounds these kernels (llvm-mca -mcpu=sapphirerapids of the innermost loop after kiln's IR passes, one
    vector times a (2048, 768) weight): Q8_0 0.14 cycles per value, Q4_K 0.23, Q6_K 0.44. Q8_0's few ops per value
    leave it memory-bound on two cores (~89% of numpy's copy rate); Q4_K spends 7 and Q6_K ~13 512-bit vector ops per
    16 values (widen, shift, mask, convert, scale, fused multiply-add) on the two ports that run them, so those ports
    bound them, not memory nor the accumulators' latency: Q6_K summed as 2 or 3 partial sums (one accumulator each)
    came to 0.43 and 0.42 cycles per value, Q6_K with the 8-row tile the others get (its quants first in the
    product, so that the tile takes them as the operand) 0.45, the bit fields widened to 16 instead of 32 bits 0.44
    (Q4_K 0.24), and Q4_K as step * (x * q) with the offsets times x's run sums apart (one multiply less per value)
    lost its row tile (6.4 against 3.6 ms of CPU time for (32000, 768)). A faster Q4_K / Q6_K vector product needs
    fewer ops per value than exact float32 decoding allows: llama.cpp multiplies 8-bit integers (its activations
    quantized to 8 bits, VNNI)."""
    rows, cols = weight.shape
    runs = cols // GROUP  # whole: `linear` takes this path for rows of whole runs (every block-quantized format's)
    if weight.ggml_type in RUN_DECODES:
        step, offset = weight.run_scales()
        blocks = weight.raw.reshape(-1, block_format(weight.ggml_type).type_size)
        matrix = step * RUN_DECODES[weight.ggml_type].quants(blocks).reshape(rows, runs, GROUP) - offset
    else:
        matrix = weight.dequantized().reshape(rows, runs, GROUP)
    return (x.reshape(*x.shape[:-1], 1, runs, GROUP) * matrix).sum((-2, -1))
