"""`CoreLauncher`: the cores of a multi-core CPU kernel run from native code, with threads that poll for launches.

A multi-core CPU kernel (host_kernel's convention: `core_id` last) is called once per core number. Doing that from
Python threads through ctypes costs, per launch, a wake-up of each sleeping worker thread and of the launching
thread at the end (each 10-40 us on a VM: the sleeping core has to be woken by the hypervisor), plus a trip through
the GIL per core. A core launcher is a small native library, compiled once per process by the CPU compiler itself
(`HostCompiler.core_launcher_source`: C or LLVM IR, both below), with two functions over one block of 64-bit words
(the *state*, laid out by the constants of this module):

- `kiln_core_launch(state, word, count, phase)` is the launching thread's part. Phase 0 publishes the launch (the
  claim word: the launch's number in the high 32 bits, the cores not claimed yet in the low 32) and looks for
  *parked* workers to wake (those sleeping in Python): it claims their parked flags and returns how many it found,
  listed from `wake_list`, so that Python can wake them and then call phase 1. With none to wake, or in phase 1, it
  claims and runs cores until none is left, then waits (polling) until every core of the launch has finished.
- `kiln_core_worker(state, index, seen, poke, budget)` is a worker thread's loop: it polls the claim word and runs
  the cores it claims from every new launch, for up to `budget` polls without a launch; then it parks (sets its
  flag, checks the claim word once more so that a launch published meanwhile is not missed, and returns to Python,
  which blocks on the worker's queue). It also returns when the word `POKE` changes (Python work queued for it), and
  leaves a launch to the other threads when the launching thread runs on its own core (`EXCLUDE`).

A core is claimed with a compare-and-swap of the claim word; the one who claims core `c` of launch `g` keeps launch
`g` from finishing until it has run it, so the kernel address and arguments it reads afterwards are still `g`'s.

Kernels are called through their address with every argument as a 64-bit integer and the core number last, with
exactly as many arguments as the kernel takes. On the ABIs this is used for (x86-64 System V, AArch64 AAPCS64 as
Linux uses it), an int32 parameter reads the low 32 bits of its register, and a parameter passed on the stack takes
one 8-byte slot whose first bytes (little-endian) hold it: the same bits a caller passing int32 would leave there.
Other platforms get no launcher (`launcher_supported`), and the runtime calls the cores through ctypes instead.
"""

from __future__ import annotations

import ctypes
import platform
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from kiln.renderers.host_kernel import HostCompiler

__all__ = [
    "ARGUMENTS",
    "ARGUMENT_COUNT",
    "CLAIM",
    "EXCLUDE",
    "FINISHED",
    "FUNCTION",
    "HEADER_WORDS",
    "LAUNCHER_FUNCTIONS",
    "MAX_ARGUMENTS",
    "POKE",
    "WORKERS",
    "WORKER_WORDS",
    "CoreLauncher",
    "c_launcher_source",
    "core_launcher_for",
    "launcher_supported",
    "llvm_ir_launcher_source",
]

# The state's words (int64). The header is 32 words (256 bytes); then WORKER_WORDS words (one cache line) per
# worker: its core ([0], -1 when unpinned) and its parked flag ([1]); then the wake list (one word per worker).
CLAIM = 0
"""The launch's number (31 bits) << 32 | the number of its cores not claimed yet."""
FINISHED = 1
"""How many cores of the current launch have finished."""
FUNCTION = 2
"""The kernel's address."""
ARGUMENT_COUNT = 3
"""How many arguments the kernel takes before its core number."""
EXCLUDE = 4
"""The host core the launching thread runs on (-1: unknown); the worker pinned there does not take part."""
POKE = 5
"""Bumped by Python when it queues work for the workers: a polling worker returns to look at its queue."""
WORKERS = 6
"""How many workers the state has slots for."""
ARGUMENTS = 8
"""The kernel's arguments (buffer addresses, variable values), MAX_ARGUMENTS - 1 words at most."""
MAX_ARGUMENTS = 16
"""The most parameters (with the core number) a kernel launched natively may take."""
HEADER_WORDS = 32
WORKER_WORDS = 8
LAUNCHER_FUNCTIONS = ("kiln_core_launch", "kiln_core_worker")

