"""Single changes to a scenario that bisection tries, and the sentence that explains a culprit.

Two kinds of remedy, searched separately because a user acts on them differently:

- code fixes: what the serving engine's code would change - honour the direct-read flags, make one
  model-side fix (`BEHAVIOUR_FIXES`: a behaviour field set to the value that restores, per model
  family), or (to localise the fault) run one layer through the reference kernel;
- configuration workarounds: what a user can set tonight without touching code - disable a kernel the
  way ``VLLM_DISABLED_KERNELS`` does, so the next kernel in vLLM's priority list takes its layers, or,
  under an engine profile, give one of its declared environment variables or server arguments another
  allowed value (``VLLM_ROCM_USE_AITER=0``), which re-resolves the profile's rules.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from enum import Enum

from ..kernels import KERNELS, KernelChoice, kernel_class, kernel_names
from ..kernels.base import vllm_class_of
from ..kernels.choice import DENSE
from ..layouts import ConsumerOrders, ContractViolation, ScaleLayout, ViolationKind, WeightLayout
from ..scenarios import Scenario, SettingKind

KERNEL_TO_REFERENCE = "kernel-to-reference"
HONOUR_FLAGS = "honour-flags"
BEHAVIOUR = "behaviour"
DISABLE_KERNEL = "disable-kernel"
SET_SETTING = "set-setting"

DISABLED_KERNELS_ENV = "VLLM_DISABLED_KERNELS"

# A behaviour field's value: a bool, or one of the field's choices (`scenarios.behaviour.CHOICES`).
BehaviourValue = bool | str


@dataclass(frozen=True)
class BehaviourFix:
    """One model-side change bisection may try: set behaviour `field` to `value`, described as the change
    to the serving engine that does it. Offered for the model families in `archs` when the scenario's
    behaviour has another value - and, with `requires`, only while that bool field (or every field of a
    tuple) is on (the change means nothing without it); with `config_requires` (an MLAConfig attribute and value), only for layers
    whose config has that value (a change that cannot matter to the others is not tried on them)."""

    field: str
    value: BehaviourValue
    archs: tuple[str, ...]
    description: str
    requires: str | tuple[str, ...] | None = None
    config_requires: tuple[str, object] | None = None

    def offered(self, behaviour, cfg) -> bool:
        return (
            cfg.arch in self.archs
            and getattr(behaviour, self.field) != self.value
            and all(bool(getattr(behaviour, name)) for name in self._required)
            and (self.config_requires is None or getattr(cfg, self.config_requires[0]) == self.config_requires[1])
        )

    @property
    def _required(self) -> tuple[str, ...]:
        if self.requires is None:
            return ()
        return (self.requires,) if isinstance(self.requires, str) else tuple(self.requires)

    def change(self) -> Change:
        # A bool switched on carries no value: the change reads (and serializes) as it always has.
        return Change(BEHAVIOUR, self.field, self.description, value=None if self.value is True else self.value)


# Model-side fixes bisection may try, in the order it tries them (DeepSeek-V4's first two as before).
_STRIDED = (
    "presenting the fused producer's transposed scale with the strides of its bytes, (1, M) (aiter PR #4506, "
    "SGLang PR #31727)"
)
BEHAVIOUR_FIXES: tuple[BehaviourFix, ...] = (
    BehaviourFix("v4_ask_consumers", True, ("v4",), "asking wq_b and indexer.wq_b for their scale order"),
    BehaviourFix(
        "skip_model_shuffle_if_kernel_preshuffles",
        True,
        ("v4",),
        "skipping the model's own shuffle of weights the kernel preshuffled",
    ),
    BehaviourFix("v4_wo_a_is_bmm", True, ("v4",), "keeping is_bmm set on wo_a (DeepSeek-V4.1's ROCm model resets it)"),
    BehaviourFix(
        "v4_wqa_wkv_override",
        True,
        ("v4",),
        "calling fused_wqa_wkv through the model's override, the preshuffled GEMM for the weight the model "
        "shuffled itself (the override point vLLM PR #51430 removed and #51821 restored)",
        requires="v4_model_preshuffle",
    ),
    BehaviourFix(
        "load_order",
        "standard",
        ("v3",),
        "loading in the standard order (W_UK/W_UV derived before the kernels process the weights), "
        "not the remote-KV loader's",
    ),
    BehaviourFix(
        "v3_fused_transpose_scale",
        False,
        ("v3",),
        "the fused q_a_layernorm + quant producer writing ROW_MAJOR scales (transpose_scale=False)",
        requires="v3_fused_norm_quant",
    ),
    BehaviourFix(
        "v3_fused_transpose_scale",
        True,
        ("v3",),
        "the fused q_a_layernorm + quant producer writing COL_MAJOR scales (transpose_scale=True)",
        requires="v3_fused_norm_quant",
    ),
    BehaviourFix(
        "fused_scale_strided",
        True,
        ("v4",),
        _STRIDED,
        requires=("v4_fused_norm_quant", "v4_fused_transpose_scale"),
    ),
    BehaviourFix(
        "fused_scale_strided",
        True,
        ("v3",),
        _STRIDED,
        requires=("v3_fused_norm_quant", "v3_fused_transpose_scale"),
    ),
    BehaviourFix(
        "honours_rope_interleave",
        True,
        ("v3",),
        "pairing the RoPE dimensions as the checkpoint's rope_interleave says (is_neox_style = not rope_interleave)",
        config_requires=("rope_interleave", False),
    ),
)

# Kernels that are no fault to remove: the yardstick itself and unquantized weights.
_NOT_CANDIDATES = ("torch-reference", DENSE)


class RemedyKind(str, Enum):
    """How a user applies a set of changes."""

    CODE_FIX = "code-fix"  # a change to the serving engine's code
    WORKAROUND = "workaround"  # a setting a user can apply now (an environment variable, a server argument)


@dataclass(frozen=True)
class Change:
    """One change to a scenario: swap one layer's kernel to the reference, honour the direct-read flags,
    set one model-side behaviour field (``target``) to ``value``, disable one kernel (``setting`` then
    holds the vLLM class name that ``VLLM_DISABLED_KERNELS`` takes, when the kernel has one), or set one
    declared setting of an engine profile (``target`` the setting, ``value`` its new value, ``setting``
    how a user writes it)."""

    kind: str
    target: str
    description: str
    setting: str | None = None
    # The behaviour field's new value (None: True, a switched-on bool field) or the setting's new value.
    value: BehaviourValue | None = None

    @property
    def remedy(self) -> RemedyKind:
        return RemedyKind.WORKAROUND if self.kind in (DISABLE_KERNEL, SET_SETTING) else RemedyKind.CODE_FIX

    def apply(self, scenario: Scenario) -> Scenario:
        if self.kind == SET_SETTING:
            # Re-resolves the profile the scenario was resolved from: apply_all sets settings first.
            changed = scenario.with_settings({self.target: self.value})
            return replace(changed, name=f"{scenario.name}[{self.setting}]")
        if self.kind == KERNEL_TO_REFERENCE:
            return replace(
                scenario,
                name=f"{scenario.name}+{self.target}",
                overrides={**scenario.overrides, self.target: "torch-reference"},
            )
        if self.kind == HONOUR_FLAGS:
            options = {k: dict(v) for k, v in scenario.kernel_options.items()}
            options.setdefault(self.target, {})["honour_layer_flags"] = True
            return replace(scenario, name=f"{scenario.name}+honour-flags", kernel_options=options)
        if self.kind == DISABLE_KERNEL:
            return replace(
                scenario,
                name=f"{scenario.name}-{self.target}",
                disabled=tuple(dict.fromkeys((*scenario.disabled, self.target))),
            )
        value = True if self.value is None else self.value
        behaviour = replace(scenario.behaviour, **{self.target: value})
        suffix = self.target if value is True else f"{self.target}={value}"
        return replace(scenario, name=f"{scenario.name}+{suffix}", behaviour=behaviour)

    def to_dict(self) -> dict:
        """Plain data; ``value`` is written for a setting change and a behaviour change that has one."""
        out = {
            "kind": self.kind,
            "target": self.target,
            "description": self.description,
            "setting": self.setting,
            "remedy": self.remedy.value,
        }
        if self.value is not None:
            out["value"] = self.value
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Change:
        return cls(data["kind"], data["target"], data["description"], data.get("setting"), data.get("value"))


def apply_all(scenario: Scenario, changes) -> Scenario:
    """`scenario` with every change applied: setting changes first (each re-resolves the engine profile,
    which would drop a field change made before it), the rest in the order given."""
    changes = list(changes)
    for change in [c for c in changes if c.kind == SET_SETTING] + [c for c in changes if c.kind != SET_SETTING]:
        scenario = change.apply(scenario)
    return scenario


def describe(changes) -> str:
    """'a together with b' - the words of a change set."""
    return " together with ".join(c.description for c in changes)


def env_setting(changes) -> str | None:
    """What a user sets for a set of workaround changes: ``VLLM_DISABLED_KERNELS=A,B`` for kernel
    disables that all have vLLM class names, each setting change as written (``VLLM_ROCM_USE_AITER=0``,
    ``--fp8-gemm-backend triton``), joined by spaces; None when some change is no setting."""
    changes = list(changes)
    texts = [c.setting for c in changes if c.kind == SET_SETTING]
    names = [c.setting for c in changes if c.kind == DISABLE_KERNEL]
    if not changes or len(texts) + len(names) != len(changes) or None in names or None in texts:
        return None
    if names:
        texts.append(f"{DISABLED_KERNELS_ENV}={','.join(names)}")
    return " ".join(texts)


def _runners_as(kernel: str, used: set[str]) -> list[str]:
    """The kernels that ran in place of `kernel` (stand-ins such as triton-bpreshuffle for aiter-bpreshuffle)."""
    return sorted(name for name in used if name in kernel_names() and kernel_class(name).stands_in_for == kernel)


def vllm_class_name(kernel: str) -> str | None:
    """The vLLM class a kernel is (or wraps, or is one backend of), as VLLM_DISABLED_KERNELS names it."""
    return vllm_class_of(kernel)


def _disable_target(kernel: str) -> str:
    """The kernel whose disabling a user's setting amounts to: the kernel registered under the vLLM class
    `kernel` models (disabling it takes every backend of the class), else the kernel it stands in for."""
    setting = vllm_class_of(kernel)
    if setting is not None and setting in KERNELS:
        return KERNELS.canonical(setting)
    return kernel_class(kernel).stands_in_for or kernel


def _honours_flags_by_default(kernel: str) -> bool | None:
    """The default of a kernel's ``honour_layer_flags`` option, or None when it has none."""
    parameter = inspect.signature(kernel_class(kernel)).parameters.get("honour_layer_flags")
    return None if parameter is None else parameter.default


