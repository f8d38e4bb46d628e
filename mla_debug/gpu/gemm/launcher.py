"""Launching the Triton block-scaled FP8 GEMM: input checks, byte orders, launch configuration, split-K.

`triton_block_scaled_mm` multiplies raw bytes the way aiter's kernels read them: the activation scale
in the byte order the kernel is built for (ROW_MAJOR for ``gemm_a8w8_blockscale``, COL_MAJOR for
``..._bpreshuffle``) whatever the tensor's strides say, and the weight either plain or (16, 16)
preshuffled. Triton is imported on the first call, so this module imports on machines without it.

Four kernels compute the same bytes for the same tiles: the Triton kernel (every GPU, and the CPU
under the interpreter); on sm_90, the Gluon kernel (gluon_kernel: a preshuffled weight staged unswizzled,
and with `LaunchConfig.overlap` either weight with the promotion overlapped with the next MMA), its
persistent form (gluon_persistent, `LaunchConfig.persistent`), and a warp-specialized one for
either weight (gluon_specialized, `LaunchConfig.specialized`; persistent with
`LaunchConfig.persistent`, storing through TMA with `LaunchConfig.tma_store`), the heuristic's choice
from M = 1024 on sm_90.

Launch configurations come from `launch_config`, a shape heuristic for Hopper-class GPUs (cached per
shape); `autotune` times a few candidates once per shape on the current GPU and caches the winner in
the process. Tests never autotune.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from ..._checks import describe, is_dense
from ...layouts import ScaleLayout
from ...numerics import E4M3FN, E4M3FNUZ, Fp8Format
from .. import triton_env
from ..launch_names import launch_name

BLOCK = 128
SHUFFLE_BAND = 16


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and launch parameters of one GEMM launch."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    split_k: int = 1
    stagger: bool = True  # column tile j starts its K loop at block j (see triton_kernel)
    # Scale each block's product into the accumulator while the next block multiplies (the Gluon kernel,
    # wgmma tiles without split-K; see gluon_kernel). Changes no arithmetic.
    overlap: bool = False
    # The same loop in a persistent grid, one program per SM running its copy pipeline on across its tiles
    # (see gluon_persistent). Changes no arithmetic.
    persistent: bool = False
    # 128 x 128 tiles by a warp-specialized kernel: a TMA producer warp and two consumer warpgroups that
    # never wait for each other (see gluon_specialized); with `persistent`, one program per SM.
    # Changes no arithmetic.
    specialized: bool = False
    # The warp-specialized kernel's epilogue through shared memory and a TMA store, which drains while the
    # consumers go on to the next tile (see gluon_specialized). Changes no arithmetic.
    tma_store: bool = False

    def __str__(self) -> str:
        return launch_name(
            f"BM{self.block_m}-BN{self.block_n}-w{self.num_warps}-s{self.num_stages}-g{self.group_m}-sk{self.split_k}",
            (not self.stagger, "-nostagger"),
            (self.overlap, "-overlap"),
            (self.persistent, "-persistent"),
            (self.specialized, "-specialized"),
            (self.tma_store, "-tmastore"),
        )


def triton_status() -> tuple[bool, str]:
    """Whether Triton can run here: importable, and a CUDA GPU or the interpreter (TRITON_INTERPRET=1)."""
    missing = triton_env.import_error()
    if missing is not None:
        return False, missing
    if triton_env.interpreting():
        broken = triton_env.interpreter_error()
        if broken is not None:
            return False, broken
        return True, f"triton {triton_env.version()} interpreter (TRITON_INTERPRET=1; tiny shapes only)"
    gpu = triton_env.cuda_gpu_name()
    if gpu is None:
        return False, "no NVIDIA CUDA GPU visible to torch (set TRITON_INTERPRET=1 to run on the CPU, slowly)"
    return True, f"triton {triton_env.version()} on {gpu}"


def runs_on(device: torch.device, allow_interpreter: bool = False) -> bool:
    """Whether tensors on `device` can go through Triton: CUDA tensors, or CPU tensors under the
    interpreter when `allow_interpreter` (it is far too slow to be chosen automatically)."""
    if device.type == "cuda":
        return triton_status()[0] and not triton_env.interpreting()
    return allow_interpreter and device.type == "cpu" and triton_env.interpreting() and triton_status()[0]


@functools.lru_cache(maxsize=4096)
def _heuristic(
    m: int, n: int, k: int, sms: int, fnuz: bool, gluon: bool = False, specialized: bool = True
) -> LaunchConfig:
    """Tiles by M, from timing DeepSeek shapes on an H200 (benchmarks/RESULTS.md, "Triton block-scaled FP8
    GEMMs"); `gluon`: the Gluon kernels can run (an sm_90 GPU), which take over at large M (_overlapped):
    the warp-specialized kernel unless not `specialized` (the launcher's fallback where it cannot run)."""
    k_blocks = -(-k // BLOCK)
    split = 1
    if m <= 64:
        # A weight stream (the decode sweep in RESULTS.md): 64-wide tiles, and enough programs in flight
        # to keep every SM streaming - split K for long K (the in-launch reduction made splitting beat
        # narrower tiles), and for short K, where a split's fixed costs outweigh its stream, narrower
        # 16-row tiles.
        block_m = 16 if m <= 16 else 64
        block_n, warps = 64, 4
        tiles = -(-m // block_m) * -(-n // block_n)
        if k_blocks > _SHORT_K_BLOCKS:
            # 16-row tiles do little work per byte: two programs per SM; 64-row tiles: one.
            wanted = 2 * sms if block_m == 16 else sms
            while split < 8 and tiles * split < wanted and k_blocks // (2 * split) >= 4:
                split *= 2
        elif m == 1 and -(-n // 128) >= sms:
            # A single token over a wide short-K weight: 128-wide tiles still give every SM one, and half
            # as many programs pay the fixed costs. At 16 rows the 64-wide tiles were as fast or faster.
            block_n = 128
            tiles = -(-n // block_n)
        elif block_m == 16:
            while block_n > 32 and tiles < sms // 2:
                block_n //= 2
                tiles = -(-m // block_m) * -(-n // block_n)
        # Deeper pipelines where a tile streams at least 16 K blocks; 16-row tiles of a split stream gained
        # nothing from them.
        stages = 6 if k_blocks >= _SHORT_K_BLOCKS and (split == 1 or block_m == 64) else 4
        # Fewer stages where that fits the grid in fewer waves (programs per SM bound by shared memory):
        # 32768x512 M=64 is 512 tiles, 3 per SM with 4 stages (2 waves), 4 per SM with 3 (one wave).
        if _waves(tiles * split, sms, (block_m + block_n) * BLOCK, 3) < _waves(
            tiles * split, sms, (block_m + block_n) * BLOCK, stages
        ):
            stages = 3
    elif m <= 1024:
        block_m, block_n, warps, stages = 64, 128, 4, 4
    else:
        block_m, block_n, warps, stages = 128, 128, 8, 3
    if fnuz:  # bf16 operands take twice the shared memory per stage
        stages = min(stages, 3)
    cfg = LaunchConfig(block_m, block_n, warps, stages, 8, split)
    if not gluon or fnuz:
        return cfg
    return _overlapped(cfg, m, k, specialized and specializes(m, n, sms))


def specializes(m: int, n: int, sms: int) -> bool:
    """Whether the persistent warp-specialized kernel is the heuristic's choice (where it can run).

    It beat the heuristic's other choice on an H200 (RESULTS.md, "Persistent warp-specialized kernel")
    from M = 1024, and below that where its 128 x 128 tiles still give every SM one; with fewer tiles,
    64-row tiles spread the work better. The same holds for plain and preshuffled weights."""
    return m >= 1024 or (m > 64 and -(-m // BLOCK) * -(-n // BLOCK) >= sms)


def _overlapped(cfg: LaunchConfig, m: int, k: int, specialized: bool) -> LaunchConfig:
    """Where the Gluon kernels beat the Triton kernel at large M, the config that runs them: 128 x 128
    tiles, the same MMA and multiply-add order, so the same bytes.

    Each choice is the fastest the H200 runs recorded in RESULTS.md ("Overlapped promotion", "Persistence",
    "Persistent warp-specialized kernel") found against the Triton kernel's tiles: where `specializes`,
    the persistent warp-specialized kernel with TMA stores, 5 stages, the most that fit with its staging
    tiles.

    Without it (`specialized` false), the overlapped loops of 8 warps and 4 stages: above M = 1024; over
    K = 512 (4 blocks) from M = 1024 the persistent kernel, whose next tile's first copies land while a
    tile finishes (over longer K it ran slower than one program per tile); at M = 1024 otherwise only over
    long K, the 64 x 128 tiles being as fast or faster elsewhere."""
    if specialized:
        return LaunchConfig(
            128, 128, 8, 5, cfg.group_m, 1, cfg.stagger, persistent=True, specialized=True, tma_store=True
        )
    if m < 1024:  # (where the heuristic never splits K)
        return cfg
    k_blocks = k // BLOCK
    overlapped = LaunchConfig(128, 128, 8, 4, cfg.group_m, 1, cfg.stagger)
    if 3 <= k_blocks <= 4 and overlap_fits(replace(overlapped, persistent=True), k):
        return replace(overlapped, persistent=True)
    if (m > 1024 or k_blocks >= 64) and overlap_fits(overlapped, k):
        return replace(overlapped, overlap=True)
    return cfg


def _programs_per_sm(stage_bytes: int, stages: int) -> int:
    """Programs an SM holds when shared memory bounds them (an H100/H200 SM has 228 KB, 1 KB of it reserved
    per program)."""
    return max(1, _SM_SHARED_BYTES // (stages * stage_bytes + 1024))


def _waves(programs: int, sms: int, stage_bytes: int, stages: int) -> int:
    """How many rounds of programs the grid takes when shared memory bounds the programs per SM."""
    return -(-programs // (sms * _programs_per_sm(stage_bytes, stages)))


_SM_SHARED_BYTES = 228 * 1024


# K blocks up to which a decode GEMM is not split: 7168x2048 (16 blocks) at M=1 ran slower with any split.
_SHORT_K_BLOCKS = 16


@functools.lru_cache(maxsize=4096)
def interleaved_stages(cfg: LaunchConfig, m: int, n: int, k: int, sms: int) -> LaunchConfig:
    """The heuristic's config with the pipeline depth the interleaved (Gluon) kernel runs best at. The
    stage count changes no arithmetic, so the bytes stay the plain kernel's for the same config.

    From the stage sweeps on an H200 (RESULTS.md, the interleaved kernel's pipeline depth): 128-row tiles
    (8 warps, one program per SM by registers) run best with 4 stages, one more than the plain kernel;
    where the grid gives each SM at most one program, its latency is the limit and deeper pipelines pay -
    except for single tokens, which lost with them; where there are two or more programs per SM for
    64-row tiles, 3 stages fit three programs on an SM instead of two, and 4 two, whichever fills the last
    wave better.
    """
    programs = -(-m // cfg.block_m) * -(-n // cfg.block_n) * cfg.split_k
    per_stage = interleaved_stage_bytes(cfg)
    if cfg.block_m >= 128:
        stages = 4
    elif programs <= sms and m > 1:
        stages = min(12, _STAGE_BYTES // per_stage)
    elif programs >= 2 * sms and m > 64:
        # 3 stages fit three programs per SM, 4 fit two. 4 where the grid then occupies fewer program
        # slots (its last wave counted whole) and either streams a long K (16+ blocks: 7168x2048 and
        # 7168x16384 M=1024, 8 slots per SM against 9) or saves a quarter of them (4096x512 M=1024: 4 per
        # SM against 6); short-K grids otherwise gain from the third program per SM (32768x512 M=256: 8
        # slots against 9, yet faster with 3 stages), and a grid that fits one wave of 3 keeps it
        # (2112x7168 M=1024). Fitted on the nine 64 x 128-tile cases of the stage sweep in RESULTS.md.
        fewer = _slots(programs, sms, per_stage, 4) / _slots(programs, sms, per_stage, 3)
        k_blocks = -(-k // BLOCK) // cfg.split_k
        stages = 4 if fewer <= 0.75 or (fewer < 1 and k_blocks >= 16) else 3
    else:
        return cfg
    return replace(cfg, num_stages=stages)


@functools.lru_cache(maxsize=4096)
def interleaved_config(cfg: LaunchConfig, m: int, n: int, k: int, sms: int) -> LaunchConfig:
    """The heuristic's config as the interleaved (Gluon) kernel runs a preshuffled weight best: its own
    depth (`interleaved_stages`), or, for 64-row tiles over 16+ K blocks at 64 < M <= 1024, the overlapped
    loop at 4 stages where its grid (two programs per SM, by registers) takes no more waves than at that
    depth. Neither changes the arithmetic: the bytes stay the plain kernel's.

    On an H200 (RESULTS.md, "The preshuffled weight at 64 < M <= 1024") the overlapped loop won over long
    K and lost where its grid takes more waves (2112x7168 M = 1024: 272 tiles, two waves of two per SM
    against one of three) or K is short (24576x1536 M = 256, 12 blocks)."""
    deep = interleaved_stages(cfg, m, n, k, sms)
    overlapped = replace(cfg, overlap=True, num_stages=4)
    if cfg.block_m != 64 or not 64 < m <= 1024 or k // BLOCK < 16 or not overlap_fits(overlapped, k):
        return deep
    programs = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    if -(-programs // (2 * sms)) <= _waves(programs, sms, interleaved_stage_bytes(deep), deep.num_stages):
        return overlapped
    return deep


def _slots(programs: int, sms: int, stage_bytes: int, stages: int) -> int:
    """Program slots a grid occupies, its last wave counted whole, when shared memory bounds the programs
    per SM."""
    return _waves(programs, sms, stage_bytes, stages) * _programs_per_sm(stage_bytes, stages) * sms


def interleaved_stage_bytes(cfg: LaunchConfig) -> int:
    """Shared memory of one stage of the interleaved kernel: both fp8 tiles and two fp32 scales per row."""
    return (cfg.block_m + cfg.block_n) * BLOCK + 2 * 4 * cfg.block_m


# Shared memory the interleaved kernel's pipeline may take when it has an SM to itself (an H200 block may
# have 227 KB; the rest is the epilogue's layout conversion).
_STAGE_BYTES = 200 * 1024


_TUNED: dict[tuple, LaunchConfig] = {}


def launch_config(m: int, n: int, k: int, device: torch.device, fnuz: bool = False) -> LaunchConfig:
    """The configuration for an (M, N, K) problem: an autotuned one if `autotune` ran for it, else the
    heuristic."""
    tuned = _tuned(m, n, k, fnuz, device)
    return tuned or _heuristic(m, n, k, triton_env.sm_count(device), fnuz, triton_env.hopper_gluon(device))


def _tuned(m: int, n: int, k: int, fnuz: bool, device: torch.device) -> LaunchConfig | None:
    return _TUNED.get((_m_bucket(m), n, k, fnuz, str(device)))


def _m_bucket(m: int) -> int:
    return 1 << max(m - 1, 0).bit_length()


def check_operands(
    name: str,
    a: torch.Tensor,
    a_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    k: int,
    fmt: Fp8Format,
    shuffled: bool,
) -> None:
    """Clear errors for what the kernel cannot take, before anything is launched."""
    m = a.shape[0]
    n = w.shape[0]
    if fmt not in (E4M3FN, E4M3FNUZ):
        raise TypeError(f"{name}: the Triton GEMM takes e4m3fn or e4m3fnuz, got {fmt.name}")
    for label, t in (("input", a), ("weight", w)):
        if t.dim() != 2 or t.element_size() != 1:
            raise TypeError(f"{name}: {label} {describe(t)} must be 2-D one-byte fp8 data")
        if t.stride(1) != 1:
            raise ValueError(f"{name}: {label} {describe(t)} strides {tuple(t.stride())}: rows must be contiguous")
    if k % BLOCK or a.shape[1] != k:
        raise ValueError(
            f"{name}: input {describe(a)}: K={a.shape[1]} must equal the weight's K={k}, a multiple of 128"
        )
    if n % SHUFFLE_BAND:
        raise ValueError(f"{name}: weight {describe(w)}: N={n} must be a multiple of 16")
    if shuffled and not w.is_contiguous():
        raise ValueError(f"{name}: preshuffled weight {describe(w)} must be contiguous (it is one shuffled buffer)")
    if w.shape[1] < k or (not shuffled and w.shape[1] != k):
        raise ValueError(f"{name}: weight {describe(w)} holds {w.shape[1]} bytes per row for K={k}")
    groups = k // BLOCK
    if a_scale.dtype != torch.float32 or a_scale.numel() != m * groups or not is_dense(a_scale):
        raise ValueError(
            f"{name}: input scale {describe(a_scale)} strides {tuple(a_scale.stride())} must be a gap-free fp32 "
            f"buffer of M x K/128 = {m} x {groups} values (the kernel reads its raw bytes)"
        )
    want = (-(-n // BLOCK), groups)
    if w_scale.dtype != torch.float32 or tuple(w_scale.shape) != want:
        raise ValueError(f"{name}: weight scale {describe(w_scale)} must be fp32 of shape {want} (128x128 blocks)")
    devices = {t.device for t in (a, a_scale, w, w_scale)}
    if len(devices) != 1:
        raise ValueError(f"{name}: operands are on {sorted(map(str, devices))}; put them on one device")


def gluon_fits(cfg: LaunchConfig, shuffled: bool = True) -> bool:
    """Whether the Gluon kernel's copy layouts cover `cfg`'s tiles without two threads copying one
    element: activation rows 4 per warp; a plain weight's rows the same; a shuffled weight's 16-row bands
    2 K chunks per warp, the warps spread over bands first (tiles at least one band wide)."""
    if cfg.block_m < 4 * cfg.num_warps:
        return False
    if not shuffled:
        return cfg.block_n >= 4 * cfg.num_warps
    if cfg.block_n < SHUFFLE_BAND:
        return False
    warps_n = min(cfg.num_warps, cfg.block_n // SHUFFLE_BAND)
    return 2 * (cfg.num_warps // warps_n) <= BLOCK // 16


def overlap_fits(cfg: LaunchConfig, k: int) -> bool:
    """Whether the Gluon kernels can overlap each block's promotion with the next block's MMA for `cfg`
    over K: wgmma tiles (64+ rows), one K range per tile, and an even number of K blocks (the loop takes
    them in pairs, each product in its own registers); persistent, at least stages - 1 of them (the
    prologue's copies stay within a program's first tile)."""
    k_blocks = k // BLOCK
    enough = not cfg.persistent or k_blocks >= cfg.num_stages - 1
    return cfg.block_m >= 64 and cfg.split_k == 1 and k_blocks % 2 == 0 and k_blocks >= 2 and enough


def specialized_fits(cfg: LaunchConfig) -> bool:
    """Whether the warp-specialized kernel runs `cfg`: its 128 x 128 tiles, one K range, and stages and
    staging tiles within a program's shared memory."""
    tiles = (cfg.block_m, cfg.block_n, cfg.split_k) == (128, 128, 1)
    return tiles and specialized_shared_bytes(cfg) <= _SM_SHARED_BYTES - 1024


def sixteen_byte_rows(*tensors: torch.Tensor) -> bool:
    """Whether the Gluon kernels' 16-byte copies (cp.async, TMA) can move these operands' rows: 16-byte
    aligned starts and row strides."""
    return all(t.data_ptr() % 16 == 0 and t.stride(0) * t.element_size() % 16 == 0 for t in tensors)


def specialized_shared_bytes(cfg: LaunchConfig) -> int:
    """Shared memory of the warp-specialized kernel: per stage a 128 x 128 fp8 tile of each operand and 128
    fp32 activation scales, and with TMA stores a 128 x 128 bf16 staging tile."""
    return cfg.num_stages * (2 * BLOCK * BLOCK + 4 * BLOCK) + (2 * BLOCK * BLOCK if cfg.tma_store else 0)


def tma_descriptors(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, shuffled: bool = False):
    """TMA descriptors of the warp-specialized kernel: 128 x 128 tiles of the activation and a plain weight
    (fp8, 128-byte swizzled), or a preshuffled weight's tiles as 8 K chunks x 8 bands of 256 bytes
    (unswizzled, landing chunk-major); and 64 x 128 tiles of the bf16 output (one consumer's rows)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    def descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:
        swizzled = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8 * t.element_size(), rank=2)
        return TensorDescriptor(t, [t.shape[0], t.shape[1]], [t.stride(0), 1], [rows, BLOCK], swizzled)

    if shuffled:
        # Band b's 16-byte K chunk c holds its 16 rows' bytes at b * 16 * KP + c * 256 (KP: padded K).
        bands, kp = w.shape[0] // SHUFFLE_BAND, w.shape[1]
        unswizzled = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=3)
        w_desc = TensorDescriptor(w, [kp // 16, bands, 256], [256, 16 * kp, 1], [8, 8, 256], unswizzled)
    else:
        w_desc = descriptor(w, BLOCK)
    return descriptor(a, BLOCK), w_desc, descriptor(out, BLOCK // 2)


def scale_descriptor(a_scale: torch.Tensor, m: int, groups: int):
    """TMA descriptor of column-major activation scales (group g of row r at g * M + r): one K block's
    scales of 128 rows."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    unswizzled = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    return TensorDescriptor(a_scale, [groups, m], [m, 1], [1, BLOCK], unswizzled)


def persistent_programs_per_sm(cfg: LaunchConfig) -> int:
    """Programs of the persistent kernel an SM holds at once: its overlapped loop keeps the accumulator and
    two products, 230-255 registers per thread, so one program of 8 warps or two of 4 (65536 registers)."""
    return max(1, 65536 // (256 * 32 * cfg.num_warps))


def triton_block_scaled_mm(
    a: torch.Tensor,
    a_scale: torch.Tensor,
    scale_bytes: ScaleLayout,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    k: int,
    fmt: Fp8Format = E4M3FN,
    shuffled: bool = False,
    config: LaunchConfig | None = None,
    name: str = "triton gemm",
    staging: str = "auto",
) -> torch.Tensor:
    """bf16 (M, N) = a (M, K) fp8 x w (N, K)^T with 1x128 input and 128x128 weight scales.

    `scale_bytes` is the order the raw scale buffer is READ in (ROW_MAJOR: offset m*G + g; COL_MAJOR:
    g*M + m), not a description of `a_scale`: a buffer written in the other order is read wrongly,
    silently, as by the real kernels. `shuffled` reads `w` as preshuffled (16, 16) with rows of
    ``w.shape[1]`` bytes (K-padding allowed). `fmt` is the format of both operands' bytes.

    `staging` picks how a preshuffled weight tile is staged in shared memory: "interleaved" (the Gluon
    kernel, Hopper only: each 32-byte sector of the shuffled bytes lands in 32 contiguous bytes),
    "swizzled" (the Triton kernel's layout for every operand), or "auto" (interleaved wherever it can
    run: a shuffled e4m3fn weight on an sm_90 GPU, tiles the Gluon copies cover). Both give the same
    bytes for the same launch config.
    """
    if staging not in ("auto", "interleaved", "swizzled"):
        raise ValueError(f"{name}: staging must be 'auto', 'interleaved' or 'swizzled', not {staging!r}")
    check_operands(name, a, a_scale, w, w_scale, k, fmt, shuffled)
    ok, why = triton_status()
    if not ok:
        raise RuntimeError(f"{name}: cannot run the Triton GEMM here: {why}")
    m, n = a.shape[0], w.shape[0]
    groups = k // BLOCK
    fnuz = fmt == E4M3FNUZ
    cfg = config or launch_config(m, n, k, a.device, fnuz)
    if BLOCK % cfg.block_n:
        raise ValueError(f"{name}: block_n={cfg.block_n} must divide 128 (one weight-scale block per tile)")
    gluon_here = not fnuz and sixteen_byte_rows(a, w) and triton_env.hopper_gluon(a.device)
    if cfg.specialized and not (gluon_here and staging != "swizzled" and specialized_fits(cfg)):
        if config is not None:
            raise ValueError(
                f"{name}: {cfg} is the warp-specialized kernel: it needs an sm_90 GPU with triton's Gluon dialect, "
                f"e4m3fn operands with 16-byte aligned rows (TMA), 128 x 128 tiles without split-K, stages that "
                f"fit a program's shared memory, and staging other than 'swizzled'; got {fmt.name}, activation "
                f"row stride {a.stride(0)}, weight row stride {w.stride(0)}, staging={staging!r}, {a.device}"
            )
        # The heuristic's choice where it cannot run: the best of the other kernels.
        cfg = _heuristic(m, n, k, triton_env.sm_count(a.device), fnuz, gluon_here, specialized=False)
    gluon_runs = gluon_here and gluon_fits(cfg, shuffled)
    interleaved_runs = shuffled and gluon_runs
    if staging == "interleaved" and not interleaved_runs:
        raise ValueError(
            f"{name}: interleaved staging needs a preshuffled e4m3fn weight, an sm_90 GPU with triton's Gluon "
            f"dialect, 16-byte aligned operand rows and a tile its copies cover (block_m >= 4 x warps, at most 4 "
            f"warps along K); got shuffled={shuffled}, {fmt.name}, {cfg}, activation row stride {a.stride(0)}, "
            f"{a.device}"
        )
    overlapped = not cfg.specialized and (cfg.overlap or cfg.persistent)
    if overlapped and not (gluon_runs and staging != "swizzled" and overlap_fits(cfg, k)):
        if config is not None:
            raise ValueError(
                f"{name}: {cfg} overlaps the promotion with the next MMA, which only the Gluon kernels do: they "
                f"need an sm_90 GPU with triton's Gluon dialect, e4m3fn operands with 16-byte aligned rows, wgmma "
                f"tiles (block_m >= 64) without split-K, an even number of 128-wide K blocks (persistent: at least "
                f"stages - 1), and staging other than 'swizzled'; got K={k}, {fmt.name}, activation row stride "
                f"{a.stride(0)}, staging={staging!r}, {a.device}"
            )
        cfg = replace(cfg, overlap=False, persistent=False)  # the heuristic's choice, where it cannot run
        overlapped = False
    use_gluon = (shuffled and staging != "swizzled" and interleaved_runs) or overlapped
    stride_sm, stride_sk = (groups, 1) if scale_bytes == ScaleLayout.ROW_MAJOR else (1, m)
    if scale_bytes == ScaleLayout.COL_MAJOR_STRIDED:
        stride_sm, stride_sk = 1, m  # same bytes as COL_MAJOR
    if m == 0:
        return torch.empty((0, n), dtype=torch.bfloat16, device=a.device)
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    if cfg.split_k > 1:  # fp32 partials and per-tile arrival counters for the in-launch reduction
        partials = torch.empty((cfg.split_k, m, n), dtype=torch.float32, device=a.device)
        arrivals = torch.zeros(tiles, dtype=torch.int32, device=a.device)
    else:
        partials, arrivals = out, out  # never touched
    from .triton_kernel import block_scaled_gemm_kernel

    # e4m3fn goes in as fp8 (tensor cores read it directly); e4m3fnuz as bytes the kernel decodes.
    operand = torch.uint8 if fnuz else torch.float8_e4m3fn
    # The raw buffers and sizes the kernels take, in their order. KP is a shuffled weight's padded row
    # length; the Gluon kernels take a plain weight's row stride in its place (the Triton kernel takes it
    # as well, separately).
    kp = w.shape[1] if shuffled else w.stride(0)
    buffers = (a.view(operand), a_scale, w.view(operand), w_scale, out, partials, arrivals, m, n, k, w.shape[1])
    strides = (stride_sm, stride_sk, w_scale.stride(0), w_scale.stride(1), n, m * n)  # scales, out, partials
    if cfg.specialized:
        from .gluon_specialized import specialized_gemm_kernel

        # Persistent: one program per SM (its stages and staging tiles fill an SM's shared memory).
        programs = min(tiles, triton_env.sm_count(a.device)) if cfg.persistent else tiles
        a_desc, w_desc, out_desc = tma_descriptors(a.view(operand), w.view(operand), out, shuffled)
        # Column-major scales: a block's 128 row scales are contiguous, one TMA copy where the block stride
        # (M floats) is 16-byte aligned.
        scale_tma = stride_sm == 1 and m % 4 == 0 and a_scale.data_ptr() % 16 == 0
        s_desc = scale_descriptor(a_scale, m, groups) if scale_tma else a_desc
        specialized_gemm_kernel[(programs,)](
            a_desc, w_desc, out_desc, s_desc, a_scale, w_scale, out, m, n, k, *strides[:5],
            SHUFFLED=shuffled, STAGGER=cfg.stagger, GROUP_M=cfg.group_m, STAGES=cfg.num_stages,
            TMA_STORE=cfg.tma_store, SCALE_TMA=scale_tma, num_warps=4, maxnreg=168,
        )  # fmt: skip
        return out
    if cfg.persistent:
        from .gluon_persistent import persistent_gemm_kernel

        programs = min(tiles, triton_env.sm_count(a.device) * persistent_programs_per_sm(cfg))
        persistent_gemm_kernel[(programs,)](
            *buffers[:5], m, n, k, kp, a.stride(0), *strides[:5],
            **persistent_constants(cfg, shuffled), num_warps=cfg.num_warps,
        )  # fmt: skip
        return out
    if use_gluon:
        from .gluon_kernel import gluon_gemm_kernel

        if shuffled and config is None and _tuned(m, n, k, fnuz, a.device) is None:  # the heuristic's config
            cfg = interleaved_config(cfg, m, n, k, triton_env.sm_count(a.device))
        gluon_gemm_kernel[(tiles, cfg.split_k)](
            *buffers[:-1], kp, a.stride(0), *strides,
            **gluon_constants(cfg, k, shuffled), num_warps=cfg.num_warps,
        )  # fmt: skip
        return out
    # The kernel addresses a_scale's raw bytes (check_operands: a gap-free buffer).
    block_scaled_gemm_kernel[(tiles, cfg.split_k)](
        *buffers,
        a.stride(0),
        w.stride(0),
        *strides,
        SHUFFLED=shuffled,
        FNUZ=fnuz,
        EXACT_FP32_DOT=triton_env.interpreting(),
        **tile_constants(cfg),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out


# The compile-time tiling arguments the Triton kernel and the Gluon kernel share (the split of K, the
# staggered K start, the tile and the tile grouping): each is the LaunchConfig field of its name in lower case.
TILE_FIELDS = ("split_k", "stagger", "block_m", "block_n", "group_m")


def tile_constants(cfg: LaunchConfig) -> dict[str, int | bool]:
    """The kernels' tiling constexprs for `cfg` (`TILE_FIELDS`, upper-cased as the kernels name them)."""
    return {name.upper(): getattr(cfg, name) for name in TILE_FIELDS}


def gluon_constants(cfg: LaunchConfig, k: int, shuffled: bool = True) -> dict[str, int | bool]:
    """The compile-time arguments of the Gluon kernel for a launch config over K."""
    return dict(
        SHUFFLED=shuffled,
        OVERLAP=cfg.overlap and overlap_fits(cfg, k),
        **tile_constants(cfg),
        STAGES=cfg.num_stages,
        W_WARPS_N=min(cfg.num_warps, cfg.block_n // SHUFFLE_BAND),
    )


def persistent_constants(cfg: LaunchConfig, shuffled: bool) -> dict[str, int | bool]:
    """The compile-time arguments of the persistent Gluon kernel for a launch config."""
    constants = gluon_constants(cfg, 0, shuffled)
    for unused in ("OVERLAP", "SPLIT_K"):
        del constants[unused]
    return constants


def autotune(
    m: int, n: int, k: int, device: torch.device | str = "cuda", fmt: Fp8Format = E4M3FN, shuffled: bool = False
) -> tuple[LaunchConfig, dict[str, float]]:
    """Time candidate configurations for (M, N, K) on the current GPU, cache the fastest for this M
    bucket and return it with every candidate's median milliseconds. For benchmarks, never tests."""
    import triton.testing

    device = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randint(0, 0x70, (m, k), generator=gen, dtype=torch.uint8).to(device)
    w = torch.randint(0, 0x70, (n, k), generator=gen, dtype=torch.uint8).to(device)
    a_scale = torch.rand(m, k // BLOCK, generator=gen).to(device)
    w_scale = torch.rand(-(-n // BLOCK), k // BLOCK, generator=gen).to(device)
    dtype = fmt.dtype
    times: dict[str, float] = {}
    best: tuple[float, LaunchConfig] | None = None
    gluon = triton_env.hopper_gluon(device)
    for cfg in _candidates(m, n, k, triton_env.sm_count(device), fmt == E4M3FNUZ, gluon):
        try:
            ms = triton.testing.do_bench(
                lambda cfg=cfg: triton_block_scaled_mm(
                    a.view(dtype), a_scale, ScaleLayout.ROW_MAJOR, w.view(dtype), w_scale, k, fmt, shuffled, cfg
                )
            )
        except Exception:  # a config the compiler or the GPU rejects (shared memory) is recorded as nan
            times[str(cfg)] = float("nan")
            continue
        times[str(cfg)] = ms
        if best is None or ms < best[0]:
            best = (ms, cfg)
    if best is None:
        raise RuntimeError(f"autotune: no candidate configuration ran for M={m}, N={n}, K={k}: {times}")
    _TUNED[(_m_bucket(m), n, k, fmt == E4M3FNUZ, str(device))] = best[1]
    return best[1], times


def _candidates(m: int, n: int, k: int, sms: int, fnuz: bool, gluon: bool = False) -> list[LaunchConfig]:
    base = _heuristic(m, n, k, sms, fnuz, gluon)
    found = [base]
    if gluon and not fnuz:  # the Gluon kernels, where they can run
        for flag in ("overlap", "persistent"):
            cfg = LaunchConfig(128, 128, 8, 4, **{flag: True})
            if m >= 64 and overlap_fits(cfg, k) and cfg not in found:
                found.append(cfg)
        for stages in (4, 5):
            cfg = LaunchConfig(128, 128, 8, stages, persistent=True, specialized=True, tma_store=True)
            if m >= 64 and cfg not in found:
                found.append(cfg)
    shapes = [(16, 32), (16, 64), (16, 128), (32, 64), (64, 64), (64, 128), (128, 64), (128, 128), (256, 128)]
    for bm, bn in shapes:
        if bm > 2 * max(16, m):
            continue
        for warps, stages in ((4, 4), (8, 3), (4, 6), (4, 8)):
            if stages > 4 and (bm > 64 or fnuz):  # deep pipelines are for weight streams of fp8 operands
                continue
            if bm * bn >= 128 * 256 and stages > 3:
                continue
            tiles = -(-m // bm) * -(-n // bn)
            for split in (1, 2, 4, 8):
                if split > 1 and (tiles * split > 4 * sms or k // BLOCK // split < 4):
                    continue
                cfg = LaunchConfig(bm, bn, warps, stages, 8, split)
                if cfg not in found:
                    found.append(cfg)
    return found
