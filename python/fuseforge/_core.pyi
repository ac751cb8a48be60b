from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Annotated, overload

import numpy
from numpy.typing import NDArray


class OpInfo:
    """An IR op's facts, as ir/ops.def declares them."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def num_operands(self) -> int:
        """-1: variadic"""

    @property
    def result_dtype(self) -> str:
        """
        the result-dtype rule: promote, promote_tail, float, compare, logical, index, first or declared
        """

    @property
    def aten(self) -> list[str]:
        """the ATen overloads ('mul.Tensor') it maps from 1:1, operands in order"""

    def promotes_operand(self, i: int) -> bool:
        """whether operand i takes part in type promotion (not where's condition)"""

    def __repr__(self) -> str: ...

def op_names() -> list[str]:
    """Every IR op's name, in ops.def order."""

def op_info(name: str) -> OpInfo:
    """The facts of IR op `name` (ValueError for an unknown one)."""

class DTypeInfo:
    """A row of the dtype table (ir/dtype.h)."""

    @property
    def name(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def torch(self) -> str:
        """torch attribute: 'float32'"""

    @property
    def aten(self) -> str:
        """C++ constant: 'at::kFloat'"""

def dtype_table() -> list[DTypeInfo]:
    """The IR's dtypes, one DTypeInfo each."""

def promote_types(operands: list) -> str | None:
    """
    PyTorch's result_type: operands are (dtype, rank) for a tensor or 'float'/'int'/'bool' for a Python number (None: left out); None when nothing takes part.
    """

def common_dtype(op: str, operands: list) -> str | None:
    """result_type of the operands `op` promotes (where: not its condition)."""

def result_dtype(op: str, operands: list) -> str | None:
    """The result dtype by `op`'s rule; None where the node declares it."""

def format_float(v: float) -> str:
    """
    A float as the IR prints it: the shortest text that reads back to the same double.
    """

def torch_expr(text: str, node: int, operand_texts: Sequence[str]) -> str:
    """
    Python source of the torch expression computing node `node` (negative: from the end) of IR graph `text` as a library call, over `operand_texts` (`dev` names the device). A plan's steps have Step.torch_expr.
    """

def normalize_ir(text: str) -> str:
    """Parses, verifies and prints IR text (raises ValueError on bad IR)."""

def run_passes(text: str, passes: Sequence[str]) -> str: ...

def pass_names() -> list[str]: ...

def default_pipeline() -> list[str]: ...

def interpret(text: str, inputs: Sequence[Annotated[NDArray[numpy.float64], dict(order='C', device='cpu', writable=False)]]) -> list[NDArray[numpy.float64]]:
    """
    Runs IR on the CPU reference interpreter; inputs and outputs are float64 numpy arrays.
    """

PRECISIONS: list = ['fp32', 'tf32']

class Target:
    """
    The GPU a compile is for: its hardware facts (ir/target.h); str() is one line.
    """

    @overload
    def __init__(self) -> None:
        """default_target()'s facts."""

    @overload
    def __init__(self, arch: int, sm_count: int, shared_per_block_optin: int, shared_per_sm: int, l2_bytes: int) -> None:
        """
        arch: compute capability; sm_count: multiprocessors; shared_per_block_optin: bytes of shared memory a block may opt in to; shared_per_sm: bytes an SM has; l2_bytes: L2 cache bytes.
        """

    @property
    def arch(self) -> int: ...

    @property
    def sm_count(self) -> int: ...

    @property
    def shared_per_block_optin(self) -> int: ...

    @property
    def shared_per_sm(self) -> int: ...

    @property
    def l2_bytes(self) -> int: ...

    @property
    def name(self) -> str: ...

    def __str__(self) -> str: ...

def default_target() -> Target:
    """The target without a GPU: an H100/H200 (sm90-132sm)."""

def target_for_arch(arch: int) -> Target:
    """
    The facts of the usual part of a compute capability (default_target()'s for 90 and unknown ones).
    """

class CompileOptions:
    """How to compile (pipeline/compile.h)."""

    def __init__(self, precision: str = 'fp32', gemm: str = 'auto', autotune: bool = False, arch: int = 0, passes: Sequence[str] = [], trace: bool = False, reductions: bool = True, conv: str = 'direct', conv_tf32: Mapping[str, bool] = {}, conv_channels_last: Mapping[str, bool] = {}, conv_cudnn_ms: Mapping[str, tuple[float, float]] = {}, conv_direct_ms: Mapping[str, float] = {}, target: Target | None = None, release_inputs: bool = False, donated: Sequence[str] = []) -> None:
        """
        precision: one of PRECISIONS. gemm: which matmuls become generated GEMM kernels: auto (f32 at the fp32 precision), all (f32, f16, bf16) or off; none where CUTLASS's headers are missing. autotune: list every GEMM and conv kernel's other candidates (timed at its first run). arch: the target GPU's compute capability (90: Hopper kernels; 0: unknown). passes: empty for the default pipeline. trace: record the IR after each pass. reductions: reductions, norms and softmax as generated kernels (else library calls). conv: direct (2-D f32 convs may become generated direct kernels where the cost model prefers them to cuDNN), auto (also implicit-GEMM kernels where the cost model puts them ahead of cuDNN as timed, conv_cudnn_ms; none where CUTLASS's headers are missing), always (every conv an implicit-GEMM kernel covers) or off. conv_tf32: per conv signature (see convolutions()), whether eager's conv uses TF32 (else the fp32 policy keeps it IEEE); conv_channels_last: per signature, whether it timed faster channels-last; conv_cudnn_ms: per signature, cuDNN's (contiguous, channels-last) milliseconds as timed (the cost model's figures otherwise); conv_direct_ms: per signature, the direct kernel's milliseconds as timed. target: the GPU's facts (a Target); None: target_for_arch(arch). release_inputs: the caller hands its input tensors over; the plan frees each after its last read. donated: the inputs (by name) it may also write over then.
        """

    @property
    def precision(self) -> str: ...

    @property
    def gemm_dtypes(self) -> list[str]: ...

    @property
    def autotune(self) -> bool: ...

    @property
    def reductions(self) -> bool: ...

    @property
    def release_inputs(self) -> bool: ...

    @property
    def donated(self) -> list[str]: ...

    @property
    def arch(self) -> int: ...

    @property
    def target(self) -> Target:
        """
        The facts the compile is for: the target given, else target_for_arch(arch).
        """

class BufferList:
    @overload
    def __init__(self) -> None:
        """Default constructor"""

    @overload
    def __init__(self, arg: BufferList) -> None:
        """Copy constructor"""

    @overload
    def __init__(self, arg: Iterable[Buffer], /) -> None:
        """Construct from an iterable object"""

    def __len__(self) -> int: ...

    def __bool__(self) -> bool:
        """Check whether the vector is nonempty"""

    def __repr__(self) -> str: ...

    def __iter__(self) -> Iterator[Buffer]: ...

    @overload
    def __getitem__(self, arg: int, /) -> Buffer: ...

    @overload
    def __getitem__(self, arg: slice, /) -> BufferList: ...

    def clear(self) -> None:
        """Remove all items from list."""

    def append(self, arg: Buffer, /) -> None:
        """Append `arg` to the end of the list."""

    def insert(self, arg0: int, arg1: Buffer, /) -> None:
        """Insert object `arg1` before index `arg0`."""

    def pop(self, index: int = -1) -> Buffer:
        """Remove and return item at `index` (default last)."""

    def extend(self, arg: BufferList, /) -> None:
        """Extend `self` by appending elements from `arg`."""

    @overload
    def __setitem__(self, arg0: int, arg1: Buffer, /) -> None: ...

    @overload
    def __setitem__(self, arg0: slice, arg1: BufferList, /) -> None: ...

    @overload
    def __delitem__(self, arg: int, /) -> None: ...

    @overload
    def __delitem__(self, arg: slice, /) -> None: ...

class KernelList:
    @overload
    def __init__(self) -> None:
        """Default constructor"""

    @overload
    def __init__(self, arg: KernelList) -> None:
        """Copy constructor"""

    @overload
    def __init__(self, arg: Iterable[Kernel], /) -> None:
        """Construct from an iterable object"""

    def __len__(self) -> int: ...

    def __bool__(self) -> bool:
        """Check whether the vector is nonempty"""

    def __repr__(self) -> str: ...

    def __iter__(self) -> Iterator[Kernel]: ...

    @overload
    def __getitem__(self, arg: int, /) -> Kernel: ...

    @overload
    def __getitem__(self, arg: slice, /) -> KernelList: ...

    def clear(self) -> None:
        """Remove all items from list."""

    def append(self, arg: Kernel, /) -> None:
        """Append `arg` to the end of the list."""

    def insert(self, arg0: int, arg1: Kernel, /) -> None:
        """Insert object `arg1` before index `arg0`."""

    def pop(self, index: int = -1) -> Kernel:
        """Remove and return item at `index` (default last)."""

    def extend(self, arg: KernelList, /) -> None:
        """Extend `self` by appending elements from `arg`."""

    @overload
    def __setitem__(self, arg0: int, arg1: Kernel, /) -> None: ...

    @overload
    def __setitem__(self, arg0: slice, arg1: KernelList, /) -> None: ...

    @overload
    def __delitem__(self, arg: int, /) -> None: ...

    @overload
    def __delitem__(self, arg: slice, /) -> None: ...

class StepList:
    @overload
    def __init__(self) -> None:
        """Default constructor"""

    @overload
    def __init__(self, arg: StepList) -> None:
        """Copy constructor"""

    @overload
    def __init__(self, arg: Iterable[Step], /) -> None:
        """Construct from an iterable object"""

    def __len__(self) -> int: ...

    def __bool__(self) -> bool:
        """Check whether the vector is nonempty"""

    def __repr__(self) -> str: ...

    def __iter__(self) -> Iterator[Step]: ...

    @overload
    def __getitem__(self, arg: int, /) -> Step: ...

    @overload
    def __getitem__(self, arg: slice, /) -> StepList: ...

    def clear(self) -> None:
        """Remove all items from list."""

    def append(self, arg: Step, /) -> None:
        """Append `arg` to the end of the list."""

    def insert(self, arg0: int, arg1: Step, /) -> None:
        """Insert object `arg1` before index `arg0`."""

    def pop(self, index: int = -1) -> Step:
        """Remove and return item at `index` (default last)."""

    def extend(self, arg: StepList, /) -> None:
        """Extend `self` by appending elements from `arg`."""

    @overload
    def __setitem__(self, arg0: int, arg1: Step, /) -> None: ...

    @overload
    def __setitem__(self, arg0: slice, arg1: StepList, /) -> None: ...

    @overload
    def __delitem__(self, arg: int, /) -> None: ...

    @overload
    def __delitem__(self, arg: slice, /) -> None: ...

class ArgList:
    @overload
    def __init__(self) -> None:
        """Default constructor"""

    @overload
    def __init__(self, arg: ArgList) -> None:
        """Copy constructor"""

    @overload
    def __init__(self, arg: Iterable[Arg], /) -> None:
        """Construct from an iterable object"""

    def __len__(self) -> int: ...

    def __bool__(self) -> bool:
        """Check whether the vector is nonempty"""

    def __repr__(self) -> str: ...

    def __iter__(self) -> Iterator[Arg]: ...

    @overload
    def __getitem__(self, arg: int, /) -> Arg: ...

    @overload
    def __getitem__(self, arg: slice, /) -> ArgList: ...

    def clear(self) -> None:
        """Remove all items from list."""

    def append(self, arg: Arg, /) -> None:
        """Append `arg` to the end of the list."""

    def insert(self, arg0: int, arg1: Arg, /) -> None:
        """Insert object `arg1` before index `arg0`."""

    def pop(self, index: int = -1) -> Arg:
        """Remove and return item at `index` (default last)."""

    def extend(self, arg: ArgList, /) -> None:
        """Extend `self` by appending elements from `arg`."""

    @overload
    def __setitem__(self, arg0: int, arg1: Arg, /) -> None: ...

    @overload
    def __setitem__(self, arg0: slice, arg1: ArgList, /) -> None: ...

    @overload
    def __delitem__(self, arg: int, /) -> None: ...

    @overload
    def __delitem__(self, arg: slice, /) -> None: ...

class KernelInputList:
    @overload
    def __init__(self) -> None:
        """Default constructor"""

    @overload
    def __init__(self, arg: KernelInputList) -> None:
        """Copy constructor"""

    @overload
    def __init__(self, arg: Iterable[KernelInput], /) -> None:
        """Construct from an iterable object"""

    def __len__(self) -> int: ...

    def __bool__(self) -> bool:
        """Check whether the vector is nonempty"""

    def __repr__(self) -> str: ...

    def __iter__(self) -> Iterator[KernelInput]: ...

    @overload
    def __getitem__(self, arg: int, /) -> KernelInput: ...

    @overload
    def __getitem__(self, arg: slice, /) -> KernelInputList: ...

    def clear(self) -> None:
        """Remove all items from list."""

    def append(self, arg: KernelInput, /) -> None:
        """Append `arg` to the end of the list."""

    def insert(self, arg0: int, arg1: KernelInput, /) -> None:
        """Insert object `arg1` before index `arg0`."""

    def pop(self, index: int = -1) -> KernelInput:
        """Remove and return item at `index` (default last)."""

    def extend(self, arg: KernelInputList, /) -> None:
        """Extend `self` by appending elements from `arg`."""

    @overload
    def __setitem__(self, arg0: int, arg1: KernelInput, /) -> None: ...

    @overload
    def __setitem__(self, arg0: slice, arg1: KernelInputList, /) -> None: ...

    @overload
    def __delitem__(self, arg: int, /) -> None: ...

    @overload
    def __delitem__(self, arg: slice, /) -> None: ...

class VariantList:
    @overload
    def __init__(self) -> None:
        """Default constructor"""

    @overload
    def __init__(self, arg: VariantList) -> None:
        """Copy constructor"""

    @overload
    def __init__(self, arg: Iterable[KernelVariant], /) -> None:
        """Construct from an iterable object"""

    def __len__(self) -> int: ...

    def __bool__(self) -> bool:
        """Check whether the vector is nonempty"""

    def __repr__(self) -> str: ...

    def __iter__(self) -> Iterator[KernelVariant]: ...

    @overload
    def __getitem__(self, arg: int, /) -> KernelVariant: ...

    @overload
    def __getitem__(self, arg: slice, /) -> VariantList: ...

    def clear(self) -> None:
        """Remove all items from list."""

    def append(self, arg: KernelVariant, /) -> None:
        """Append `arg` to the end of the list."""

    def insert(self, arg0: int, arg1: KernelVariant, /) -> None:
        """Insert object `arg1` before index `arg0`."""

    def pop(self, index: int = -1) -> KernelVariant:
        """Remove and return item at `index` (default last)."""

    def extend(self, arg: VariantList, /) -> None:
        """Extend `self` by appending elements from `arg`."""

    @overload
    def __setitem__(self, arg0: int, arg1: KernelVariant, /) -> None: ...

    @overload
    def __setitem__(self, arg0: slice, arg1: VariantList, /) -> None: ...

    @overload
    def __delitem__(self, arg: int, /) -> None: ...

    @overload
    def __delitem__(self, arg: slice, /) -> None: ...

class Buffer:
    """A tensor or scalar the plan reads or writes (plan.h)."""

    @property
    def name(self) -> str: ...

    @property
    def dtype(self) -> str: ...

    @property
    def shape(self) -> list[int]: ...

    @property
    def strides(self) -> list[int]: ...

    @property
    def role(self) -> str:
        """
        input, param, state, const, scalar, temp, output, prepared, alias or interior
        """

    @property
    def alias_of(self) -> int:
        """alias: the buffer whose memory it views; else -1"""

    @property
    def donated(self) -> bool:
        """input: the caller hands it over to be written over after its last read"""

    def __repr__(self) -> str: ...

class Arg:
    """A step operand: a buffer index, or a literal when buffer is -1."""

    @property
    def buffer(self) -> int: ...

    @property
    def literal(self) -> object: ...

class KernelInput:
    """
    A tensor a kernel reads: `buffer` as its parameter names it, `memory` the buffer whose memory it reads (an alias's target), `relayout`: check the memory's strides and copy it into the recorded layout where they differ.
    """

    @property
    def buffer(self) -> int: ...

    @property
    def memory(self) -> int: ...

    @property
    def relayout(self) -> bool: ...

class KernelVariant:
    """Another candidate of a kernel (autotuning), same parameters."""

    @property
    def name(self) -> str: ...

    @property
    def translation_unit(self) -> str: ...

    @property
    def grid(self) -> list[int]: ...

    @property
    def block(self) -> list[int]: ...

    @property
    def shared_bytes(self) -> int: ...

    @property
    def cutlass(self) -> bool: ...

    @property
    def sm90a(self) -> bool: ...

    @property
    def constants(self) -> list[int]: ...

class Kernel:
    """A generated kernel with its launch geometry and parameters."""

    @property
    def name(self) -> str: ...

    @property
    def includes(self) -> list[str]:
        """its #include lines"""

    @property
    def source(self) -> str:
        """its code after the #include lines"""

    @property
    def translation_unit(self) -> str:
        """what NVRTC compiles: the includes, then the source"""

    @property
    def compile_key(self) -> str:
        """
        what it compiles to, less its name and comments: equal keys compile once
        """

    @property
    def kind(self) -> str: ...

    @property
    def grid(self) -> list[int]: ...

    @property
    def block(self) -> list[int]: ...

    @property
    def shared_bytes(self) -> int: ...

    @property
    def vector_width(self) -> int: ...

    @property
    def cutlass(self) -> bool: ...

    @property
    def sm90a(self) -> bool: ...

    @property
    def align_bytes(self) -> int: ...

    @property
    def outputs(self) -> list[int]: ...

    @property
    def over(self) -> list[int]:
        """
        per output: the input (index into inputs) whose memory it is written over, or -1
        """

    @property
    def inputs(self) -> KernelInputList: ...

    @property
    def scalars(self) -> list[int]: ...

    @property
    def constants(self) -> list[int]:
        """passed after the scalars, a long long each (a GEMM's sizes)"""

    @property
    def variants(self) -> VariantList: ...

    @property
    def graph(self) -> str:
        """the group's nodes as a standalone IR graph"""

    @property
    def graph_inputs(self) -> list[int]:
        """the buffers `graph` takes, in its parameter order"""

    @property
    def nodes(self) -> StepList:
        """
        the group's nodes as call/view steps over the plan's buffers (to run it op by op)
        """

    @property
    def library_steps(self) -> StepList:
        """
        a conv kernel with an epilogue: its library form (the conv's library call, the launch of the epilogue's own kernel, the free of the conv's result); empty for other kernels
        """

    def sampled_graph(self, n: int) -> str:
        """
        The graph over n sampled elements (pointwise kernels only; ValueError otherwise).
        """

class Step:
    """One step of a plan section: launch, call, view or free."""

    @property
    def kind(self) -> str: ...

    @property
    def kernel(self) -> int:
        """launch: the kernel's index"""

    @property
    def op(self) -> str: ...

    @property
    def attrs(self) -> dict: ...

    @property
    def operands(self) -> ArgList: ...

    @property
    def results(self) -> list[int]:
        """call/view: result buffers; free: the buffers freed"""

    @property
    def node_text(self) -> str:
        """call/view: the IR node line"""

    def torch_expr(self, operand_texts: Sequence[str]) -> str:
        """
        call/view: Python source of the torch expression computing the step (codegen/torch/library_call.h) over `operand_texts`, the source of each operand; `dev` names the device.
        """

class Plan:
    """The typed kernel plan (plan.h); str() is its text form."""

    @property
    def name(self) -> str: ...

    @property
    def buffers(self) -> BufferList: ...

    @property
    def kernels(self) -> KernelList: ...

    @property
    def inputs(self) -> list[int]: ...

    @property
    def outputs(self) -> list[int]: ...

    @property
    def mutations(self) -> list[tuple[int, int]]:
        """(module buffer, new value) pairs written back after the outputs"""

    @property
    def prepare(self) -> StepList: ...

    @property
    def prepare_reads(self) -> list[int]:
        """the parameters, module buffers and constants prepare reads"""

    @property
    def prepare_keeps(self) -> list[int]:
        """the prepared values run reads (kept between calls)"""

    @property
    def run(self) -> StepList: ...

    def step_text(self, step: Step) -> str: ...

    def __str__(self) -> str: ...

class Compiled:
    """A compile's diagnostics and its plan."""

    @property
    def ir_before(self) -> str: ...

    @property
    def ir_after(self) -> str: ...

    @property
    def pass_trace(self) -> list[tuple[str, str]]: ...

    @property
    def phase_seconds(self) -> list[tuple[str, float]]:
        """(stage, wall seconds) in order: parse, passes, fusion, codegen, plan"""

    @property
    def plan(self) -> Plan: ...

class LaunchableKernel:
    def launch(self, device: int, pointers: Sequence[int], scalars: Sequence[float], stream: int) -> None: ...

    @property
    def name(self) -> str: ...

    @property
    def handle(self) -> int:
        """its address, for launch_entry"""

launch_entry: int

def load_kernels(kernels: KernelList | Sequence[Kernel], arch: int) -> list[LaunchableKernel | str]:
    """
    Compiles the kernels for compute capability `arch` in parallel, each distinct one once (NVRTC, disk-cached); per kernel a LaunchableKernel, or the error message of a kernel that did not compile.
    """

def load_variant(variant: KernelVariant, arch: int) -> LaunchableKernel:
    """A kernel's autotuning candidate, compiled for `arch`."""

def compile(text: str, options: CompileOptions) -> Compiled:
    """
    Compiles IR text: passes, fusion, CUDA generation and the plan (a Compiled).
    """

def convolutions(text: str) -> list:
    """
    The graph's convolutions: signature, dtype, input/weight types, parameters, fp32_precision, whether the result is channels-last, and model_ms, the cost model's milliseconds per engine (cudnn_contiguous, cudnn_channels_last, kernel, direct; None where one cannot run it) (for the precision probe and diagnostics).
    """

def nvrtc_compile(source: str, name: str, arch: int, cutlass: bool = False, options: Sequence[str] = [], sm90a: bool = False) -> tuple:
    """
    Compiles with NVRTC (disk-cached; `options` added to the defaults; sm90a: for the arch-specific sm_90a target); returns (is_cubin, image bytes, log).
    """

def add_cutlass_include_dir(arg: str, /) -> None: ...

def set_compile_worker(arg: str, /) -> None:
    """
    The fuseforge-nvrtc executable kernels compiled together compile in, each in a process of its own (NVRTC serializes one process's compiles); "" compiles them in this process.
    """

def compile_worker() -> str:
    """The registered fuseforge-nvrtc executable; "" if none."""

def cutlass_options() -> list[str]: ...

def nvrtc_version() -> int: ...

def nvrtc_compile_count() -> int: ...

def clear_memory_cache() -> None:
    """
    Forgets kernels compiled in this process (the disk cache stays): the next compile reads the disk cache.
    """

def add_library_search_dir(arg: str, /) -> None: ...

def cache_dir() -> str: ...

def driver_available() -> bool: ...

def device_sm_count(arg: int, /) -> int: ...

def device_arch(arg: int, /) -> int: ...