def candidate_changes(scenario: Scenario, kernels: dict[str, KernelChoice], cfg) -> list[Change]:
    """Every single code change that could matter for a run with these per-layer kernels."""
    changes = []
    for layer, choice in kernels.items():
        kernel = choice.kernel
        if kernel not in _NOT_CANDIDATES:
            changes.append(
                Change(KERNEL_TO_REFERENCE, layer, f"running {layer} through torch-reference instead of {kernel}")
            )
    used = {choice.kernel for choice in kernels.values()}
    ignoring = {kernel: options for kernel, options in scenario.kernel_options.items()}
    # A kernel that ignores the flags unless told (aiter-triton-bpreshuffle: vLLM 0.33 honours only is_bmm)
    # is a candidate too when it ran with its default.
    for kernel in sorted(used - set(ignoring)):
        if kernel in kernel_names() and _honours_flags_by_default(kernel) is False:
            ignoring[kernel] = {"honour_layer_flags": False}
    for kernel, options in ignoring.items():
        if options.get("honour_layer_flags") is False:
            flags = "skip_weight_relayout" if cfg.arch == "v3" else "is_bmm / skip_weight_relayout"
            # Stand-ins (triton-bpreshuffle for aiter-bpreshuffle) take the options of the kernel they
            # reproduce; name the one that actually ran.
            runners = _runners_as(kernel, used)
            where = f"{runners[0]} (as {kernel})" if runners and kernel not in used else kernel
            changes.append(Change(HONOUR_FLAGS, kernel, f"honouring {flags} in {where}"))
    changes.extend(fix.change() for fix in BEHAVIOUR_FIXES if fix.offered(scenario.behaviour, cfg))
    return changes