_LOW_MASK = 0xFFFFFFFF
_YIELD_EVERY_WORKER = 64  # polls between sched_yield calls of a polling worker (another thread on its core runs)
_YIELD_EVERY_LAUNCHER = 256  # the same while the launching thread waits for the last cores


def launcher_supported(machine: str | None = None, system: str | None = None) -> bool:
    """Whether kernels can be called with 64-bit argument words here (see the module doc): x86-64 or AArch64 Linux."""
    machine = (machine or platform.machine()).lower()
    system = system or sys.platform
    return system.startswith("linux") and machine in ("x86_64", "amd64", "aarch64", "arm64")


def _is_x86(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64", "i386", "i686")


# ---------------------------------------------------------------------------------------------------------------
# C
# ---------------------------------------------------------------------------------------------------------------


def c_launcher_source() -> str:
    """The launcher in C (gcc or clang; `__atomic` builtins)."""
    cases = []
    for count in range(1, MAX_ARGUMENTS + 1):
        types = ", ".join(["i64"] * count)
        values = ", ".join(f"a[{i}]" for i in range(count))
        cases.append(f"    case {count}: ((void (*)({types}))function)({values}); break;")
    calls = "\n".join(cases)
    return f"""#include <stdint.h>
#include <sched.h>
typedef int64_t i64;
typedef uint64_t u64;
#if defined(__x86_64__) || defined(__i386__)
#define KILN_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define KILN_PAUSE() __asm__ __volatile__("yield" ::: "memory")
#else
#define KILN_PAUSE() ((void)0)
#endif
#define LOAD(p, order) __atomic_load_n((p), (order))
#define STORE(p, v, order) __atomic_store_n((p), (v), (order))

static void kiln_call(i64 function, i64 count, const i64 *a) {{
  switch (count) {{
{calls}
    default: break;
  }}
}}

static void kiln_run_claims(i64 *s, i64 launch) {{
  for (;;) {{
    i64 word = LOAD(&s[{CLAIM}], __ATOMIC_ACQUIRE);
    i64 left = word & {_LOW_MASK}LL;
    if ((i64)((u64)word >> 32) != launch || left == 0) return;
    if (!__atomic_compare_exchange_n(&s[{CLAIM}], &word, word - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
    i64 a[{MAX_ARGUMENTS}];
    i64 count = s[{ARGUMENT_COUNT}];
    for (i64 i = 0; i < count; i++) a[i] = s[{ARGUMENTS} + i];
    a[count] = left - 1;
    kiln_call(s[{FUNCTION}], count + 1, a);
    __atomic_fetch_add(&s[{FINISHED}], 1, __ATOMIC_ACQ_REL);
  }}
}}

i64 kiln_core_launch(i64 *s, i64 word, i64 count, i64 phase) {{
  i64 launch = (i64)((u64)word >> 32);
  if (phase == 0) {{
    STORE(&s[{CLAIM}], word, __ATOMIC_SEQ_CST);
    i64 workers = s[{WORKERS}], exclude = s[{EXCLUDE}], helpers = 0, woken = 0;
    i64 *wake = &s[{HEADER_WORDS} + {WORKER_WORDS} * workers];
    for (i64 k = 0; k < workers && helpers < count - 1; k++) {{
      i64 *slot = &s[{HEADER_WORDS} + {WORKER_WORDS} * k];
      if (exclude >= 0 && slot[0] == exclude) continue;
      i64 parked = 1;
      if (__atomic_compare_exchange_n(&slot[1], &parked, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) wake[woken++] = k;
      helpers++;
    }}
    if (woken) return woken;
  }}
  kiln_run_claims(s, launch);
  for (i64 polls = 1; LOAD(&s[{FINISHED}], __ATOMIC_ACQUIRE) < count; polls++) {{
    KILN_PAUSE();
    if (polls % {_YIELD_EVERY_LAUNCHER} == 0) sched_yield();
  }}
  return 0;
}}

i64 kiln_core_worker(i64 *s, i64 index, i64 seen, i64 poke, i64 budget) {{
  i64 *slot = &s[{HEADER_WORDS} + {WORKER_WORDS} * index];
  i64 core = slot[0], idle = 0;
  STORE(&slot[1], 0, __ATOMIC_SEQ_CST);
  for (;;) {{
    i64 word = LOAD(&s[{CLAIM}], __ATOMIC_ACQUIRE);
    i64 launch = (i64)((u64)word >> 32);
    int park = 0;
    if (launch != seen) {{
      seen = launch;
      i64 exclude = LOAD(&s[{EXCLUDE}], __ATOMIC_RELAXED);
      if (exclude >= 0 && core == exclude) {{
        park = 1;
      }} else {{
        kiln_run_claims(s, launch);
        idle = 0;
        continue;
      }}
    }} else if (LOAD(&s[{POKE}], __ATOMIC_RELAXED) != poke) {{
      return seen << 1;
    }} else if (idle >= budget) {{
      park = 1;
    }}
    if (park) {{
      STORE(&slot[1], 1, __ATOMIC_SEQ_CST);
      word = LOAD(&s[{CLAIM}], __ATOMIC_SEQ_CST);
      if ((i64)((u64)word >> 32) == seen || (word & {_LOW_MASK}LL) == 0) return (seen << 1) | 1;
      i64 parked = 1;  /* a launch came meanwhile: take part (if Python was told to wake us, that wake-up is spare) */
      __atomic_compare_exchange_n(&slot[1], &parked, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      idle = 0;
      continue;
    }}
    KILN_PAUSE();
    if (++idle % {_YIELD_EVERY_WORKER} == 0) sched_yield();
  }}
}}
"""


# ---------------------------------------------------------------------------------------------------------------
# LLVM IR
# ---------------------------------------------------------------------------------------------------------------


def _llvm_call_function() -> str:
    cases = "\n".join(f"    i64 {count}, label %call{count}" for count in range(1, MAX_ARGUMENTS + 1))
    blocks = []
    for count in range(1, MAX_ARGUMENTS + 1):
        lines = [f"call{count}:"]
        for i in range(count):
            lines.append(f"  %a{count}.{i}.p = getelementptr i64, ptr %a, i64 {i}")
            lines.append(f"  %a{count}.{i} = load i64, ptr %a{count}.{i}.p, align 8")
        values = ", ".join(f"i64 %a{count}.{i}" for i in range(count))
        lines.append(f"  call void %f({values})")
        lines.append("  br label %done")
        blocks.append("\n".join(lines))
    body = "\n".join(blocks)
    return f"""define internal void @kiln_call(i64 %function, i64 %count, ptr %a) {{
entry:
  %f = inttoptr i64 %function to ptr
  switch i64 %count, label %done [
{cases}
  ]
{body}
done:
  ret void
}}
"""


def _pause_blocks(pause: str, count: str, counted: str, every: int, back: str, store: str | None = None) -> str:
    """The `pause:` and `yield:` blocks of a polling loop in LLVM IR: pause the core, count the poll in `%<count>.next`
    (stored to `store` when given), yield the thread when `counted` is a multiple of `every`, then branch to `back`."""
    stored = f"\n  store i64 %{count}.next, ptr {store}, align 8" if store is not None else ""
    return f"""pause:
  {pause}
  %{count}.next = add i64 %{count}, 1{stored}
  %{count}.rest = urem i64 {counted}, {every}
  %{count}.yield = icmp eq i64 %{count}.rest, 0
  br i1 %{count}.yield, label %yield, label %{back}
yield:
  %yielded = call i32 @sched_yield()
  br label %{back}"""


def llvm_ir_launcher_source(machine: str | None = None) -> str:
    """The launcher in LLVM IR (opaque pointers; `machine` picks the pause instruction, default the host's)."""
    if _is_x86(machine):
        pause_declaration, pause = "declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"
    else:  # AArch64: the YIELD hint (HINT #1)
        pause_declaration, pause = "declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"
    worker_slot = f"{HEADER_WORDS}"
    return f"""; kiln's core launcher (see kiln.renderers.core_launcher)
declare i32 @sched_yield()
{pause_declaration}

{_llvm_call_function()}
define internal void @kiln_run_claims(ptr %s, i64 %launch) {{
entry:
  %a = alloca [{MAX_ARGUMENTS} x i64], align 8
  %count.p = getelementptr i64, ptr %s, i64 {ARGUMENT_COUNT}
  %function.p = getelementptr i64, ptr %s, i64 {FUNCTION}
  %finished.p = getelementptr i64, ptr %s, i64 {FINISHED}
  br label %look
look:
  %word = load atomic i64, ptr %s acquire, align 8
  %word.launch = lshr i64 %word, 32
  %left = and i64 %word, {_LOW_MASK}
  %same = icmp eq i64 %word.launch, %launch
  %some = icmp ne i64 %left, 0
  %claimable = and i1 %same, %some
  br i1 %claimable, label %claim, label %out
claim:
  %next = sub i64 %word, 1
  %swap = cmpxchg ptr %s, i64 %word, i64 %next acq_rel acquire, align 8
  %claimed = extractvalue {{ i64, i1 }} %swap, 1
  br i1 %claimed, label %copy, label %look
copy:
  %count = load i64, ptr %count.p, align 8
  br label %copy.loop
copy.loop:
  %i = phi i64 [ 0, %copy ], [ %i.next, %copy.body ]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %copy.body, label %run
copy.body:
  %from.index = add i64 %i, {ARGUMENTS}
  %from = getelementptr i64, ptr %s, i64 %from.index
  %value = load i64, ptr %from, align 8
  %to = getelementptr i64, ptr %a, i64 %i
  store i64 %value, ptr %to, align 8
  %i.next = add i64 %i, 1
  br label %copy.loop
run:
  %core = sub i64 %left, 1
  %core.p = getelementptr i64, ptr %a, i64 %count
  store i64 %core, ptr %core.p, align 8
  %function = load i64, ptr %function.p, align 8
  %all = add i64 %count, 1
  call void @kiln_call(i64 %function, i64 %all, ptr %a)
  %old = atomicrmw add ptr %finished.p, i64 1 acq_rel, align 8
  br label %look
out:
  ret void
}}

define i64 @kiln_core_launch(ptr %s, i64 %word, i64 %count, i64 %phase) {{
entry:
  %launch = lshr i64 %word, 32
  %helpers.v = alloca i64, align 8
  %woken.v = alloca i64, align 8
  %k.v = alloca i64, align 8
  store i64 0, ptr %helpers.v, align 8
  store i64 0, ptr %woken.v, align 8
  store i64 0, ptr %k.v, align 8
  %first = icmp eq i64 %phase, 0
  br i1 %first, label %publish, label %run
publish:
  store atomic i64 %word, ptr %s seq_cst, align 8
  %workers.p = getelementptr i64, ptr %s, i64 {WORKERS}
  %workers = load i64, ptr %workers.p, align 8
  %exclude.p = getelementptr i64, ptr %s, i64 {EXCLUDE}
  %exclude = load i64, ptr %exclude.p, align 8
  %wanted = sub i64 %count, 1
  %wake.offset = mul i64 %workers, {WORKER_WORDS}
  %wake.index = add i64 %wake.offset, {HEADER_WORDS}
  %wake = getelementptr i64, ptr %s, i64 %wake.index
  br label %scan
scan:
  %k = load i64, ptr %k.v, align 8
  %helpers = load i64, ptr %helpers.v, align 8
  %in.range = icmp slt i64 %k, %workers
  %short = icmp slt i64 %helpers, %wanted
  %go = and i1 %in.range, %short
  br i1 %go, label %slot, label %scanned
slot:
  %slot.offset = mul i64 %k, {WORKER_WORDS}
  %slot.index = add i64 %slot.offset, {worker_slot}
  %slot.p = getelementptr i64, ptr %s, i64 %slot.index
  %core = load i64, ptr %slot.p, align 8
  %known = icmp sge i64 %exclude, 0
  %here = icmp eq i64 %core, %exclude
  %skip = and i1 %known, %here
  br i1 %skip, label %step, label %flag
flag:
  %parked.p = getelementptr i64, ptr %slot.p, i64 1
  %swap = cmpxchg ptr %parked.p, i64 1, i64 0 seq_cst seq_cst, align 8
  %was.parked = extractvalue {{ i64, i1 }} %swap, 1
  %helpers.next = add i64 %helpers, 1
  store i64 %helpers.next, ptr %helpers.v, align 8
  br i1 %was.parked, label %listed, label %step
listed:
  %woken = load i64, ptr %woken.v, align 8
  %entry.p = getelementptr i64, ptr %wake, i64 %woken
  store i64 %k, ptr %entry.p, align 8
  %woken.next = add i64 %woken, 1
  store i64 %woken.next, ptr %woken.v, align 8
  br label %step
step:
  %k.next = add i64 %k, 1
  store i64 %k.next, ptr %k.v, align 8
  br label %scan
scanned:
  %woken.all = load i64, ptr %woken.v, align 8
  %any = icmp ne i64 %woken.all, 0
  br i1 %any, label %tell, label %run
tell:
  ret i64 %woken.all
run:
  call void @kiln_run_claims(ptr %s, i64 %launch)
  %finished.p = getelementptr i64, ptr %s, i64 {FINISHED}
  br label %wait
wait:
  %polls = phi i64 [ 1, %run ], [ %polls.next, %pause ], [ %polls.next, %yield ]
  %finished = load atomic i64, ptr %finished.p acquire, align 8
  %done = icmp sge i64 %finished, %count
  br i1 %done, label %out, label %pause
{_pause_blocks(pause, "polls", "%polls", _YIELD_EVERY_LAUNCHER, "wait")}
out:
  ret i64 0
}}

define i64 @kiln_core_worker(ptr %s, i64 %index, i64 %seen.in, i64 %poke, i64 %budget) {{
entry:
  %seen.v = alloca i64, align 8
  %idle.v = alloca i64, align 8
  store i64 %seen.in, ptr %seen.v, align 8
  store i64 0, ptr %idle.v, align 8
  %slot.offset = mul i64 %index, {WORKER_WORDS}
  %slot.index = add i64 %slot.offset, {worker_slot}
  %slot.p = getelementptr i64, ptr %s, i64 %slot.index
  %core = load i64, ptr %slot.p, align 8
  %parked.p = getelementptr i64, ptr %slot.p, i64 1
  %exclude.p = getelementptr i64, ptr %s, i64 {EXCLUDE}
  %poke.p = getelementptr i64, ptr %s, i64 {POKE}
  store atomic i64 0, ptr %parked.p seq_cst, align 8
  br label %look
look:
  %word = load atomic i64, ptr %s acquire, align 8
  %launch = lshr i64 %word, 32
  %seen = load i64, ptr %seen.v, align 8
  %new = icmp ne i64 %launch, %seen
  br i1 %new, label %fresh, label %quiet
fresh:
  store i64 %launch, ptr %seen.v, align 8
  %exclude = load atomic i64, ptr %exclude.p monotonic, align 8
  %known = icmp sge i64 %exclude, 0
  %here = icmp eq i64 %core, %exclude
  %excluded = and i1 %known, %here
  br i1 %excluded, label %park, label %claim
claim:
  call void @kiln_run_claims(ptr %s, i64 %launch)
  store i64 0, ptr %idle.v, align 8
  br label %look
quiet:
  %poke.now = load atomic i64, ptr %poke.p monotonic, align 8
  %poked = icmp ne i64 %poke.now, %poke
  br i1 %poked, label %return.poked, label %count
return.poked:
  %seen.poked = shl i64 %seen, 1
  ret i64 %seen.poked
count:
  %idle = load i64, ptr %idle.v, align 8
  %tired = icmp sge i64 %idle, %budget
  br i1 %tired, label %park, label %pause
{_pause_blocks(pause, "idle", "%idle.next", _YIELD_EVERY_WORKER, "look", store="%idle.v")}
park:
  store atomic i64 1, ptr %parked.p seq_cst, align 8
  %again = load atomic i64, ptr %s seq_cst, align 8
  %again.launch = lshr i64 %again, 32
  %again.left = and i64 %again, {_LOW_MASK}
  %seen.park = load i64, ptr %seen.v, align 8
  %same = icmp eq i64 %again.launch, %seen.park
  %none = icmp eq i64 %again.left, 0
  %sleep = or i1 %same, %none
  br i1 %sleep, label %return.parked, label %unpark
unpark:
  %unswap = cmpxchg ptr %parked.p, i64 1, i64 0 seq_cst seq_cst, align 8
  store i64 0, ptr %idle.v, align 8
  br label %look
return.parked:
  %seen.shifted = shl i64 %seen.park, 1
  %seen.parked = or i64 %seen.shifted, 1
  ret i64 %seen.parked
}}
"""


# ---------------------------------------------------------------------------------------------------------------
# the loaded launcher
# ---------------------------------------------------------------------------------------------------------------

_LaunchFunction = Callable[[int, int, int, int], int]
_WorkerFunction = Callable[[int, int, int, int, int], int]


class CoreLauncher:
    """The two launcher functions at `addresses` (as `LAUNCHER_FUNCTIONS` names them), kept alive by `keepalive`.

    `launch` and `worker` are ctypes calls (they release the GIL). `polls_per_microsecond` is measured once. The
    state's layout is repeated here as class attributes (the module's constants), for the runtime to fill the state.
    """

    CLAIM = CLAIM
    FINISHED = FINISHED
    FUNCTION = FUNCTION
    ARGUMENT_COUNT = ARGUMENT_COUNT
    EXCLUDE = EXCLUDE
    POKE = POKE
    WORKERS = WORKERS
    ARGUMENTS = ARGUMENTS
    MAX_ARGUMENTS = MAX_ARGUMENTS
    HEADER_WORDS = HEADER_WORDS
    WORKER_WORDS = WORKER_WORDS

    def __init__(self, addresses: dict[str, int], keepalive: object) -> None:
        missing = [name for name in LAUNCHER_FUNCTIONS if not addresses.get(name)]
        if missing:
            raise RuntimeError(f"the core launcher's binary lacks {missing}")
        self.keepalive = keepalive
        word = ctypes.c_int64
        launch_type = ctypes.CFUNCTYPE(word, ctypes.c_void_p, word, word, word)
        worker_type = ctypes.CFUNCTYPE(word, ctypes.c_void_p, word, word, word, word)
        self.launch = cast(_LaunchFunction, launch_type(addresses["kiln_core_launch"]))
        self.worker = cast(_WorkerFunction, worker_type(addresses["kiln_core_worker"]))
        self._rate: float | None = None
        self._rate_lock = threading.Lock()

    @staticmethod
    def new_state(workers: int) -> ctypes.Array[ctypes.c_int64]:
        """A zeroed state block for `workers` workers (their cores to be set by the caller)."""
        state = (ctypes.c_int64 * (HEADER_WORDS + (WORKER_WORDS + 1) * workers))()
        state[WORKERS] = workers
        return state

    def polls_per_microsecond(self) -> float:
        """How many idle polls a worker makes per microsecond (sched_yield included), measured on first use: the
        unit of the `budget` a worker is given."""
        with self._rate_lock:
            if self._rate is None:
                state = self.new_state(1)
                state[HEADER_WORDS] = -1
                address = ctypes.addressof(state)
                polls, best = 1 << 12, float("inf")
                for _ in range(3):  # the fastest of three: a poll is never slower than its best measurement
                    start = time.perf_counter()
                    self.worker(address, 0, 0, 0, polls)
                    best = min(best, time.perf_counter() - start)
                self._rate = polls / max(best * 1e6, 1e-3)
            return self._rate


_launchers: dict[tuple[type, str, tuple[str, ...]], CoreLauncher | None] = {}
_launchers_lock = threading.Lock()


def core_launcher_for(compiler: HostCompiler) -> CoreLauncher | None:
    """The core launcher built by `compiler` (compiled once per process and compiler; the binary is also kept in
    the compiler cache on disk), or None where kernels cannot be launched natively: a platform `launcher_supported`
    rejects, or a compiler without `core_launcher_source`. A launcher that fails to build raises: that is a bug."""
    if not launcher_supported():
        return None
    source = compiler.core_launcher_source()
    if source is None:
        return None
    key = (type(compiler), compiler.identity, tuple(compiler.flags))
    with _launchers_lock:
        if key not in _launchers:
            addresses, keepalive = compiler.load_functions(compiler.compile_cached(source), LAUNCHER_FUNCTIONS)
            _launchers[key] = CoreLauncher(addresses, keepalive)
        return _launchers[key]
