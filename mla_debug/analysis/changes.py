"""Single changes to a scenario that bisection tries, and the sentence that explains a culprit."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..kernels import kernel_class, kernel_names
from ..layouts import ContractViolation, ViolationKind
from ..scenarios import Scenario

KERNEL_TO_REFERENCE = "kernel-to-reference"
HONOUR_FLAGS = "honour-flags"
BEHAVIOUR = "behaviour"

# Model-side fixes bisection may try, with how each reads in a sentence.
BEHAVIOUR_FIXES = {
    "v4_ask_consumers": "asking wq_b and indexer.wq_b for their scale order",
    "skip_model_shuffle_if_kernel_preshuffles": "skipping the model's own shuffle of weights the kernel preshuffled",
}


@dataclass(frozen=True)
class Change:
    """One change to a scenario: swap one layer's kernel to the reference, honour the direct-read flags,
    or switch on one model-side fix."""

    kind: str
    target: str
    description: str

    def apply(self, scenario: Scenario) -> Scenario:
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
        behaviour = replace(scenario.behaviour, **{self.target: True})
        return replace(scenario, name=f"{scenario.name}+{self.target}", behaviour=behaviour)


def candidate_changes(scenario: Scenario, kernels: dict[str, str], cfg) -> list[Change]:
    """Every single change that could matter for a run with these per-layer kernels."""
    changes = []
    for layer, description in kernels.items():
        kernel = description.split(":")[0]
        if kernel not in ("torch-reference", "dense (unquantized)"):
            changes.append(
                Change(KERNEL_TO_REFERENCE, layer, f"running {layer} through torch-reference instead of {kernel}")
            )
    used = {description.split(":")[0] for description in kernels.values()}
    for kernel, options in scenario.kernel_options.items():
        if options.get("honour_layer_flags") is False:
            flags = "skip_weight_relayout" if cfg.arch == "v3" else "is_bmm / skip_weight_relayout"
            # Stand-ins (triton-bpreshuffle for aiter-bpreshuffle) take the options of the kernel they
            # reproduce; name the one that actually ran.
            runners = sorted(
                name for name in used if name in kernel_names() and kernel_class(name).stands_in_for == kernel
            )
            where = f"{runners[0]} (as {kernel})" if runners and kernel not in used else kernel
            changes.append(Change(HONOUR_FLAGS, kernel, f"honouring {flags} in {where}"))
    if cfg.arch == "v4":
        for field_name, sentence in BEHAVIOUR_FIXES.items():
            if not getattr(scenario.behaviour, field_name):
                changes.append(Change(BEHAVIOUR, field_name, sentence))
    return changes


def cause(violation: ContractViolation) -> str:
    """What went wrong, in words, from a broken contract."""
    if violation.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ:
        shufflers = violation.found.split(" by ")[-1] if " by " in violation.found else "a kernel"
        return f"{shufflers.split('.')[0]} re-laid out the weight that {violation.consumer} reads directly"
    if violation.kind is ViolationKind.SCALE_ORDER:
        return f"{violation.consumer} reads {violation.expected} activation-scale bytes written {violation.found}"
    if violation.kind is ViolationKind.DOUBLE_SHUFFLE:
        return f"the weight was shuffled more than once ({violation.found}) and {violation.consumer} un-shuffles once"
    if violation.kind is ViolationKind.CONSUMERS_DISAGREE:
        return f"one pre-quantized q-lora feeds consumers that disagree on its scale order ({violation.found})"
    return violation.message


def explain(layer: str, tp: int, mode: str, violations: list[ContractViolation], changes: list[Change]) -> str:
    """'kv_b_proj at TP4: ... ; honouring skip_weight_relayout in aiter-bpreshuffle restores decode'."""
    causes = "; ".join(dict.fromkeys(cause(v) for v in violations if v.effective)) or "its output diverges"
    fix = " together with ".join(c.description for c in changes)
    return f"{layer} at TP{tp}: {causes}; {fix} restores {mode}"
