"""An executor that runs one layer many times, reusing what cannot change: loaded linears, GEMM results.

Bisection runs the same layer under dozens of scenarios that differ from each other in one kernel
choice, one kernel option or one model-side behaviour. Rebuilding every layer from the checkpoint for
each of them repeats work whose result cannot change:

- a linear's loaded state (its shard, the kernel chosen for it, that kernel's load-time re-layout, and
  the decoded weight the kernel reads) depends only on the shard, the kernel class and the kernel's
  options - and, for the linears the model re-lays out itself or flags differently under some
  behaviour (`parallel.build.load_behaviour`), on the model behaviour. `LinearKey` is exactly that,
  and a loaded linear is shared by every run with that key;
- a GEMM's result depends only on the loaded linear and the bytes of its input: `ReusedLinear`
  remembers results by a digest of the input's bytes, layout and metadata, so the steps before the
  first one a change touches cost a dictionary lookup, not a GEMM.

Each run also reports which linears every step read (`CachedRun.accessed`, from the rank layers'
watched linears, `model.program.RankLinears`); bisection uses it to skip
trials whose changes provably touch nothing at or before the step that diverges.

Nothing here changes a number: a reused result is bitwise the one a fresh build would compute (the
tests compare both ways of running step by step).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import torch

from .._memory import return_freed_memory
from ..kernels import KernelChoice, KernelPolicy, TunedTable
from ..model.linear import QuantizedLinear
from ..model.records import StepRecord
from ..numerics import E4M3FN, E4M3FNUZ
from ..scenarios import Scenario
from ..scenarios.behaviour import ModelBehaviour
from .build import LayerBuilder, load_behaviour
from .gather import gather_step
from .hooks import hook_table
from .layer_run import LayerRun, assemble_run
from .observe import step_observers
from .patch import Patch
from .run import MODES, check_inputs
from .sharding import REPLICATED, full_weight, linear_specs, shard
from .simulated import run_lockstep

# Results kept per linear: a bisection feeds each linear a few dozen distinct inputs at most; the cap
# only bounds memory on very long searches (an evicted result is recomputed, never wrong).
MAX_RESULTS_PER_LINEAR = 256

DENSE = "dense (unquantized)"


def _feed(h, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        meta = (str(value.dtype), tuple(value.shape), tuple(value.stride()), value.device.type)
        h.update(repr(meta).encode())
        data = value.detach().contiguous()
        if data.numel():
            h.update(memoryview(data.reshape(-1).view(torch.uint8).cpu().numpy()))
    elif is_dataclass(value) and not isinstance(value, type):
        h.update(type(value).__qualname__.encode())
        for f in fields(value):
            h.update(f.name.encode())
            _feed(h, getattr(value, f.name))
    else:
        h.update(repr(value).encode())
        h.update(b"\0")


def fingerprint(value: Any) -> bytes:
    """A 128-bit digest of a tensor's bytes, dtype, shape and strides, or of every field of a dataclass
    such as QuantizedActivation (data, scale buffer, declared layout, format, producer, ...).

    Strides are part of it because raw-pointer readers see a buffer's memory order, not its values.
    """
    h = hashlib.blake2b(digest_size=16)
    _feed(h, value)
    return h.digest()


def kernel_config(kernel) -> tuple:
    """What makes two kernel instances compute the same: the class and every configured attribute."""
    return (kernel.name, tuple(sorted((name, repr(value)) for name, value in vars(kernel).items())))


@dataclass(frozen=True)
class LinearKey:
    """Everything a loaded linear's bytes and behaviour depend on."""

    tp: int
    name: str
    rank: int | None  # None: replicated, one linear for every rank
    kernel: tuple  # kernel_config of the kernel chosen, or (DENSE,)
    model_side: ModelBehaviour | None  # set for linears whose load depends on it (`load_behaviour`)