def candidate_workarounds(scenario: Scenario, kernels: dict[str, KernelChoice]) -> list[Change]:
    """One kernel disable per kernel that took a layer in this run (what VLLM_DISABLED_KERNELS does),
    then, for a resolved engine profile, every declared environment variable or server argument set to
    another allowed value that changes the resolved scenario (`setting_changes`).

    A stand-in is disabled through the kernel it stands in for, a backend of a vLLM class through the
    kernel registered under the class name - the name a vLLM user would write. An engine profile of
    another engine than vLLM gets no kernel disables: VLLM_DISABLED_KERNELS is vLLM's.
    """
    changes = [] if _engine_without_kernel_disables(scenario) else _kernel_disables(scenario, kernels)
    return changes + setting_changes(scenario)


def _engine_without_kernel_disables(scenario: Scenario) -> bool:
    engine = scenario.resolution.engine if scenario.resolution is not None else scenario.engine
    return engine is not None and engine.name.lower() != "vllm"


def setting_changes(scenario: Scenario) -> list[Change]:
    """For a resolved engine profile: each declared env or arg setting set to each other allowed value,
    kept when the re-resolved scenario differs in what runs (kernel choice fields or model behaviour).
    Facts (the HIP version) are the machine's, not a user's to change, and are never proposed."""
    if scenario.resolution is None or scenario.origin is None:
        return []
    current = scenario.setting_values()
    changes = []
    for name, declared in scenario.settings.items():
        if not declared.kind.settable:
            continue
        for value in declared.values:
            if value == current[name]:
                continue
            try:
                changed = scenario.with_settings({name: value})
            except ValueError:  # a setting change on a scenario changed after it was resolved
                return []
            if changed.effective_fields() == scenario.effective_fields():
                continue
            text = declared.text(value)
            what = {
                SettingKind.ENV: "environment variable",
                SettingKind.CODE: "a one-line edit of the engine's source",
            }.get(declared.kind, "server argument")
            changes.append(Change(SET_SETTING, name, f"setting {text} ({what})", text, value))
    return changes


