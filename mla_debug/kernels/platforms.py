"""Hardware platforms: architecture, compute-unit count, FP8 format and default quant flavor.

The (gfx, cu_num) pair is the key of aiter's tuned-GEMM tables, and it is per CARD, not per
architecture: an MI300X and an MI308X are both gfx942 but report 304 and 80 compute units, so a table
tuned on one never matches the other (docs/semantics.md §7).

Two presets model hardware whose every figure we could not read from a public specification, and say
what is assumed:

- ``gfx1250``: the AMD architecture vLLM 0.33 gives its own aiter paths (``platforms/rocm.py``
  ``on_gfx1250``; ``get_cdna_version`` calls it CDNA 5). Its fp8 is OCP e4m3fn (vLLM's ``is_fp8_fnuz`` is
  true only on gfx94x). The compute-unit count 256 is the ``cu_num`` every gfx1250 row of aiter's tuned
  CSVs carries (aiter e4048607), not a published figure: a card reporting another count would not match
  those rows, exactly as an MI300X misses the MI308X rows.
- ``b200``: NVIDIA Blackwell, compute capability 10.0 (``sm100``), 148 SMs, e4m3fn. DeepGEMM's packed
  ue8m0 scale format is the Blackwell one (vLLM 0.33 ``utils/deep_gemm.py`` ``DeepGemmQuantScaleFMT``).

`detect_platform()` reads the current GPU's properties through torch; this module reads no
environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..numerics import E4M3FN, E4M3FNUZ, Fp8Format, fp8_format


@dataclass(frozen=True)
class Platform:
    """One serving platform. ``arch`` is the gfx name on AMD, ``sm90``-style on NVIDIA, ``cpu`` otherwise."""

    name: str
    vendor: str
    arch: str
    cu_num: int
    fp8: Fp8Format
    description: str

    @property
    def is_rocm(self) -> bool:
        return self.vendor == "amd"

    @property
    def is_cuda(self) -> bool:
        return self.vendor == "nvidia"

    def with_fp8(self, fmt: Fp8Format | str) -> Platform:
        """The same platform computing in another fp8 format (e.g. older aiter picking e4m3fn on gfx942
        from GPU_ARCHS)."""
        fmt = fp8_format(fmt)
        return replace(self, fp8=fmt, name=f"{self.name}[{fmt.name}]")

    def __str__(self) -> str:
        return self.name


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform("cpu", "cpu", "cpu", 0, E4M3FN, "CPU emulation only"),
        Platform(
            "xeon-amx",
            "cpu",
            "cpu",
            0,
            E4M3FN,
            "x86 CPU with AMX-BF16/INT8 tiles (Intel Sapphire Rapids and later), served by vLLM's CPU build",
        ),
        Platform("mi300x", "amd", "gfx942", 304, E4M3FNUZ, "AMD Instinct MI300X (gfx942, 304 CUs)"),
        Platform("mi308x", "amd", "gfx942", 80, E4M3FNUZ, "AMD Instinct MI308X (gfx942, 80 CUs)"),
        Platform("mi325x", "amd", "gfx942", 304, E4M3FNUZ, "AMD Instinct MI325X (gfx942, 304 CUs)"),
        Platform("mi355x", "amd", "gfx950", 256, E4M3FN, "AMD Instinct MI355X (gfx950, 256 CUs)"),
        Platform(
            "gfx1250",
            "amd",
            "gfx1250",
            256,
            E4M3FN,
            "AMD gfx1250 (CDNA 5; 256 CUs assumed: the cu_num of aiter's gfx1250 tuned rows)",
        ),
        Platform("h200", "nvidia", "sm90", 132, E4M3FN, "NVIDIA H200 (Hopper, sm90, 132 SMs)"),
        Platform("b200", "nvidia", "sm100", 148, E4M3FN, "NVIDIA B200 (Blackwell, sm100, 148 SMs)"),
    )
}


def platform(spec: str | Platform) -> Platform:
    """A platform preset by name ("mi355x", "h200", ...), or a Platform passed through."""
    if isinstance(spec, Platform):
        return spec
    if isinstance(spec, str) and spec.strip().lower() in PLATFORMS:
        return PLATFORMS[spec.strip().lower()]
    raise ValueError(f"unknown platform {spec!r}; valid: {', '.join(PLATFORMS)}")


def platform_names() -> list[str]:
    return list(PLATFORMS)


def detect_platform() -> Platform:
    """The platform of the current torch device: a preset when one matches, else a described custom one."""
    import torch

    if not torch.cuda.is_available():
        return PLATFORMS["cpu"]
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if getattr(torch.version, "hip", None):
        gfx = str(getattr(props, "gcnArchName", "gfx?")).split(":")[0]
        cu_num = int(props.multi_processor_count)
        for preset in PLATFORMS.values():
            if preset.arch == gfx and preset.cu_num == cu_num:
                return preset
        fmt = E4M3FNUZ if gfx == "gfx942" else E4M3FN
        return Platform(f"{gfx}-{cu_num}cu", "amd", gfx, cu_num, fmt, f"{props.name} ({gfx}, {cu_num} CUs)")
    arch = f"sm{props.major}{props.minor}"
    sms = int(props.multi_processor_count)
    for preset in PLATFORMS.values():
        if preset.arch == arch and preset.cu_num == sms:
            return preset
    return Platform(f"{arch}-{sms}sm", "nvidia", arch, sms, E4M3FN, f"{props.name} ({arch}, {sms} SMs)")