class ReusedLinear(QuantizedLinear):
    """A QuantizedLinear that remembers its GEMM results by input content, and its direct reads.

    Shared by every run whose LinearKey matches, so a result is reused across scenarios, modes and
    bisection trials. An entry is used only while the weight object and the version counters of the
    weight, its scale and the cached output are the ones it was made with.
    """

    def __init__(self, name, weight, **flags) -> None:
        super().__init__(name, weight, **flags)
        self._results: OrderedDict[tuple, tuple] = OrderedDict()
        self._direct: dict[str, tuple] = {}
        self.reused = 0

    def _weight_state(self) -> tuple:
        weight = self.block.weight
        return (weight, weight.data._version, weight.scale._version, self.block.kernel)

    def run(self, x, kernel=None):
        key = (fingerprint(x), kernel)
        state = self._weight_state()
        entry = self._results.get(key)
        if entry is not None:
            old_state, call, version = entry
            if _same_state(old_state, state) and call.output._version == version:
                self._results.move_to_end(key)
                self.reused += 1
                return call
        call = super().run(x, kernel)
        self._results[key] = (state, call, call.output._version)
        if len(self._results) > MAX_RESULTS_PER_LINEAR:
            self._results.popitem(last=False)
        return call

    def read_direct(self, reader: str, before_kernel_load: bool = False):
        state = self._weight_state()
        key = (reader, before_kernel_load)
        entry = self._direct.get(key)
        if entry is not None:
            old_state, result, version = entry
            if _same_state(old_state, state) and result[0]._version == version:
                return result
        result = super().read_direct(reader, before_kernel_load)
        self._direct[key] = (state, result, result[0]._version)
        return result


def _same_state(a: tuple, b: tuple) -> bool:
    return a[0] is b[0] and a[1] == b[1] and a[2] == b[2] and a[3] is b[3]