def _kernel_disables(scenario: Scenario, kernels: dict[str, KernelChoice]) -> list[Change]:
    changes = []
    for ran in dict.fromkeys(choice.kernel for choice in kernels.values()):
        if ran in _NOT_CANDIDATES or ran not in kernel_names():
            continue
        target = _disable_target(ran)
        if target in scenario.disabled or any(c.target == target for c in changes):
            continue
        setting = vllm_class_name(target)
        as_what = f" (as {target})" if target != ran else ""
        env = f" ({DISABLED_KERNELS_ENV}={setting})" if setting else ""
        changes.append(Change(DISABLE_KERNEL, target, f"disabling {ran}{as_what}{env}", setting))
    return changes


def cause(violation: ContractViolation) -> str:
    """What went wrong, in words, from a broken contract."""
    found, expected = violation.found, violation.expected
    if violation.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ and isinstance(found, WeightLayout):
        shuffler = found.shufflers[-1].split(".")[0] if found.shufflers else "a kernel"
        return f"{shuffler} re-laid out the weight that {violation.consumer} reads directly"
    if violation.kind is ViolationKind.SCALE_ORDER and isinstance(found, ScaleLayout):
        return f"{violation.consumer} reads {expected.name} activation-scale bytes written {found.name}"
    if violation.kind is ViolationKind.DOUBLE_SHUFFLE and isinstance(found, WeightLayout):
        return f"the weight was shuffled more than once ({found.describe()}) and {violation.consumer} un-shuffles once"
    if violation.kind is ViolationKind.CONSUMERS_DISAGREE and isinstance(found, ConsumerOrders):
        wanted = ", ".join(f"{name} reads {layout.name}" for name, layout in found.orders)
        return f"one pre-quantized q-lora feeds consumers that disagree on its scale order ({wanted})"
    return str(violation)


def causes(violations: list[ContractViolation]) -> str:
    """The distinct causes of the effective violations, joined; a generic phrase without any."""
    return "; ".join(dict.fromkeys(cause(v) for v in violations if v.effective)) or "its output diverges"


def explain(layer: str, tp: int, mode: str, violations: list[ContractViolation], changes: list[Change]) -> str:
    """'kv_b_proj at TP4: ... ; honouring skip_weight_relayout in aiter-bpreshuffle restores decode'."""
    return f"{layer} at TP{tp}: {causes(violations)}; {describe(changes)} restores {mode}"
