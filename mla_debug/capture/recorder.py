"""`md.capture(model, out, layer=...)`: record one MLA layer of any PyTorch module tree, on this rank.

On entering, the capture finds the layer's attention module (``...layers.<layer>.<attention_attr>``),
picks the name map that knows its class (or the one given), takes every mapped weight and derived
weight as the engine stores it (after its loading: shuffles, transposes and flags included), and hooks
the attention module and its mapped submodules. Weights are held, not copied: their bytes are read when
the folder is written, at the end of the block (an engine does not change them while serving; one that
reloads weights inside the block would be captured with the new ones). Activations are copied when
their op runs, since engines reuse those buffers. Inside the block the model runs as usual; the
hooks copy the inputs and outputs of the `call`-th call of that attention module (0: the first), keeping
only the chosen token rows, and `record(name, tensor)` adds what hooks cannot see (an activation scale
an engine computes inside a fused op). On leaving without an error, the rank's folder is written under
`out` (never over an existing one) and `path` names it.

    with md.capture(model, "captures/tp1", layer=3, tokens=range(8)) as cap:
        model(input_ids)
    cap.path   # captures/tp1/rank0-of-1

Activations are stored as (rows, features): the rows of the op's flattened leading dims (batch x
sequence) that `tokens` selects, the features of the rank's shard; the op's own shape and strides go
into the tensor's attrs. Weights, derived weights and activation scales are kept whole, byte for byte.

The keys the kept rows attended to beyond themselves - the call's rows `tokens` left out, and the rows
of the layer's earlier calls inside the block (a decode call's KV cache) - are kept as the layer-input
rows ``context.input`` with their positions (capture.context); the manifest says the call's mode (from
the positions when `mode` is not given) and every key position. To capture a decode call, enter the
block before the prompt's call and pass `call`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..model import MLAConfig
from . import canonical as canon
from .context import CONTEXT_INPUT, CONTEXT_POSITIONS, ContextRows, inferred_mode, key_positions, rows_by_position
from .names import LINEAR_TENSORS, NameMap, resolve_map
from .names import builtin_maps as _builtin_maps
from .names.name_map import argument_value
from .roles import Shard, TensorRole
from .store import rank_destination, write_rank
from .tensor_bytes import exact_copy
from .tensor_facts import flags, installed_versions, local_tensor, module_facts, running_version
from .types import AttrValue, CapturedTensor, CaptureManifest, EngineInfo, RankCapture, Unrecorded, UnrecordedReason

# Activation scales are one value per group of this many features (docs/semantics.md §3).
GROUP_SIZE = 128
_ACTIVE: list[LayerCapture] = []


def _first_tensor(value: Any) -> Any:
    """Modules return tensors, or tuples whose first item is the output (vLLM's (output, bias))."""
    if isinstance(value, (tuple, list)) and value:
        return value[0]
    return value


def _find_attention(model: torch.nn.Module, layer: int, names: NameMap | dict | str | None):
    """(path, module, map) of layer `layer`'s attention in `model`."""
    if names is None:
        classes = {c for m in _builtin_maps().values() for c in m.attention_classes}
        if type(model).__name__ in classes:
            return "", model, resolve_map(None, type(model).__name__)
        pattern = re.compile(rf"(?:^|.*\.)layers\.{layer}\.[^.]+$")
        found = [(p, m) for p, m in model.named_modules() if pattern.match(p) and type(m).__name__ in classes]
        if not found:
            raise ValueError(
                f"capture: no module at '...layers.{layer}.<attention>' of a known attention class {sorted(classes)} "
                f"in {type(model).__name__}; pass names=<map key or dict> (see mla_debug.capture.user_map)"
            )
        path, module = min(found, key=lambda item: len(item[0]))
        return path, module, resolve_map(None, type(module).__name__)
    name_map = resolve_map(names)
    pattern = re.compile(rf"(?:^|.*\.)layers\.{layer}\.{re.escape(name_map.attention_attr)}$")
    found = [(p, m) for p, m in model.named_modules() if pattern.match(p)]
    if not found:
        if not name_map.attention_classes or type(model).__name__ in name_map.attention_classes:
            if any(_resolve(model, entry.path) is not None for entry in name_map.modules):
                return "", model, name_map
        raise ValueError(
            f"capture: {type(model).__name__} has no module '...layers.{layer}.{name_map.attention_attr}' "
            f"(name map {name_map.key!r})"
        )
    path, module = min(found, key=lambda item: len(item[0]))
    return path, module, name_map


def _resolve(root: Any, dotted: str) -> Any:
    value = root
    for part in dotted.split("."):
        try:
            value = getattr(value, part, None)
        except Exception:  # noqa: BLE001 - a failing engine property means the attribute is not there
            return None
        if value is None:
            return None
    return value


def _hf_config(model: torch.nn.Module, attention: torch.nn.Module) -> Any:
    """The Hugging Face config object the model (or its attention module) carries, or None."""
    for holder in (model, attention):
        config = getattr(holder, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            return config.get_text_config() if hasattr(config, "get_text_config") else config
    return None


def _role_of(name: str) -> TensorRole | None:
    if name in canon.DERIVED or name in canon.DERIVED_SCALES:
        return TensorRole.DERIVED_WEIGHT
    for suffix, role in (
        (".input_scale", TensorRole.INPUT_SCALE),
        (".input", TensorRole.INPUT),
        (".output", TensorRole.OUTPUT),
        (".weight", TensorRole.WEIGHT),
        (".weight_scale_inv", TensorRole.WEIGHT_SCALE),
        (".weight_scale", TensorRole.WEIGHT_SCALE),
    ):
        if name.endswith(suffix):
            return role
    return None


# op prefix (q_b_proj, fused_qkv_a, attention, ...) -> canonical module
_OPS = {module.op: module for module in canon.MODULES.values()}


class LayerCapture:
    """The context manager `md.capture(...)` returns; see the module docstring."""

    def __init__(
        self,
        model: torch.nn.Module,
        out: str | os.PathLike,
        *,
        layer: int,
        names: NameMap | dict | str | None = None,
        cfg: MLAConfig | None = None,
        tokens: Iterable[int] | None = None,
        positions: Iterable[int] | None = None,
        rank: int | None = None,
        tp_size: int | None = None,
        call: int = 0,
        weights: bool = True,
        activations: bool = True,
        engine: EngineInfo | str | None = None,
        mode: str | None = None,
        note: str = "",
        row_output_reduced: bool | None = None,
        close_after: bool = False,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"capture: model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise ValueError(f"capture: layer must be a non-negative int, got {layer!r}")
        if call < 0:
            raise ValueError(f"capture: call must be >= 0, got {call}")
        self.model, self.layer, self.call = model, layer, call
        self.out, self.rank, self.tp_size, self.folder = rank_destination("capture", out, rank, tp_size)
        self.attention_path, self.attention, self.name_map = _find_attention(model, layer, names)
        hf_config = _hf_config(model, self.attention)
        self.model_type = getattr(hf_config, "model_type", None)
        if cfg is None:
            if hf_config is None:
                raise ValueError(
                    f"capture: cannot find the model's config on {type(model).__name__} or its attention module; pass cfg="
                )
            cfg = MLAConfig.from_hf(hf_config.to_dict(), name=self.model_type)
        self.cfg = cfg
        if not isinstance(self.cfg, MLAConfig):
            raise TypeError(f"capture: cfg must be an MLAConfig, got {type(self.cfg).__name__}")
        if self.cfg.arch != "v3":
            raise ValueError(f"capture: {self.cfg.name} is a {self.cfg.arch} layer; the capture maps know V3-style MLA only")
        self.tokens = None if tokens is None else [int(t) for t in tokens]
        if self.tokens is not None and (not self.tokens or min(self.tokens) < 0 or len(set(self.tokens)) != len(self.tokens)):
            raise ValueError(f"capture: tokens must be distinct non-negative row indices, got {self.tokens}")
        self.given_positions = None if positions is None else [int(p) for p in positions]
        self.weights, self.activations = weights, activations
        self.engine = engine
        self.mode, self.note = mode, note
        # Engines whose hooks cannot bracket the forward (SGLang's) let the capture close itself.
        self.close_after = close_after
        self.reduced = self.name_map.row_output_reduced if row_output_reduced is None else row_output_reduced
        self.tensors: dict[str, CapturedTensor] = {}
        self.unrecorded: list[Unrecorded] = []
        self.backend = self._backend_name()
        self.path: Path | None = None
        self._handles: list[Any] = []
        self._calls = 0
        self._stashed: dict[str, tuple] = {}
        self._inside = False
        self._rows: int | None = None
        self._positions: list[int] | None = None
        # Positions of every row of the recorded call, and the rows its kept rows may attend to (context.py).
        self._call_positions: list[int] | None = None
        self._context = ContextRows()
        self._open = False

    def _backend_name(self) -> str | None:
        """The engine's attention backend where the map says where to ask (vLLM: get_name())."""
        if not self.name_map.backend_path:
            return None
        backend = _resolve(self.attention, self.name_map.backend_path)
        get_name = getattr(backend, "get_name", None)
        try:
            return str(get_name()) if callable(get_name) else None
        except Exception:  # noqa: BLE001 - a backend that cannot name itself is simply not named
            return None

    def _released(self, name: str, what: str) -> None:
        """A mapped tensor the engine freed after loading: said in the manifest, not recorded."""
        backend = f"under the {self.backend} attention backend, " if self.backend else ""
        detail = f"{what}: {backend}the engine released it after loading"
        keeps = [d.canonical for d in self.name_map.derived if _resolve(self.attention, d.path) is not None]
        if keeps and name.startswith("kv_b_proj."):
            detail += f" and keeps only what it derived from it ({', '.join(dict.fromkeys(keeps))})"
        self.unrecorded.append(Unrecorded(name, UnrecordedReason.RELEASED, detail))

    # -- entering: weights now, hooks for the forward ---------------------------------------------
    def __enter__(self) -> LayerCapture:
        if self.weights:
            self._record_weights()
            self._record_derived()
        if self.activations:
            self._install_hooks()
        self._open = True
        _ACTIVE.append(self)
        return self

    def _source(self, path: str) -> str:
        return f"{self.attention_path}.{path}" if self.attention_path else path

    def _modules(self):
        found = []
        for entry in self.name_map.modules:
            module = _resolve(self.attention, entry.path)
            if isinstance(module, torch.nn.Module):
                found.append((entry, module))
        if not found:
            raise ValueError(
                f"capture: name map {self.name_map.key!r} found none of its modules "
                f"{[e.path for e in self.name_map.modules]} under {self.attention_path or type(self.attention).__name__}"
            )
        return found

    def _record_weights(self) -> None:
        for entry, module in self._modules():
            info = canon.MODULES[entry.canonical]
            if entry.canonical == canon.ATTENTION:
                continue
            suffixes = LINEAR_TENSORS if info.is_linear else {"weight": "weight"}
            for attr, suffix in suffixes.items():
                value, attrs = local_tensor(_resolve(module, attr))
                if value is None:
                    continue
                name = f"{entry.canonical}.{suffix}"
                if value.numel() == 0:
                    self._released(name, f"{self._source(f'{entry.path}.{attr}')} is an empty {tuple(value.shape)} tensor")
                    continue
                role = _role_of(name)
                if role is TensorRole.INPUT_SCALE:
                    shard, dim, step = Shard.REPLICATED if value.numel() == 1 else Shard.PER_RANK, None, info.step
                elif info.is_linear:
                    shard, dim = canon.weight_shard(
                        self.cfg, entry.canonical, name, tuple(value.shape), self.tp_size, role is TensorRole.WEIGHT_SCALE
                    )
                    step = info.step
                else:
                    shard, dim, step = Shard.REPLICATED, None, info.step
                attrs.update(flags(_resolve(module, attr), module))
                attrs.update(module_facts(module))
                self._keep(name, role, value, step, self._source(f"{entry.path}.{attr}"), attrs, shard, dim)

    def _record_derived(self) -> None:
        for entry in self.name_map.derived:
            raw = _resolve(self.attention, entry.path)
            value, attrs = local_tensor(raw)
            if value is None or entry.canonical in self.tensors:
                continue
            shard, dim = canon.derived_shard(self.cfg, entry.canonical, tuple(value.shape), entry.head_dim, self.tp_size)
            attrs.update(flags(raw, None))
            attrs["engine_attr"] = entry.path.rsplit(".", 1)[-1]
            if entry.axes:
                attrs["axes"] = entry.axes
            if entry.layout:
                attrs["layout"] = entry.layout
            self._keep(
                entry.canonical, TensorRole.DERIVED_WEIGHT, value, None, self._source(entry.path), attrs, shard, dim
            )

    def _install_hooks(self) -> None:
        self._handles.append(self.attention.register_forward_pre_hook(self._layer_pre_hook, with_kwargs=True))
        self._handles.append(self.attention.register_forward_hook(self._layer_hook))
        for entry, module in self._modules():
            if module is self.attention:
                continue
            self._handles.append(module.register_forward_pre_hook(self._op_pre_hook(entry.canonical, entry.path)))
            self._handles.append(module.register_forward_hook(self._op_hook(entry.canonical, entry.path)))

    # -- hooks -------------------------------------------------------------------------------------
    def _layer_pre_hook(self, module, args, kwargs):
        self._calls += 1
        index = self._calls - 1
        self._inside = index == self.call
        if index < self.call:
            # An earlier call: its rows filled the KV cache the recorded call may read (context.py).
            hidden, _ = local_tensor(argument_value(self.name_map.hidden_arg, args, kwargs))
            positions, _ = local_tensor(argument_value(self.name_map.positions_arg, args, kwargs))
            self._context.add(hidden, positions, self.cfg.hidden_size)
        if not self._inside:
            return None
        hidden, _ = local_tensor(argument_value(self.name_map.hidden_arg, args, kwargs))
        if hidden is None:
            raise ValueError(
                f"capture: the call of {self.attention_path or 'the attention module'} has no hidden states "
                f"(argument {self.name_map.hidden_arg})"
            )
        self._stash(canon.LAYER_INPUT, "fused_qkv_a_proj", hidden, False, self.attention_path)
        rows = hidden.numel() // self.cfg.hidden_size
        if self.tokens is not None and max(self.tokens) >= rows:
            raise ValueError(
                f"capture: tokens {[t for t in self.tokens if t >= rows]} are out of range: the layer "
                f"input has {rows} token rows"
            )
        positions, _ = local_tensor(argument_value(self.name_map.positions_arg, args, kwargs))
        if positions is not None:
            flat = positions.reshape(-1)
            if flat.numel() != rows:
                raise ValueError(f"capture: {flat.numel()} positions for {rows} token rows of the layer input")
            self._call_positions = flat.to(torch.long).cpu().tolist()
            kept = flat[self._selection()].to(torch.long).cpu()
            self._positions = kept.tolist()
            self._keep(canon.POSITIONS, TensorRole.INPUT, kept.clone(), "rope", self.attention_path, {}, Shard.REPLICATED, None)
            if self.tokens is not None:
                # The call's rows left out by tokens= are keys of the kept ones.
                left_out = [r for r in range(rows) if r not in set(self.tokens)]
                call_rows = hidden.detach().reshape(-1, hidden.shape[-1])
                self._context.add(call_rows[left_out], flat[left_out], self.cfg.hidden_size)
        elif self.tokens is None and self.given_positions is not None:
            self._call_positions = list(self.given_positions)
        return None

    def _layer_hook(self, module, args, output):
        recorded = self._inside
        if recorded:
            value, _ = local_tensor(_first_tensor(output))
            if value is not None:
                self._stash(canon.LAYER_OUTPUT, "o_proj", value, True, self.attention_path)
        self._inside = False
        if recorded and self.close_after:
            self.__exit__(None, None, None)
        return None

    def _op_pre_hook(self, canonical: str, path: str) -> Callable:
        def hook(module, args):
            if self._inside and args:
                value, _ = local_tensor(_first_tensor(args))
                if value is not None:
                    op = canon.MODULES[canonical].op
                    self._stash(f"{op}.input", canonical, value, False, self._source(path))

        return hook

    def _op_hook(self, canonical: str, path: str) -> Callable:
        def hook(module, args, output):
            if self._inside:
                value, _ = local_tensor(_first_tensor(output))
                if value is not None:
                    op = canon.MODULES[canonical].op
                    self._stash(f"{op}.output", canonical, value, True, self._source(path))

        return hook

    # -- keeping tensors ---------------------------------------------------------------------------
    def _stash(self, name: str, module: str, x: torch.Tensor, output: bool, source: str) -> None:
        """Inside the forward only copy the tensor (engines reuse their buffers); sorting it into rows,
        tokens and shards waits for `_flush`, so the hooks cost the engine's forward as little as possible."""
        if name in self._stashed:
            return  # the first call of a module within the captured layer call is the one kept
        self._stashed[name] = (module, x.detach().to("cpu", copy=True), output, source, tuple(x.shape), tuple(x.stride()))

    def _flush(self) -> None:
        """Record what the hooks stashed, in the order they ran (the layer input first)."""
        stashed, self._stashed = self._stashed, {}
        for name, (module, x, output, source, shape, stride) in stashed.items():
            self._record_activation(name, module, x, output=output, source=source, op_layout=(shape, stride))
        self._restep(canon.LAYER_OUTPUT, "all_reduce")

    def _selection(self) -> list[int] | slice:
        return slice(None) if self.tokens is None else self.tokens

    def _record_activation(
        self, name: str, module: str, x: torch.Tensor, *, output: bool, source: str, op_layout: tuple | None = None
    ) -> None:
        if name in self.tensors:
            return  # the first call of a module within the captured layer call is the one kept
        info = canon.MODULES[module]
        full = info.widths(self.cfg)[1 if output else 0]
        if name == canon.LAYER_INPUT:
            full = self.cfg.hidden_size
        widths = {full, full // self.tp_size}
        shape, stride = op_layout or (tuple(x.shape), tuple(x.stride()))
        attrs: dict[str, AttrValue] = {"op_shape": str(shape), "op_stride": str(stride)}
        split = next((k for k in range(1, x.dim() + 1) if math.prod(x.shape[x.dim() - k :]) in widths), None)
        if split is None:
            # Not (rows, features) of the expected widths: kept whole and per rank, as evidence.
            self._keep(name, _role_of(name) or TensorRole.OUTPUT, exact_copy(x), info.step, source, attrs, Shard.PER_RANK, None)
            return
        width = math.prod(x.shape[x.dim() - split :])
        rows = x.reshape(-1, width)
        if self._rows is None:
            self._rows = rows.shape[0]
            if self.tokens is not None and max(self.tokens) >= self._rows:
                raise ValueError(
                    f"capture: tokens {[t for t in self.tokens if t >= self._rows]} are out of range: the layer "
                    f"input has {self._rows} token rows"
                )
        elif rows.shape[0] != self._rows:
            matched = rows_by_position(rows, self._call_positions)
            if matched is None:
                # Rows that are not the call's and cannot be matched to them: kept whole, per rank, as evidence.
                attrs["rows"] = f"{rows.shape[0]} rows, not the {self._rows} of the layer input"
                self._keep(name, _role_of(name) or TensorRole.OUTPUT, exact_copy(x), info.step, source, attrs, Shard.PER_RANK, None)
                return
            attrs["rows"] = f"{rows.shape[0]} rows indexed by position (a KV cache), kept at the call's positions"
            rows = matched
        kept = rows[self._selection()].detach().to("cpu", copy=True).contiguous()
        reduced = self.reduced if module == "o_proj" else True
        shard, dim = canon.activation_shard(self.cfg, module, name, width, self.tp_size, output, reduced)
        if name == canon.LAYER_INPUT:
            shard, dim = Shard.REPLICATED, None
        role = TensorRole.OUTPUT if output else TensorRole.INPUT
        self._keep(name, role, kept, info.step, source, attrs, shard, dim)

    def _restep(self, name: str, step: str) -> None:
        """The layer's output ends the all-reduce step (an identity at TP1), not o_proj's."""
        if name in self.tensors:
            self.tensors[name] = replace(self.tensors[name], step=step)

    def _keep(self, name, role, tensor, step, source, attrs, shard, dim) -> None:
        self.tensors[name] = CapturedTensor(
            name=name, role=role, tensor=tensor, step=step, source_name=source, attrs=attrs, shard=shard, shard_dim=dim
        )

    def record(
        self,
        name: str,
        tensor: torch.Tensor,
        *,
        role: TensorRole | str | None = None,
        step: str | None = None,
        shard: Shard | str | None = None,
        shard_dim: int | None = None,
        attrs: dict[str, AttrValue] | None = None,
    ) -> None:
        """Keep `tensor` under the canonical `name`, byte for byte (dtype, shape, strides, offset): what
        the hooks cannot see, such as ``q_b_proj.input_scale`` produced inside a fused kernel.

        The role follows from the name's suffix (.input_scale, .input, .output, .weight, W_UK ...)
        unless given; the shard rule follows from the name and the tensor's size, and is PER_RANK for
        names the rules do not know, unless given. It is kept whole even when `tokens` chose some rows: an
        activation scale's byte order is the evidence and a misread mixes every token's scales, so the
        explanation reads the whole buffer and compares the kept tokens' rows.
        """
        if not self._open:
            raise RuntimeError(f"capture.record({name!r}): the capture is not open (use it inside its with block)")
        if name in self.tensors:
            raise ValueError(f"capture.record: {name!r} was already recorded on rank {self.rank}")
        value, found = local_tensor(tensor)
        if value is None:
            raise TypeError(f"capture.record({name!r}): expected a tensor, got {type(tensor).__name__}")
        kind = TensorRole(role) if role is not None else _role_of(name)
        if kind is None:
            raise ValueError(
                f"capture.record({name!r}): cannot tell its role from the name; pass role= (one of "
                f"{[r.value for r in TensorRole]})"
            )
        op = name.split(".", 1)[0]
        module = _OPS.get(op)
        if step is None and module is not None:
            step = module.step
        if shard is None:
            shard, shard_dim = self._infer_shard(name, kind, module, value)
        found.update(attrs or {})
        self._keep(name, kind, exact_copy(value), step, name, found, Shard(shard), shard_dim)

    def _infer_shard(self, name, role, module, value) -> tuple[Shard, int | None]:
        try:
            if role is TensorRole.DERIVED_WEIGHT:
                return canon.derived_shard(self.cfg, name, tuple(value.shape), 0, self.tp_size)
            if module is not None and role in (TensorRole.INPUT, TensorRole.OUTPUT, TensorRole.INPUT_SCALE):
                group = GROUP_SIZE if role is TensorRole.INPUT_SCALE else 1
                output = role is TensorRole.OUTPUT
                reduced = self.reduced if module.name == "o_proj" else True
                return canon.activation_shard(self.cfg, module.name, name, value.shape[-1], self.tp_size, output, reduced, group)
        except ValueError:
            pass
        return (Shard.REPLICATED, None) if self.tp_size == 1 else (Shard.PER_RANK, None)

    # -- leaving: write the rank's folder ----------------------------------------------------------
    def __exit__(self, exc_type, exc, tb) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._open = False
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if exc_type is not None:
            return False
        self._flush()
        self._keep_context()
        self.path = write_rank(self.out, self.manifest(), RankCapture(self.rank, self.tp_size, dict(self.tensors)))
        return False

    def _keep_context(self) -> None:
        """context.input / context.positions: the rows the kept rows may attend to beyond themselves."""
        kept = self._positions if self._positions is not None else self.given_positions
        if not self.activations or not kept or CONTEXT_INPUT in self.tensors:
            return
        found = self._context.up_to(max(kept))
        if found is None:
            return
        rows, positions = found
        attrs: dict[str, AttrValue] = {"incomplete": True} if self._context.unknown else {}
        self._keep(CONTEXT_INPUT, TensorRole.INPUT, rows, None, self.attention_path, attrs, Shard.REPLICATED, None)
        self._keep(CONTEXT_POSITIONS, TensorRole.INPUT, positions, None, self.attention_path, {}, Shard.REPLICATED, None)

    def _mode(self, positions: list[int]) -> str | None:
        """The mode given, else the one the call's positions show (context.py); None when they are unknown."""
        if self.mode is not None or not self.activations:
            return self.mode
        if self._call_positions is None or not positions:
            return None
        return inferred_mode(positions, self._call_positions)

    def _key_positions(self, positions: list[int]) -> list[int] | None:
        """Positions of the keys the kept rows attended to (context.py), None when the call's are unknown."""
        if not self.activations or self._call_positions is None or not positions:
            return None
        return key_positions(positions, self._call_positions, self.mode)

    def manifest(self) -> CaptureManifest:
        """What this rank's capture shares with the other ranks' (kept tokens, positions, config, ...)."""
        if self.activations and self._calls <= self.call:
            raise RuntimeError(
                f"capture: {self.attention_path or 'the attention module'} (layer {self.layer}) was called "
                f"{self._calls} time(s) inside the capture, so call {self.call} was not recorded; run the model "
                "inside the with block, or pass activations=False for weights only"
            )
        tokens: list[int] = []
        positions: list[int] = []
        if self.activations:
            tokens = list(range(self._rows or 0)) if self.tokens is None else list(self.tokens)
            positions = self._positions_for(tokens)
        versions = installed_versions()
        return CaptureManifest(
            engine=self._engine(versions),
            cfg=self.cfg,
            layer=self.layer,
            tp_size=self.tp_size,
            positions=positions,
            tokens=tokens,
            model_type=self.model_type,
            mode=self._mode(positions),
            key_positions=self._key_positions(positions),
            versions=versions,
            note=self.note,
            attention_backend=self.backend,
            unrecorded=tuple(self.unrecorded),
        )

    def _positions_for(self, tokens: list[int]) -> list[int]:
        given = self.given_positions
        if given is not None and len(given) != len(tokens):
            raise ValueError(f"capture: {len(given)} positions given for {len(tokens)} kept token rows")
        if self._positions is not None:
            if given is not None and given != self._positions:
                raise ValueError(
                    f"capture: the positions given ({given[:8]}...) differ from those the layer was called with "
                    f"({self._positions[:8]}...)"
                )
            return self._positions
        if given is None:
            raise ValueError(
                f"capture: the layer's call carried no positions (map {self.name_map.key!r} reads "
                f"{self.name_map.positions_arg}); pass positions= for the kept tokens"
            )
        self._keep(canon.POSITIONS, TensorRole.INPUT, torch.tensor(given), "rope", "positions=", {}, Shard.REPLICATED, None)
        return given

    def _engine(self, versions: dict[str, str]) -> EngineInfo:
        if isinstance(self.engine, EngineInfo):
            return self.engine
        name = self.engine or self.name_map.engine
        running = running_version(name)
        if running is not None:
            return EngineInfo(name, running)
        return EngineInfo(name, versions.get(name, self.name_map.version if name == self.name_map.engine else None))


def capture(model: torch.nn.Module, out: str | os.PathLike, **options: Any) -> LayerCapture:
    """Record one MLA layer of `model` on this rank into `out` (a context manager; see LayerCapture)."""
    return LayerCapture(model, out, **options)


def capture_call(model: torch.nn.Module, out: str | os.PathLike, run: Callable[[], Any], **options: Any) -> Path:
    """The function form: run `run()` inside a capture of `model` and return the rank folder written."""
    with LayerCapture(model, out, **options) as cap:
        run()
    assert cap.path is not None
    return cap.path


def record(name: str, tensor: torch.Tensor, **options: Any) -> int:
    """Record `tensor` into every capture open in this process (engine code that cannot reach the
    capture object calls this); returns how many captures took it (0 when none is open)."""
    for cap in _ACTIVE:
        cap.record(name, tensor, **options)
    return len(_ACTIVE)