class _Accesses:
    """The linear names read since the last `take()`."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def note(self, name: str) -> None:
        self.names.add(name)

    def take(self) -> frozenset[str]:
        names, self.names = frozenset(self.names), set()
        return names


@dataclass
class CachedRun:
    """A LayerRun plus, per step in order, the linears that step read (on any rank), and the step
    program of every mode on these rank layers (see `program`)."""

    run: LayerRun
    accessed: list[frozenset[str]]
    programs: dict[str, tuple]


def program(layer, mode: str) -> tuple:
    """What a rank layer runs in `mode`: step names, collectives and the step functions themselves. Two
    modes with one program compute the same thing: the mode reaches a layer only through `steps(mode)`."""
    return tuple((step.name, step.collective, getattr(step.run, "__func__", step.run)) for step in layer.steps(mode))


class CachedExecutor:
    """Builds and runs one layer (config, checkpoint, platform, dtype) under many scenarios and TP sizes,
    sharing loaded linears by `LinearKey` and GEMM results by input content.

    Loaded linears (their re-laid bytes, decoded weights and results) are the bulk of the memory, so
    only those of the most recent TP size are kept: a triage finishes one TP size (its runs and
    bisections) before the next, and going back to a TP size loads its linears again.
    """

    def __init__(self, cfg, ckpt, platform, dtype: torch.dtype = torch.bfloat16) -> None:
        self.cfg, self.ckpt, self.platform, self.dtype = cfg, ckpt, platform, dtype
        self._full: dict[str, object] = {}  # unsharded weights: independent of TP size and scenario
        self._linears: dict[LinearKey, object] = {}
        self._weights: dict[LinearKey, object] = {}
        self._tuned: dict[object, TunedTable] = {}
        self._policies: dict[str, KernelPolicy] = {}
        self._selections: dict[tuple, dict] = {}
        self._focus: int | None = None

    # -- selection without building ------------------------------------------------------------------
    def tuned(self, scen: Scenario) -> TunedTable:
        """The scenario's tuned table, read once per triage (not once per trial)."""
        key = scen.resolve(self.platform).tuned_path
        if key not in self._tuned:
            self._tuned[key] = TunedTable.from_csv(key) if key else TunedTable.default()
        return self._tuned[key]

    def policy(self, scen: Scenario) -> KernelPolicy:
        scen = scen.resolve(self.platform)
        key = _scenario_key(scen)
        if key not in self._policies:
            self._policies[key] = scen.policy(self.platform, tuned=self.tuned(scen))
        return self._policies[key]

    def selection(self, scen: Scenario, tp: int) -> dict[str, tuple[tuple, ModelBehaviour | None, KernelChoice]]:
        """Per linear: (kernel config, model-side behaviour it depends on, the KernelChoice), as a load
        would choose them, without loading anything. Raises ValueError when no kernel can take a linear.
        An engine profile is resolved on the cache's platform first, like every method here does."""
        scen = scen.resolve(self.platform)
        key = (_scenario_key(scen), tp)
        if key in self._selections:
            return self._selections[key]
        policy = self.policy(scen)
        out = {}
        for spec in linear_specs(self.cfg):
            if spec.name not in self._full:
                self._full[spec.name] = full_weight(self.ckpt, spec, self.dtype)
            weight = shard(self._full[spec.name], spec, tp, 0)
            model_side = load_behaviour(self.cfg, spec, scen.behaviour, self.platform)
            if isinstance(weight, torch.Tensor):
                out[spec.name] = ((DENSE,), model_side, KernelChoice.dense())
                continue
            # QuantizedLinear.load converts e4m3fn weights for an e4m3fnuz platform before selecting.
            fmt = self.platform.fp8 if weight.fmt is E4M3FN and self.platform.fp8 is E4M3FNUZ else weight.fmt
            kernel, choice = policy.choose(spec.name, weight.n, weight.k, self.platform, fmt=fmt)
            out[spec.name] = (kernel_config(kernel), model_side, choice)
        self._selections[key] = out
        return out

    def effective_key(self, scen: Scenario, tp: int) -> tuple:
        """What a run's numbers depend on besides TP size and mode: every linear's kernel configuration
        and the model behaviour. Two scenarios with one key give bitwise identical runs."""
        scen = scen.resolve(self.platform)
        selection = self.selection(scen, tp)
        return (tp, scen.behaviour, tuple((name, kernel) for name, (kernel, _, _) in selection.items()))

    def linear_keys(self, scen: Scenario, tp: int) -> dict[str, tuple]:
        """Per linear name, the part of its LinearKey that a scenario decides (kernel, model side)."""
        return {name: (kernel, model_side) for name, (kernel, model_side, _) in self.selection(scen, tp).items()}

    # -- running -------------------------------------------------------------------------------------
    @property
    def loaded_tp_sizes(self) -> frozenset[int]:
        """The TP sizes whose linears are loaded now (at most one: see the class docstring)."""
        return frozenset(key.tp for key in self._linears)

    def focus(self, tp: int) -> None:
        """Keep the loaded linears of `tp` only (see the class docstring), and give the memory of the
        others back to the operating system: without the trim, glibc keeps most of it resident."""
        if self._focus == tp:
            return
        self._focus = tp
        for key in [key for key in self._linears if key.tp != tp]:
            del self._linears[key], self._weights[key]
        return_freed_memory()

    def run(
        self,
        scen: Scenario,
        tp: int,
        mode: str,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        until: Callable[[StepRecord], bool] | None = None,
        patch: Patch | None = None,
    ) -> CachedRun:
        """The layer under `scen` at `tp` in `mode`, gathered like `MLALayer.run`, with step accesses.

        `until(record)` is asked after each gathered step; True ends the run there (the run then holds
        the steps up to and including that one) - a bisection trial needs no step past the first that
        diverges. `patch` substitutes a reference run's outputs at some steps (`parallel.patch`).
        """
        self.cfg.check_tp(tp)
        positions = check_inputs(self.cfg, self.ckpt, hidden, positions, mode)
        table = hook_table(None, patch, tp)
        self.focus(tp)
        selection = self.selection(scen, tp)
        keys = self.linear_keys(scen, tp)
        ranks = self._builder(scen, tp, keys).rank_layers()
        self._check_shared_untouched(tp)
        sink = _Accesses()
        for layer in ranks:
            layer.linears.watch(sink.note)
        records, per_rank, accessed = {}, {}, []
        device = self.ckpt.tensors[next(iter(self.ckpt.tensors))].device
        steps = run_lockstep(ranks, hidden.to(device), positions.to(device), mode, table, step_observers("simulated"))
        for name, step_records in steps:
            per_rank[name] = step_records
            records[name] = gather_step(step_records)
            accessed.append(sink.take())
            if until is not None and until(records[name]):
                break
        for layer in ranks:
            layer.linears.watch(None)  # the run is over: what follows reads no step's dependencies
        linears = list(ranks[0].linears.items())
        run = assemble_run(
            self.cfg,
            tp,
            mode,
            self.platform.name,
            scen.name,
            "simulated",
            records,
            per_rank,
            kernels={name: selection[name][2] for name, _ in linears},
            events={
                name: _events(linear, selection[name][2]) + ranks[0].load_events.get(name, [])
                for name, linear in linears
            },
        )
        return CachedRun(run, accessed, {m: program(ranks[0], m) for m in MODES})

    def programs(self, scen: Scenario, tp: int) -> dict[str, tuple]:
        """The step program of every mode for `scen` at `tp` (builds the rank layers, runs nothing)."""
        ranks = self._builder(scen, tp, self.linear_keys(scen, tp)).rank_layers()
        return {m: program(ranks[0], m) for m in MODES}

    def _builder(self, scen: Scenario, tp: int, keys: dict[str, tuple]) -> LayerBuilder:
        """A builder whose linears come from this cache (loaded on first use, keyed by `LinearKey`)."""

        def source(builder: LayerBuilder, spec, rank: int):
            key = LinearKey(tp, spec.name, None if spec.parallel == REPLICATED else rank, *keys[spec.name])
            linear = self._linears.get(key)
            if linear is None:
                linear = builder.load_linear(spec, builder.shard_of(spec, rank))
                self._linears[key] = linear
                self._weights[key] = getattr(getattr(linear, "block", None), "weight", None)
            return linear

        return LayerBuilder(
            self.cfg,
            self.ckpt,
            tp,
            self.platform,
            scen,
            self.dtype,
            self.policy(scen),
            full_weights=self._full,
            linear_class=ReusedLinear,
            linear_source=source,
        )

    def _check_shared_untouched(self, tp: int) -> None:
        """The model-side preparation may re-lay out only the linears keyed by model behaviour; a shared
        linear changed behind the cache's back would leak into other scenarios' runs."""
        for key, linear in self._linears.items():
            if key.tp != tp or key.model_side is not None:
                continue
            block = getattr(linear, "block", None)
            if getattr(linear, "direct_kernel", None) is not None or (
                block is not None and block.weight is not self._weights[key]
            ):
                raise RuntimeError(
                    f"{key.name}: the model re-laid out a linear that runs of other model behaviours share; "
                    "it must be keyed by the behaviour (LinearKey.model_side)"
                )

    def release(self) -> None:
        """Forget every loaded linear and result."""
        self._linears.clear()
        self._weights.clear()
        self._selections.clear()
        self._focus = None


def _events(linear, choice: KernelChoice) -> list[str]:
    """The linear's load history with the kernel-choice line in this scenario's words: a shared linear
    was loaded once, maybe under another scenario whose reason text differs (same kernel, same bytes)."""
    block = getattr(linear, "block", None)
    if block is None:
        return list(linear.events)
    loaded = f"kernel {block.kernel.name}: {block.kernel_reason}"
    return [f"kernel {block.kernel.name}: {choice}" if event == loaded else event for event in linear.events]


def _scenario_key(scen: Scenario) -> str:
    import json

    return json.dumps(scen.to_dict(), sort_keys=True, default=str)
